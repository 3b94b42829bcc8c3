//! The seeded random driver over the fuzz targets (`tests/fuzz/mod.rs`):
//! the same decoders, models and checks as `fuzz/` (cargo-fuzz), fed
//! pseudo-random bytes, so `cargo test` runs them on any toolchain.
//!
//! `MMKIT_FUZZ_ITERS` (default 2000 per target) and `MMKIT_FUZZ_SEED` (default
//! 0) scale and vary a run; a failure prints the target, seed and input.
//! A finding of either engine becomes a regression test at the end of this
//! file: its input bytes, run through its target with [`regression`]. None
//! has been recorded yet; `empty_and_tiny_inputs` runs hand-picked edge
//! inputs through every target.

mod fuzz;

#[path = "fuzz/seeded.rs"]
mod seeded;

fn drive(name: &str) {
    drive_n(name, 2000);
}

/// [`drive`] with `iters` inputs (for targets whose every step checks
/// several structures).
fn drive_n(name: &str, iters: u64) {
    let (_, target) = fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a target");
    seeded::drive(name, iters, *target);
}

#[test]
fn vmap() {
    drive("vmap");
}

/// Fewer inputs: each first cuts a space into 640 areas (with
/// `debug-check`, a full check after each).
#[test]
fn vmap_deep() {
    drive_n("vmap_deep", 12);
}

#[test]
fn linear_vmap() {
    drive("linear_vmap");
}

#[test]
fn vblock() {
    drive("vblock");
}

#[test]
fn vmap_policy() {
    drive("vmap_policy");
}

#[test]
fn percpu() {
    drive("percpu");
}

#[test]
fn area_map() {
    drive("area_map");
}

#[test]
fn buddy() {
    drive("buddy");
}

#[test]
fn vmap_sized() {
    drive("vmap_sized");
}

#[test]
fn vmap_nodes() {
    drive_n("vmap_nodes", 300);
}

#[test]
fn empty_and_tiny_inputs() {
    for (_, target) in fuzz::TARGETS {
        for data in [&[][..], &[0], &[0xff; 7], &[1, 2, 3, 4, 5, 6, 7, 8, 9]] {
            target(data);
        }
    }
}

/// Runs one recorded input through target `name` (for the regression tests
/// of findings).
#[allow(dead_code)]
fn regression(name: &str, data: &[u8]) {
    let (_, target) = fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a target");
    target(data);
}
