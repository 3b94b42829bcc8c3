//! cargo-fuzz target `vmap_nodes`: see `mmkit/tests/fuzz/mod.rs`.
#![no_main]

#[path = "../../mmkit/tests/fuzz/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, target) = harness::TARGETS
        .iter()
        .find(|(n, _)| *n == "vmap_nodes")
        .expect("a target");
    target(data);
});
