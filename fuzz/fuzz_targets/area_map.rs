//! cargo-fuzz target `area_map`: see `mmkit/tests/fuzz/mod.rs`.
#![no_main]

#[path = "../../mmkit/tests/fuzz/mod.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (_, target) = harness::TARGETS
        .iter()
        .find(|(n, _)| *n == "area_map")
        .expect("a target");
    target(data);
});
