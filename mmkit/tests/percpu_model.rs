//! Both percpu allocators (the bitmap allocator and the area-map baseline)
//! against a brute-force model: a byte-level occupancy map per chunk.
//! After every step: the answer agrees with the model and `check()` holds.

include!("models/percpu.rs");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn bitmap_matches_model((unit, ops) in unit_strategy().prop_flat_map(|u| (Just(u), ops(u)))) {
        run(PercpuAllocator::new(unit).unwrap(), &ops, true);
    }

    #[test]
    fn area_map_matches_model((unit, ops) in unit_strategy().prop_flat_map(|u| (Just(u), ops(u)))) {
        run(AreaMapAllocator::new(unit).unwrap(), &ops, false);
    }
}

/// Many small objects, freed in the three orders of the seed, with odd
/// alignments mixed in: long runs of the same transitions.
fn orders<A: PercpuAlloc>(mut make: impl FnMut() -> A) {
    for order in 0..3 {
        let mut a = make();
        let mut m = Model {
            unit: a.unit_size(),
            ..Model::default()
        };
        let mut ptrs = Vec::new();
        for i in 0..3000u64 {
            let (size, align) = match i % 7 {
                0 => (4, 8),
                3 => (24, 16),
                5 => (100, 4),
                _ => (4, 4),
            };
            let p = a.alloc(size, align).unwrap();
            m.take(p, size, align);
            ptrs.push(p);
        }
        a.check().unwrap();
        let seq: Vec<PcpuPtr> = match order {
            0 => ptrs.clone(),
            1 => ptrs
                .iter()
                .step_by(2)
                .chain(ptrs.iter().skip(1).step_by(2))
                .copied()
                .collect(),
            _ => ptrs.iter().rev().copied().collect(),
        };
        for (k, p) in seq.into_iter().enumerate() {
            let size = m.release(p);
            assert_eq!(a.free(p), Ok(size));
            if k % 97 == 0 {
                a.check().unwrap();
            }
        }
        a.check().unwrap();
        assert_eq!(a.stats().used_bytes, 0);
    }
}

#[test]
fn bitmap_free_orders() {
    orders(|| PercpuAllocator::new(8192).unwrap());
}

#[test]
fn area_map_free_orders() {
    orders(|| AreaMapAllocator::new(8192).unwrap());
}

/// Chunks of one 4 KiB unit, crowded: 24 full chunks (slot 0) and, for
/// each slot a chunk in use can be in (1 to 9), 24 chunks whose one free
/// run (between two live areas, away from the block's edges) is of that
/// slot's size. Built on the allocator and the model alike.
fn crowded() -> (PercpuAllocator, Model) {
    const UNIT: u64 = 4096;
    let mut a = PercpuAllocator::new(UNIT).unwrap();
    let mut m = Model {
        unit: UNIT,
        choices: true,
        ..Model::default()
    };
    let mut holes = Vec::new();
    // While every chunk in use is full, each chunk is filled from offset
    // 0 by the next three requests.
    for slot in 0..=9u32 {
        for _ in 0..24 {
            let hole = if slot == 0 { 8 } else { 4u64 << slot };
            for size in [4, hole, UNIT - 8 - hole, 4] {
                let p = a.alloc(size, 4).unwrap();
                m.take(p, size, 4);
                if size == hole && slot > 0 {
                    holes.push(p);
                }
            }
        }
    }
    for p in holes {
        let n = m.release(p);
        assert_eq!(a.free(p), Ok(n));
    }
    a.check().unwrap();
    (a, m)
}

/// The crowded set-up reaches what it claims (a shrunk one fails here).
#[test]
fn crowded_chunks_fill_every_slot() {
    let (a, _) = crowded();
    let s = a.stats();
    assert!(s.chunks >= 240, "{s:?}");
    // Slot 10 would be a run of 4 KiB, the free slot's (11).
    assert_eq!(s.slot_counts.len(), 12, "{s:?}");
    for (slot, &n) in s.slot_counts.iter().enumerate().take(10) {
        assert!(n >= 24, "slot {slot}: {n} chunks; {:?}", s.slot_counts);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The bitmap allocator's chunk and offset choices among 240 chunks
    /// spread over every slot.
    #[test]
    fn bitmap_choices_among_crowded_chunks(ops in ops(4096)) {
        let (a, m) = crowded();
        run_from(a, m, &ops);
    }
}

/// A chunk in a low slot (1 or 2) where a fit fails is parked in slot 0
/// until a free in it, as `pcpu_alloc` does, and the search starts at the
/// request's own slot: a lower slot holds no chunk that fits.
#[test]
fn low_slot_chunks_that_fail_a_fit_are_parked_until_a_free() {
    /// A chunk of one 4 KiB unit whose only free run is `hole` bytes at
    /// offset 4; returns the 4 bytes at offset 0.
    fn one_hole(a: &mut PercpuAllocator, hole: u64) -> PcpuPtr {
        let first = a.alloc(4, 4).unwrap();
        let h = a.alloc(hole, 4).unwrap();
        a.alloc(4096 - 4 - hole, 4).unwrap();
        assert_eq!((h.chunk, h.offset), (first.chunk, 4));
        a.free(h).unwrap();
        first
    }
    // An 8-byte hole (slot 1): a 16-byte request starts at slot 2 and
    // never tries it, so the hole is still there for an 8-byte request.
    let mut a = PercpuAllocator::new(4096).unwrap();
    let c = one_hole(&mut a, 8).chunk;
    let p = a.alloc(16, 4).unwrap();
    assert_ne!(p.chunk, c);
    assert_eq!(
        a.alloc(8, 4),
        Ok(PcpuPtr {
            chunk: c,
            offset: 4
        })
    );
    a.check().unwrap();
    // A 20-byte hole at offset 4 (slot 2): 16 bytes aligned to 16 fail in
    // it, which parks the chunk; a 4-byte request then goes elsewhere.
    let mut a = PercpuAllocator::new(4096).unwrap();
    let first = one_hole(&mut a, 20);
    let c = first.chunk;
    let p = a.alloc(16, 16).unwrap();
    assert_ne!(p.chunk, c);
    let q = a.alloc(4, 4).unwrap();
    assert_ne!(q.chunk, c, "a parked chunk was tried");
    // A free in the chunk lists it by its hints again (a run of 24 bytes,
    // slot 2), below the other chunk's slot: the next small request
    // lands there.
    a.free(first).unwrap();
    assert_eq!(
        a.alloc(4, 4),
        Ok(PcpuPtr {
            chunk: c,
            offset: 0
        })
    );
    a.check().unwrap();
}
