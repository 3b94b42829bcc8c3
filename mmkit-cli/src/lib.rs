//! The library half of the `mmkit` command: the trace parser of `mmkit
//! replay` (format in `docs/trace-format.md`), exposed so that the fuzz
//! target (`fuzz/fuzz_targets/trace.rs`) and tests can drive it directly.
//! Everything else of the command lives in the binary.

pub mod linux_trace;
pub mod trace;
