//! Seeded pseudo-random inputs for the fuzz targets, so `cargo test` runs
//! them on any toolchain: shared by `mmkit/tests/fuzz_driver.rs` and
//! `mmkit-vm/tests/vm_fuzz_driver.rs` (included by path).
//!
//! `MMKIT_FUZZ_ITERS` and `MMKIT_FUZZ_SEED` (default 0) scale and vary a run;
//! a failure prints the target, seed and input.

/// xorshift64*: deterministic, dependency-free bytes.
pub fn bytes(seed: u64) -> Vec<u8> {
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

/// Runs `target` on `MMKIT_FUZZ_ITERS` (default `iters`) seeded inputs.
pub fn drive(name: &str, iters: u64, target: fn(&[u8])) {
    let (iters, seed0) = (env("MMKIT_FUZZ_ITERS", iters), env("MMKIT_FUZZ_SEED", 0));
    for i in 0..iters {
        let seed = seed0.wrapping_add(i);
        let data = bytes(seed);
        let r = std::panic::catch_unwind(|| target(&data));
        if r.is_err() {
            panic!("target {name}: seed {seed} failed; input {data:?}");
        }
    }
}
