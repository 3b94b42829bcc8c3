//! Hostile input for the `mmkit` binary: empty, binary, non-UTF-8,
//! enormous-number and truncated traces, a directory, a missing file, a
//! closed stdout, absurd soak options. Each exits with a clear message on
//! stderr and never panics (exit status 101).

mod common;
use common::mmkit;

use std::io::Write;
use std::process::{Command, Output, Stdio};

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

/// The trace parser's seeded fuzz driver: random traces built from real
/// commands, numbers at the edges and garbage tokens. Each replay must end
/// without a panic, and when both allocators accept a trace their outputs
/// must be identical (the contract's lowest fit is unique).
#[test]
fn random_traces_replay_identically_or_fail_cleanly() {
    let iters: u64 = std::env::var("MMKIT_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let words = [
        "alloc",
        "free",
        "lazy",
        "freeat",
        "purge",
        "lazymax",
        "space",
        "align",
        "range",
        "#",
        "0",
        "1",
        "7",
        "4096",
        "0x1000",
        "0xffffffffffffffff",
        "18446744073709551616",
        "-1",
        "a",
        "b",
        "c",
        "0x",
        "\u{fffd}",
        "",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..iters {
        let mut t = String::from(
            ["space 0 0x100000\n", "space 1 0xffffffffffffffff\n", ""][i as usize % 3],
        );
        for _ in 0..next() % 60 {
            let (id, v) = (next() % 8, next() % 0x3000 + 1);
            let good = match next() % 8 {
                0..=2 => format!("alloc i{id} {v} align {}", 1u64 << (next() % 14)),
                3 => format!("free i{id}"),
                4 => format!("lazy i{id}"),
                5 => "purge".to_string(),
                6 => format!("lazymax {}", next() % 0x8000),
                _ => String::new(),
            };
            if !good.is_empty() && next() % 16 != 0 {
                t.push_str(&good);
                t.push('\n');
                continue;
            }
            let n = 1 + next() % 6;
            let line: Vec<&str> = (0..n)
                .map(|_| words[(next() % words.len() as u64) as usize])
                .collect();
            t.push_str(&line.join(" "));
            t.push('\n');
        }
        let a = mmkit(
            &["replay", "--check", "--allocator", "vmap", "-"],
            t.as_bytes(),
        );
        let b = mmkit(
            &["replay", "--check", "--allocator", "baseline", "-"],
            t.as_bytes(),
        );
        no_panic(&t, &a);
        no_panic(&t, &b);
        assert_eq!(a.status.code(), b.status.code(), "{t}");
        assert_eq!(a.stdout, b.stdout, "outputs differ on:\n{t}");
    }
}
