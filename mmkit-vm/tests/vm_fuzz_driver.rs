//! The seeded random driver over the `vm` fuzz target (the byte-ownership
//! model of `tests/models/vm.rs`, also run by cargo-fuzz from `fuzz/`):
//! pseudo-random bytes decoded into operations on a real `Vm`, with every
//! area read back and `Vm::check` after each step.
//!
//! 200 inputs by default (each maps real memory), `MMKIT_FUZZ_ITERS` and
//! `MMKIT_FUZZ_SEED` scale and vary a run. A finding becomes a test below.
#![cfg(target_os = "linux")]

#[path = "models/vm.rs"]
mod model;
#[path = "../../mmkit/tests/fuzz/seeded.rs"]
mod seeded;

#[test]
fn vm() {
    seeded::drive("vm", 200, model::fuzz);
}

#[test]
fn empty_and_tiny_inputs() {
    for data in [
        &[][..],
        &[0],
        &[1],
        &[0xff; 7],
        &[1, 2, 3, 4, 5, 6, 7, 8, 9],
    ] {
        model::fuzz(data);
    }
}
