//! `mmkit replay` end to end: every shipped trace on both allocators must
//! print exactly its `.expected` file; malformed traces exit with status 2
//! and name the line.

mod common;
use common::mmkit;

use std::path::{Path, PathBuf};
use std::process::Command;

fn traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    v.sort();
    v
}

#[test]
fn shipped_traces_match_their_expected_output() {
    let all = traces();
    assert!(all.len() >= 5, "the example traces are shipped");
    for t in all {
        let expected = std::fs::read_to_string(t.with_extension("expected")).unwrap();
        for alloc in ["vmap", "baseline"] {
            let out = mmkit(
                &[
                    "replay",
                    "--check",
                    "--allocator",
                    alloc,
                    t.to_str().unwrap(),
                ],
                b"",
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{} on {alloc}: {stderr}", t.display());
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                expected,
                "{} on {alloc}",
                t.display()
            );
            assert!(
                stderr.contains("commands on"),
                "summary on stderr: {stderr}"
            );
        }
    }
}

#[test]
fn stdin_is_read_for_dash() {
    let out = mmkit(
        &["replay", "-"],
        "space 0 0x100\nalloc x 0x10 align 0x20\nfree y\n".as_bytes(),
    );
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "x 0x0\ny notallocated\n"
    );
}

#[test]
fn malformed_trace_exits_2_naming_the_line() {
    let trace = "space 0 0x1000\nalloc a 0x10\n# fine so far\nalloc b 0x10 aling 4\nalloc c 1\n";
    for alloc in ["vmap", "baseline"] {
        let out = mmkit(&["replay", "--allocator", alloc, "-"], trace.as_bytes());
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("line 4"), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "nothing runs before the whole trace parses"
        );
    }
}

#[test]
fn missing_file_exits_2() {
    let out = mmkit(&["replay", "/nonexistent/mmkit.trace"], b"");
    assert_eq!(out.status.code(), Some(2));
}

/// A trace file with `body` in the temporary directory, removed on drop.
struct TempTrace(PathBuf);

impl TempTrace {
    fn new(name: &str, body: &[u8]) -> TempTrace {
        let path = std::env::temp_dir().join(format!("mmkit-{}-{name}.trace", std::process::id()));
        std::fs::write(&path, body).unwrap();
        TempTrace(path)
    }
}

impl Drop for TempTrace {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Bytes that are not UTF-8 are a malformed line like
/// any other: exit 2, the line named, nothing replayed.
#[test]
fn non_utf8_trace_exits_2_naming_the_line() {
    let t = TempTrace::new(
        "non-utf8",
        b"space 0 0x1000\nalloc a 0x10 \xff\nalloc b 1\n",
    );
    let out = mmkit(&["replay", t.0.to_str().unwrap()], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2") && stderr.contains("UTF-8"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// A trace is streamed, not held: 1.2 million commands (12 MB)
/// replay under a 64 MiB address-space limit, where holding the parsed
/// trace (about 8 bytes for each byte of trace) cannot fit.
#[cfg(target_os = "linux")]
#[test]
fn a_large_trace_replays_in_bounded_memory() {
    let mut body = b"space 0 0x100000000\n".to_vec();
    for _ in 0..600_000 {
        body.extend_from_slice(b"alloc a 4096\nfree a\n");
    }
    let t = TempTrace::new("large", &body);
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 65536 && exec \"$0\" replay \"$1\" | tail -1")
        .arg(env!("CARGO_BIN_EXE_mmkit"))
        .arg(&t.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a 0x0\n", "{stderr}");
    assert!(stderr.contains("1200000 commands"), "{stderr}");
}
