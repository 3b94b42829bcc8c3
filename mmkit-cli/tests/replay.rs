//! `mmkit replay` end to end: every shipped trace on both allocators must
//! print exactly its `.expected` file; malformed traces exit with status 2
//! and name the line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn mmkit(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mmkit binary runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

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
                None,
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
        Some("space 0 0x100\nalloc x 0x10 align 0x20\nfree y\n"),
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
        let out = mmkit(&["replay", "--allocator", alloc, "-"], Some(trace));
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
    let out = mmkit(&["replay", "/nonexistent/mmkit.trace"], None);
    assert_eq!(out.status.code(), Some(2));
}
