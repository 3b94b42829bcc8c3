//! The committed captures of Linux 6.12 (boot, test_vmalloc, at 1 and 2
//! vCPUs, in QEMU; `traces/linux/*.ftrace.xz`, the text of
//! /sys/kernel/tracing/trace): imported, replayed by `Policy::Linux` with
//! Linux's node pools, judged against Linux's own addresses; and replayed
//! by the exact lowest fit on both of its allocators, which must agree.
//! The counts are the ones docs/linux-replay.md reports.

use std::process::Command;

use mmkit_cli::linux_trace::import;
use mmkit_cli::linux_trace::judge::{answers, replay};

/// The ftrace text of a committed capture (`xz -dc`).
fn capture(name: &str) -> String {
    let path = format!(
        "{}/traces/linux/{name}.ftrace.xz",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new("xz")
        .args(["-dc", &path])
        .output()
        .expect("xz (xz-utils) decompresses the committed captures");
    assert!(out.status.success(), "xz -dc {path}");
    String::from_utf8(out.stdout).unwrap()
}

/// (judged same, free-running same, allocations) for a capture.
fn judge(name: &str) -> (u64, u64, u64) {
    let t = import(capture(name).as_bytes()).unwrap();
    let linux = answers(&t.expected).unwrap();
    let judged = replay(&t.trace(), &linux, true).unwrap();
    let free = replay(&t.trace(), &linux, false).unwrap();
    assert_eq!(judged.allocs, free.allocs);
    (judged.same, free.same, judged.allocs)
}

#[test]
fn one_vcpu_linux_policy_against_linux() {
    assert_eq!(judge("smp1"), (13_617, 13_401, 13_637));
}

#[test]
fn two_vcpus_linux_policy_against_linux() {
    assert_eq!(judge("smp2"), (11_886, 7_387, 20_449));
}

/// The exact lowest fit answers the same on the tree and on the busy
/// list it replaced, on both captures.
#[test]
fn exact_lowest_fit_agrees_with_its_model_on_the_captures() {
    for name in ["smp1", "smp2"] {
        let t = import(capture(name).as_bytes()).unwrap();
        let path =
            std::env::temp_dir().join(format!("mmkit-linux-{name}-{}.trace", std::process::id()));
        std::fs::write(&path, t.trace()).unwrap();
        let run = |allocator: &str| {
            let out = Command::new(env!("CARGO_BIN_EXE_mmkit"))
                .args(["replay", "--allocator", allocator])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{allocator}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        let (tree, list) = (run("vmap"), run("baseline"));
        let _ = std::fs::remove_file(&path);
        assert_eq!(tree.len(), list.len());
        assert!(tree == list, "{name}: the tree and the busy list differ");
    }
}
