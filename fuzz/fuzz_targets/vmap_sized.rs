//! cargo-fuzz target `vmap_sized`: see `mmkit/tests/fuzz/mod.rs`.
#![no_main]

#[path = "../../mmkit/tests/fuzz/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, target) = harness::TARGETS
        .iter()
        .find(|(n, _)| *n == "vmap_sized")
        .expect("a target");
    target(data);
});
