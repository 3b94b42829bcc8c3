//! `mmkit replay TRACE`: the trace format of DESIGN.md.

use std::path::Path;
use std::process::ExitCode;

use crate::AllocatorKind;

/// Replays `trace` and prints one line per alloc and per failed free.
pub fn main(_trace: &Path, _check: bool, _allocator: AllocatorKind) -> ExitCode {
    eprintln!("mmkit replay: not built yet");
    ExitCode::from(2)
}
