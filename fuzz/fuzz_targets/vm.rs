//! cargo-fuzz target `vm`: mmkit-vm over real memory against its
//! byte-ownership model; see `mmkit-vm/tests/models/vm.rs`.
#![no_main]

#[path = "../../mmkit-vm/tests/models/vm.rs"]
mod model;

libfuzzer_sys::fuzz_target!(|data: &[u8]| model::fuzz(data));
