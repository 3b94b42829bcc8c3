//! Model test: random vmalloc / vfree / vrealloc / vm_map_ram / vmap /
//! purge sequences against a byte-ownership model, with real reads and
//! writes. Every live area must hold exactly the bytes the model says,
//! a pattern written through one alias must read back through every other,
//! and `Vm::check` must pass after every step.
#![cfg(target_os = "linux")]

use mmkit_vm::MirrorRing;
use proptest::prelude::*;

#[path = "models/vm.rs"]
mod model;
use model::{finish, read, small_vm, write, Model, Op, PAGE};

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..40).prop_map(|pages| Op::Vmalloc { pages }),
        3 => any::<usize>().prop_map(|pick| Op::Vfree { pick }),
        2 => (any::<usize>(), 1u64..80).prop_map(|(pick, pages)| Op::Vrealloc { pick, pages }),
        4 => (any::<usize>(), any::<u64>(), any::<u8>())
            .prop_map(|(pick, at, byte)| Op::Write { pick, at, byte }),
        2 => (0u8..4).prop_map(|order| Op::AllocFrames { order }),
        3 => (any::<usize>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, vmap)| Op::MapRam { pick, vmap }),
        2 => any::<usize>().prop_map(|pick| Op::UnmapRam { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeFrames { pick }),
        1 => Just(Op::Purge),
        1 => Just(Op::Aliases),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn vm_matches_byte_model(ops in prop::collection::vec(op(), 1..120), lazy in any::<bool>()) {
        let vm = small_vm(lazy);
        let mut model = Model::default();
        for op in ops {
            model.step(&vm, op);
            model.verify(&vm);
        }
        // Everything goes back: every grown frame is free again.
        finish(&vm, &mut model);
    }
}

#[test]
fn mirror_ring_reads_every_byte_through_both_copies() {
    let vm = small_vm(true);
    let mut ring = MirrorRing::new(&vm, 2 * PAGE as usize).unwrap();
    let cap = ring.capacity();
    let mut next = 0u8;
    let mut expect = 0u8;
    for round in 0..50 {
        let chunk: Vec<u8> = (0..(round * 97) % cap + 1)
            .map(|_| {
                next = next.wrapping_add(1);
                next
            })
            .collect();
        assert_eq!(ring.push(&chunk), chunk.len());
        let mut out = vec![0; chunk.len()];
        assert_eq!(ring.pop(&mut out), chunk.len());
        for b in out {
            expect = expect.wrapping_add(1);
            assert_eq!(b, expect);
        }
        vm.check().unwrap();
    }
    // The second copy shows the first: a write at i reads back at cap + i.
    let w = ring.writable();
    w[0] = 0xab;
    let base = w.as_ptr() as u64;
    let mirror = read(base + cap as u64, 1);
    assert_eq!(mirror[0], 0xab);
    drop(ring);
    assert!(vm.purge());
    vm.check().unwrap();
}

/// A mirror's frames are mapped twice and given back once, eager or lazy:
/// after its free and the purge every frame is free, none twice.
#[test]
fn a_mirror_gives_its_frames_back_once() {
    for lazy in [true, false] {
        let vm = small_vm(lazy);
        let mut ring = MirrorRing::new(&vm, 3 * PAGE as usize).unwrap();
        ring.push(&[7; 100]);
        let grown = vm.stats().phys;
        assert!(grown.free_pages * PAGE < grown.grown_bytes, "frames in use");
        drop(ring);
        vm.purge();
        vm.check().unwrap();
        let s = vm.stats();
        assert_eq!(s.phys.free_pages * PAGE, s.phys.grown_bytes, "lazy {lazy}");
        assert_eq!(s.phys.deferred_blocks, 0);
        assert_eq!(s.space.maps_charged, 0);
    }
}

#[test]
fn vrealloc_moves_mappings_not_bytes() {
    let vm = small_vm(true);
    let a = vm.vmalloc(4 * PAGE).unwrap();
    // Block the range after `a`, so growth must move.
    let blocker = vm.vmalloc(PAGE).unwrap();
    write(a, 1);
    let b = vm.vrealloc(a, 64 * PAGE).unwrap();
    assert_ne!(a, b);
    // Same frames, not a copy: until the purge, the old mapping still shows
    // a write made through the new one.
    write(b + 5, 9);
    assert_eq!(read(a + 5, 1)[0], 9);
    assert_eq!(read(b, 1)[0], 1);
    let s = vm.stats().space;
    assert_eq!((s.realloc_moved, s.remapped_pages), (1, 4));
    vm.check().unwrap();
    vm.vfree(blocker).unwrap();
    vm.vfree(b).unwrap();
    vm.purge();
    vm.check().unwrap();
}
