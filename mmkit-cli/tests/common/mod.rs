//! Shared by the end-to-end tests: run the `mmkit` binary.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `mmkit args` with `stdin` as its standard input and collects its
/// output. A write error on stdin is ignored: the binary may stop reading
/// early (a malformed trace, a refused option).
pub fn mmkit(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mmkit binary runs");
    let mut input = child.stdin.take().expect("stdin is piped");
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("the mmkit binary ends")
}
