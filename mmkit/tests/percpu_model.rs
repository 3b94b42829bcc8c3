//! Both percpu allocators (the bitmap allocator and the area-map baseline)
//! against a brute-force model: a byte-level occupancy map per chunk.
//! After every step: the answer agrees with the model and `check()` holds.

include!("models/percpu.rs");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn bitmap_matches_model((unit, ops) in unit_strategy().prop_flat_map(|u| (Just(u), ops(u)))) {
        run(PercpuAllocator::new(unit).unwrap(), &ops);
    }

    #[test]
    fn area_map_matches_model((unit, ops) in unit_strategy().prop_flat_map(|u| (Just(u), ops(u)))) {
        run(AreaMapAllocator::new(unit).unwrap(), &ops);
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
