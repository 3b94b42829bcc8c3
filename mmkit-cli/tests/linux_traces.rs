//! The committed captures of Linux 6.12 (boot, test_vmalloc, at 1 and 2
//! vCPUs, in QEMU; `traces/linux/*.ftrace.xz`, the text of
//! /sys/kernel/tracing/trace, with kprobe events on each purge step):
//! imported, replayed by Linux's free tree
//! (in Linux's shape) with Linux's node pools, judged against Linux's own addresses; and replayed
//! by the exact lowest fit on both of its allocators, which must agree;
//! and replayed by the exact lowest fit and best fit against their
//! brute-force model, which must agree at every step.
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
    assert_eq!(judge("smp1"), (13_640, 13_640, 13_640));
}

#[test]
fn two_vcpus_linux_policy_against_linux() {
    assert_eq!(judge("smp2"), (20_453, 20_453, 20_453));
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

/// The policy model of mmkit's own tests (a sorted list of free ranges
/// scanned linearly) and a replay of a capture on it beside the tree.
#[allow(dead_code)]
mod model {
    include!("../../mmkit/tests/models/policy.rs");

    use mmkit_cli::trace::{check_header, Cmd, Commands};

    /// Replays `trace`'s requests, frees and purges with `place` on the
    /// tree and on the model, comparing every answer, and the free blocks
    /// and the tree's `check()` after each purge and at the end. Returns
    /// the allocations that succeeded.
    pub fn replay(trace: &str, place: Place) -> Result<u64, String> {
        let h = check_header(trace.as_bytes()).map_err(|e| e.to_string())?;
        let (mut v, mut m) = fresh(h.space)?;
        let mut ids = std::collections::HashMap::new();
        let mut placed = 0;
        for item in Commands::new(trace.as_bytes()) {
            let (line, cmd) = item.map_err(|e| e.to_string())?;
            let at = |e: String| format!("line {line}: {e}");
            match cmd {
                Cmd::Alloc {
                    id,
                    size,
                    align,
                    range,
                    ..
                } => {
                    let mut req = Request::bytes(size)
                        .ok_or_else(|| at("a zero size".into()))?
                        .align(align)
                        .policy(place.policy());
                    if let Some((lo, hi)) = range {
                        req = req.within(lo..hi);
                    }
                    let got = v.allocate(req);
                    let want = m.allocate(size, align, range, place.policy());
                    if let Ok(a) = got {
                        ids.insert(id, a);
                        placed += 1;
                    }
                    same(got, want).map_err(at)?;
                }
                Cmd::Lazy(id) | Cmd::Free(id) => {
                    if let Some(a) = ids.remove(&id) {
                        let i = m.live.range(..a).count();
                        step(&mut v, &mut m, &Op::FreeLazy(i)).map_err(at)?;
                    }
                }
                Cmd::Purge | Cmd::PurgeFull => {
                    step(&mut v, &mut m, &Op::Purge).map_err(at)?;
                    same_free(&v, &m).map_err(at)?;
                }
                _ => {}
            }
        }
        same_free(&v, &m)?;
        Ok(placed)
    }

    /// The tree's check, and its free blocks against the model's.
    fn same_free(v: &VmapAllocator, m: &Model) -> Result<(), String> {
        v.check().map_err(|e| e.to_string())?;
        let free: Vec<_> = v.free_blocks().map(|r| (r.start, r.end)).collect();
        same(free, m.free.clone())
    }
}

/// The exact policies stay exact on Linux's requests: lowest fit and best
/// fit answer every request of both captures as their brute-force model
/// does, with the same free blocks after every purge.
#[test]
fn exact_policies_agree_with_their_model_on_the_captures() {
    for name in ["smp1", "smp2"] {
        let trace = import(capture(name).as_bytes()).unwrap().trace();
        for place in [model::Place::Lowest, model::Place::BestFit] {
            let placed =
                model::replay(&trace, place).unwrap_or_else(|e| panic!("{name} {place:?}: {e}"));
            assert!(placed > 13_000, "{name} {place:?}: {placed} placed");
        }
    }
}
