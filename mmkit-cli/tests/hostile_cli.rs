//! Hostile input for the `mmkit` binary: empty, binary, non-UTF-8,
//! enormous-number and truncated traces, a directory, a missing file, a
//! closed stdout, absurd soak options. Each exits with a clear message on
//! stderr and never panics (exit status 101).

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn mmkit(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mmkit binary runs");
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin); // the binary may stop reading early
    drop(input);
    child.wait_with_output().unwrap()
}

/// No panic; a failure says why on stderr.
fn no_panic(what: &str, o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(101), "{what}: panicked: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    if !o.status.success() {
        assert!(!err.trim().is_empty(), "{what}: failed without a message");
    }
}

#[test]
fn hostile_traces_are_refused_cleanly() {
    let big = "9".repeat(400);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("binary", (0..=255u8).cycle().take(4096).collect()),
        ("non-UTF-8", b"space 0 4096\nalloc a 1\xff\xfe\n".to_vec()),
        ("enormous number", format!("space 0 {big}\n").into_bytes()),
        ("enormous hex", b"space 0 0x1ffffffffffffffff\n".to_vec()),
        ("truncated", b"space 0 4096\nalloc a".to_vec()),
        (
            "truncated align",
            b"space 0 4096\nalloc a 16 align".to_vec(),
        ),
        (
            "space at u64::MAX",
            b"space 0xffffffffffffffff 0xffffffffffffffff\n".to_vec(),
        ),
        ("inverted space", b"space 10 5\nalloc a 1\n".to_vec()),
        ("no space", b"alloc a 1\n".to_vec()),
        ("NUL bytes", b"space 0 4096\n\0\0\0\n".to_vec()),
    ];
    for (what, input) in cases {
        for alloc in ["vmap", "baseline"] {
            let o = mmkit(&["replay", "--check", "--allocator", alloc, "-"], &input);
            no_panic(what, &o);
        }
    }
}

#[test]
fn directory_and_missing_file_are_refused_cleanly() {
    let dir = env!("CARGO_MANIFEST_DIR");
    for path in [dir, "/nonexistent/mmkit.trace", ""] {
        let o = mmkit(&["replay", path], b"");
        no_panic(path, &o);
        assert!(!o.status.success(), "{path} accepted");
    }
}

/// `mmkit replay … | head -1`: the reader goes away.
#[test]
fn closed_stdout_does_not_panic_replay() {
    let mut trace = String::from("space 0 0x100000000\n");
    for i in 0..20_000 {
        trace.push_str(&format!("alloc a{i} 4096\n"));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args(["replay", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // closed before anything is read
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(trace.as_bytes());
    drop(input);
    let o = child.wait_with_output().unwrap();
    no_panic("replay | head", &o);
}

#[test]
fn absurd_soak_options_are_refused() {
    for args in [
        &["soak", "--threads", "0"][..],
        &["soak", "--check-every", "0"],
        &["soak", "--ops", "-1"],
        &["soak", "--ops", "99999999999999999999999"],
    ] {
        let o = mmkit(args, b"");
        no_panic(&args.join(" "), &o);
        assert!(!o.status.success(), "{args:?} accepted");
    }
    let o = mmkit(&["soak", "--ops", "0"], b"");
    no_panic("soak --ops 0", &o);
    let o = mmkit(
        &["soak", "--ops", "20000", "--threads", "3", "--seed", "7"],
        b"",
    );
    no_panic("soak", &o);
    assert!(o.status.success());
}
