//! The seeded random driver over the fuzz targets (`tests/fuzz/mod.rs`):
//! the same decoders, models and checks as `fuzz/` (cargo-fuzz), fed
//! pseudo-random bytes, so `cargo test` runs them on any toolchain.
//!
//! `MMKIT_FUZZ_ITERS` (default 2000 per target) and `MMKIT_FUZZ_SEED` (default
//! 0) scale and vary a run; a failure prints the target, seed and input.
//! Every finding of either engine is added below as a regression test.

mod fuzz;

/// xorshift64*: deterministic, dependency-free bytes.
fn bytes(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let len = (next() % 4096) as usize;
    (0..len).map(|_| next() as u8).collect()
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn drive(name: &str) {
    let (_, target) = fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a target");
    let (iters, seed0) = (env("MMKIT_FUZZ_ITERS", 2000), env("MMKIT_FUZZ_SEED", 0));
    for i in 0..iters {
        let seed = seed0.wrapping_add(i);
        let data = bytes(seed);
        let r = std::panic::catch_unwind(|| target(&data));
        if r.is_err() {
            panic!("target {name}: seed {seed} failed; input {data:?}");
        }
    }
}

#[test]
fn vmap() {
    drive("vmap");
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
fn empty_and_tiny_inputs() {
    for (_, target) in fuzz::TARGETS {
        for data in [&[][..], &[0], &[0xff; 7], &[1, 2, 3, 4, 5, 6, 7, 8, 9]] {
            target(data);
        }
    }
}
