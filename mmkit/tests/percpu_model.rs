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
    alloc_at(&mut a, 8, 4, c, 4);
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
    alloc_at(&mut a, 4, 4, c, 0);
}

/// `a.alloc(size, align)` must give `offset` in `chunk`, and `check()`
/// must pass after it.
fn alloc_at(a: &mut PercpuAllocator, size: u64, align: u64, chunk: u32, offset: u32) {
    assert_eq!(a.alloc(size, align), Ok(PcpuPtr { chunk, offset }));
    a.check().unwrap();
}

/// A chunk (the allocator's first, of one unit) with its holes: everything
/// else taken by fillers, then the holes freed in the order given. `holes`
/// are (byte offset, length), apart, all multiples of 4.
fn holes_in_one_chunk(a: &mut PercpuAllocator, holes: &[(u32, u64)]) -> u32 {
    let unit = a.unit_size() as u32;
    let mut sorted = holes.to_vec();
    sorted.sort_unstable();
    let mut at = 0u64;
    let mut made = BTreeMap::new();
    let mut chunk = None;
    for &(off, len) in sorted.iter().chain([(unit, 0)].iter()) {
        for size in [u64::from(off) - at, len] {
            if size == 0 {
                continue;
            }
            let p = a.alloc(size, 4).unwrap();
            assert_eq!(u64::from(p.offset), at, "set-up not packed");
            assert_eq!(
                *chunk.get_or_insert(p.chunk),
                p.chunk,
                "set-up spans chunks"
            );
            made.insert(p.offset, p);
            at += size;
        }
    }
    for &(off, _) in holes {
        a.free(made[&off]).unwrap();
    }
    a.check().unwrap();
    chunk.unwrap()
}

/// The scan hint (the longest run before the contig hint) lets a request
/// longer than it skip the runs before; a request exactly as long as it
/// must still take it, the lowest fit.
#[test]
fn a_request_as_long_as_the_scan_hint_takes_that_run() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // A 20-byte hole at 4, then the rest of the chunk free after a filler.
    let c = holes_in_one_chunk(&mut a, &[(4, 20), (28, 4068)]);
    // 24 bytes do not fit the hole: they cut the contig run at its start,
    // and the rescan that follows makes the hole the scan hint.
    let p = a.alloc(24, 4).unwrap();
    assert_eq!((p.chunk, p.offset), (c, 28));
    a.check().unwrap();
    alloc_at(&mut a, 20, 4, c, 4);
}

/// Of two free runs of the same length, a block's contig hint names the
/// better aligned one (`pcpu_block_update`), so an aligned request that
/// fits only there is served from this chunk, not a new one.
#[test]
fn equal_runs_keep_the_better_aligned_contig_hint() {
    for (first, second) in [(64u32, 132u32), (132, 256)] {
        let mut a = PercpuAllocator::new(4096).unwrap();
        let c = holes_in_one_chunk(&mut a, &[(first, 64), (second, 64)]);
        let aligned = if first % 64 == 0 { first } else { second };
        assert_eq!(
            a.alloc(64, 64),
            Ok(PcpuPtr {
                chunk: c,
                offset: aligned
            }),
            "holes at {first} and {second}"
        );
        a.check().unwrap();
    }
}

/// Only a strictly better aligned run takes the contig hint from an equal
/// one (`pcpu_block_update`): of two runs whose starts have the same
/// trailing zeros, the first recorded stays, even where the other would
/// hold a request aligned more coarsely. The chunk is then judged unable
/// to serve that request.
#[test]
fn an_equally_aligned_run_does_not_take_the_contig_hint() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // Bits [4, 24) and [28, 48): both starts are 4 mod 8; aligned to 16
    // bits, only the second holds 16 bits.
    let c = holes_in_one_chunk(&mut a, &[(16, 80), (112, 80)]);
    let p = a.alloc(64, 64).unwrap();
    assert_ne!(p.chunk, c, "the later run took the contig hint: {p:?}");
    a.check().unwrap();
}

/// An allocation at the start of a block's longest run, when that run does
/// not reach the end of the block: the hints are rescanned, not derived as
/// for a run that reaches the end (`check()` compares them with the bitmap).
#[test]
fn a_cut_at_the_start_of_a_run_that_ends_inside_the_block() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // Bits [2, 514): a run of 512 bits, 2 * 512 = the block's 1024 bits.
    let c = holes_in_one_chunk(&mut a, &[(8, 2048)]);
    alloc_at(&mut a, 40, 4, c, 8);
    alloc_at(&mut a, 2008, 4, c, 48);
}

/// The block walk of `pcpu_find_block_fit`: a free run across a block edge
/// is carried from one block's right_free into the next one's left_free,
/// and each block's contig hint is tried at its place in the chunk. Runs
/// too short once aligned must not stop the search: the fit in a later
/// block of the same chunk is taken.
#[test]
fn a_short_run_across_a_block_edge_does_not_end_the_search() {
    let mut a = PercpuAllocator::new(16384).unwrap();
    // In bits (4 bytes each), for 8 bits aligned to 8: [1, 10) is long
    // enough but not aligned, so the scan hint does not skip the runs
    // before the fit; [1018, 1028) crosses the edge at 1024, 6 + 4 bits,
    // too short once aligned; [1035, 1044), the second block's longest,
    // is not aligned either; [3256, 3272) in the last block fits.
    let holes = [(4, 36), (4072, 40), (4140, 36), (13024, 64)];
    let c = holes_in_one_chunk(&mut a, &holes);
    alloc_at(&mut a, 32, 32, c, 13024);
}

/// The one empty chunk the allocator keeps is listed as wholly free: the
/// next request that no chunk in use can serve takes it rather than a new
/// chunk, and freeing the last allocation of a chunk keeps it as the spare.
#[test]
fn the_spare_empty_chunk_is_kept_and_reused() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    let full = a.alloc(4096, 4).unwrap();
    let p = a.alloc(4, 4).unwrap();
    assert_ne!(p.chunk, full.chunk);
    assert_eq!(a.free(p), Ok(4));
    assert_eq!(a.stats().chunks, 2, "the spare was released");
    let q = a.alloc(4096, 4).unwrap();
    assert_eq!(q, p, "a new chunk was made beside the spare");
    assert_eq!(a.stats().chunks, 2);
    a.check().unwrap();
}

/// A free that stays inside one block updates the chunk's record with the
/// run clipped to that block (`pcpu_block_update_hint_free`): the chunk's
/// contig hint may lag behind a run that the free joined across a block
/// edge, until a refresh. The chunk is judged by that record, so a request
/// that only the joined run could hold goes to a new chunk.
#[test]
fn a_free_inside_one_block_leaves_the_chunk_record_behind() {
    // Bits [100, 128) (28) free first, then [1000, 1024) and [1024, 1030)
    // in either order: they join into a run of 30 across the block edge.
    for last_first in [false, true] {
        let mut a = PercpuAllocator::new(8192).unwrap();
        let mut holes = vec![(400, 112), (4000, 96), (4096, 24)];
        if last_first {
            holes.swap(1, 2);
        }
        let c = holes_in_one_chunk(&mut a, &holes);
        let p = a.alloc(120, 4).unwrap();
        assert_ne!(
            p.chunk, c,
            "the chunk record did not lag ({holes:?}): {p:?}"
        );
        a.check().unwrap();
        // The record's own run still serves what fits it.
        alloc_at(&mut a, 112, 4, c, 400);
    }
}

/// The lag lasts until an allocation cuts the chunk record's contig hint
/// (`pcpu_block_update_hint_alloc` refreshes only then): an allocation
/// that misses it leaves the record behind, so the joined run still is
/// not offered.
#[test]
fn an_allocation_that_misses_the_contig_hint_keeps_the_lag() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    // Bits [60, 62), [100, 128), then [1000, 1024) and [1024, 1030): the
    // record knows 28 bits at 100, the longest run is 30 at 1000.
    let c = holes_in_one_chunk(&mut a, &[(240, 8), (400, 112), (4000, 96), (4096, 24)]);
    alloc_at(&mut a, 8, 4, c, 240);
    let p = a.alloc(120, 4).unwrap();
    assert_ne!(p.chunk, c, "the chunk record was refreshed: {p:?}");
    a.check().unwrap();
}

/// An allocation that cuts the chunk record's contig hint refreshes the
/// record from the block records, which ends the lag: the chunk record's
/// scan hint is not trusted to stand in for the runs before the cut (it
/// may be one of the lagging pieces).
#[test]
fn a_cut_of_the_chunk_contig_hint_ends_the_lag() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    // Bits [100, 128) (28), [1000, 1030) across the block edge (30, known
    // to the record as 24 and 6), and [1500, 2048) (548) to the end.
    let holes = [(400, 112), (4000, 96), (4096, 24), (6000, 2192)];
    let c = holes_in_one_chunk(&mut a, &holes);
    // 540 bits at the start of the last run leave 8: shorter than both.
    alloc_at(&mut a, 2160, 4, c, 6000);
    assert_eq!(
        a.alloc(120, 4),
        Ok(PcpuPtr {
            chunk: c,
            offset: 4000
        }),
        "the refreshed record offers the joined run"
    );
    a.check().unwrap();
}

/// The block walk starts in the block of the chunk's first free bit and
/// carries a run only from a block's right edge: with the first blocks
/// full, the next allocation is the first bit of the next block.
#[test]
fn the_walk_starts_in_the_block_of_the_first_free_bit() {
    let mut a = PercpuAllocator::new(16384).unwrap();
    let full = a.alloc(8192, 4).unwrap();
    assert_eq!(full.offset, 0);
    for want in [8192, 8196] {
        alloc_at(&mut a, 4, 4, full.chunk, want);
    }
}

/// A free that empties a whole block refreshes the chunk record from the
/// block records (`pcpu_block_update_hint_free`), so the record learns the
/// run the block joins with its neighbours' edges even where it knew
/// neither edge.
#[test]
fn a_free_that_empties_a_block_refreshes_the_chunk_record() {
    let mut a = PercpuAllocator::new(12288).unwrap();
    // Bits [1014, 1024), [2048, 2058), [2250, 2300), then block 1 whole:
    // one run [1014, 2058) of 1044 bits. Before the last free the record
    // knows the 50 bits at 2250 and, as its scan hint, 10 at 2048.
    let holes = [(4056, 40), (8192, 40), (9000, 200), (4096, 4096)];
    let c = holes_in_one_chunk(&mut a, &holes);
    alloc_at(&mut a, 4176, 4, c, 4056);
}

/// A chunk refresh takes each block's contig hint when it lies inside the
/// block, whatever its start and length (here 32 bits at bit 32).
#[test]
fn a_chunk_refresh_reads_an_inner_contig_hint() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // Bits [32, 64) and [200, 300): 100 bits at 200 cut the chunk's contig
    // hint, and the refresh finds the 32 bits at 32.
    let c = holes_in_one_chunk(&mut a, &[(128, 128), (800, 400)]);
    alloc_at(&mut a, 400, 4, c, 800);
    alloc_at(&mut a, 128, 4, c, 128);
}

/// A free that stays inside one block is joined with the chunk record's
/// scan hint when the two touch across a block edge, so the record learns
/// the whole run even without a refresh.
#[test]
fn a_freed_run_joins_the_scan_hint_across_a_block_edge() {
    // Bits [1014, 1024) (10), then [1500, 1540) (40, the contig hint; the
    // 10 become the scan hint), then [1024, 1074) (50): one run of 60. In
    // the second layout [1250, 1300) (50) takes the contig hint before the
    // last free; the scan hint, wholly before it, stays.
    let first = [(4056, 40), (6000, 160), (4096, 200)];
    let second = [(4056, 40), (6000, 160), (5000, 200), (4096, 200)];
    for holes in [&first[..], &second[..]] {
        let mut a = PercpuAllocator::new(8192).unwrap();
        let c = holes_in_one_chunk(&mut a, holes);
        assert_eq!(
            a.alloc(240, 4),
            Ok(PcpuPtr {
                chunk: c,
                offset: 4056
            }),
            "{holes:?}"
        );
        a.check().unwrap();
    }
}

/// A chunk that got freer goes to the head of its new slot's list (one
/// that got fuller, to the tail: `pcpu_chunk_relocate`): of two chunks
/// that each just got freer into the same slot, the later one is tried
/// first.
#[test]
fn a_chunk_that_got_freer_is_tried_first_in_its_slot() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    let halves: Vec<PcpuPtr> = (0..4).map(|_| a.alloc(2048, 4).unwrap()).collect();
    let (first, second) = (halves[0].chunk, halves[2].chunk);
    assert_ne!(first, second);
    assert_eq!((halves[1].chunk, halves[3].chunk), (first, second));
    // Both full; now each gets half free again, the first chunk last.
    assert_eq!(a.free(halves[3]), Ok(2048));
    assert_eq!(a.free(halves[1]), Ok(2048));
    let p = a.alloc(16, 4).unwrap();
    assert_eq!(p.chunk, first, "the chunk freed last heads the slot");
    a.check().unwrap();
}

/// A case proptest found (docs/testing.md, "Full runs"). After these
/// steps the chunk record's scan hint says 5 bits at 791 while a run of
/// 39 bits lies at 6: a refresh builds the record from block summaries,
/// which leave out runs inside a block. Starting past that hint, as the
/// kernel does, serves 120 bytes at offset 3384 though offset 24 holds
/// them; the block walk starts at the chunk's first free bit instead.
#[test]
fn a_lagging_chunk_scan_hint_skips_no_fit() {
    let ops = [
        Op::Free(9242915769616883940),
        Op::FreeInterior(7345839850523303547, 54),
        Op::Alloc {
            size: 15,
            align: 128,
        },
        Op::Alloc {
            size: 18446744073709551615,
            align: 8192,
        },
        Op::FreeInterior(18091138367296460591, 21),
        Op::Free(1255556460991178682),
        Op::Alloc {
            size: 6,
            align: 8192,
        },
        Op::Free(7306387473647166940),
        Op::Alloc { size: 1, align: 4 },
        Op::Alloc { size: 5, align: 4 },
        Op::Free(3504481890308429729),
        Op::FreeStale(14967032914838349803),
        Op::Free(16743627268539537209),
        Op::Alloc {
            size: 354,
            align: 64,
        },
        Op::Free(1027354472677344034),
        Op::Alloc { size: 12, align: 2 },
        Op::Alloc { size: 7, align: 16 },
        Op::Free(2727183394375207309),
        Op::Alloc {
            size: 162,
            align: 16,
        },
        Op::Alloc { size: 4, align: 1 },
        Op::FreeBogus {
            chunk: 4,
            offset: 2102,
        },
        Op::Alloc {
            size: 2983,
            align: 2,
        },
        Op::FreeBogus {
            chunk: 3,
            offset: 2294,
        },
        Op::Alloc {
            size: 466,
            align: 4096,
        },
        Op::Alloc { size: 15, align: 2 },
        Op::FreeInterior(12214717311828071895, 38),
        Op::Free(17546074801723599348),
        Op::Free(7112367079695933641),
        Op::Alloc {
            size: 3300,
            align: 4096,
        },
        Op::Alloc {
            size: 9,
            align: 128,
        },
        Op::FreeStale(4079288959894731703),
        Op::Alloc { size: 5, align: 4 },
        Op::FreeBogus {
            chunk: 2,
            offset: 1408,
        },
        Op::Free(226447407786299469),
        Op::Alloc {
            size: 16,
            align: 512,
        },
        Op::Alloc {
            size: 199,
            align: 16,
        },
        Op::FreeInterior(4163865921391993827, 18),
        Op::Free(12245689578147954270),
        Op::Alloc {
            size: 10,
            align: 2048,
        },
        Op::Free(15891894912501014811),
        Op::Alloc { size: 13, align: 3 },
        Op::Alloc {
            size: 120,
            align: 2,
        },
    ];
    run(PercpuAllocator::new(4096).unwrap(), &ops, true);
}

/// An allocation that starts where the chunk record's scan hint run ends
/// does not overlap it: ranges are half-open (the kernel's
/// `pcpu_region_overlap`), so the hint is kept. Freeing the allocation
/// then joins the kept hint across the block edge, and the record offers
/// the whole run.
#[test]
fn an_allocation_after_the_scan_hint_run_keeps_it() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    // In bits: [1200, 1220) (20) freed first, then [1024, 1034) (10, too
    // short to be recorded), [994, 1024) (30, the contig hint; cut at the
    // block edge, so the record does not know the 10 after it) and
    // [1536, 1571) (35: the contig hint, the 30 become the scan hint).
    let holes = [(4800, 80), (4096, 40), (3976, 120), (6144, 140)];
    let c = holes_in_one_chunk(&mut a, &holes);
    // Aligned to 512 bits, 4 bytes land at bit 1024, right after the scan
    // hint run.
    let p = a.alloc(4, 2048).unwrap();
    assert_eq!(
        p,
        PcpuPtr {
            chunk: c,
            offset: 4096
        }
    );
    a.check().unwrap();
    // Freed, they join the scan hint: 40 bits at 994, longer than 35.
    assert_eq!(a.free(p), Ok(4));
    alloc_at(&mut a, 160, 4, c, 3976);
}

/// An allocation that ends where the chunk record's scan hint run starts
/// does not overlap it either (`pcpu_region_overlap` on `[start, end)`):
/// the hint is kept, and freeing the allocation joins it.
#[test]
fn an_allocation_before_the_scan_hint_run_keeps_it() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    // In bits: [1200, 1220) (20), then [1014, 1024) (10, not recorded),
    // [1024, 1054) (30, the contig hint, not joined with the 10 the record
    // does not know) and [1500, 1535) (35: the 30 become the scan hint).
    let holes = [(4800, 80), (4056, 40), (4096, 120), (6000, 140)];
    let c = holes_in_one_chunk(&mut a, &holes);
    // 10 bits at 1014, the lowest fit, end where the scan hint starts.
    let p = a.alloc(40, 4).unwrap();
    assert_eq!(
        p,
        PcpuPtr {
            chunk: c,
            offset: 4056
        }
    );
    a.check().unwrap();
    assert_eq!(a.free(p), Ok(40));
    alloc_at(&mut a, 160, 4, c, 4056);
}

/// A free run as long as a block's scan hint and before it does not take
/// the hint: `pcpu_block_update` replaces an equal scan hint only with a
/// farther run. When a cut of the contig hint promotes the scan hint, the
/// contig hint is the aligned run, and an aligned request fits.
#[test]
fn an_equal_run_before_the_scan_hint_does_not_take_it() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // In bits: [64, 80) (16, aligned to 64), then [200, 1024) (the contig
    // hint; the 16 at 64 become the scan hint), then [12, 28) (16 again).
    let c = holes_in_one_chunk(&mut a, &[(256, 64), (800, 3296), (48, 64)]);
    // 820 bits at 200 leave 4 after them: the scan hint is promoted.
    alloc_at(&mut a, 3280, 4, c, 800);
    alloc_at(&mut a, 64, 256, c, 256);
}

/// An allocation at the start of a block's contig run that leaves a rest
/// as long as the scan hint: the kernel rescans the block from the
/// promoted scan hint (`pcpu_block_refresh_hint`), and the rest takes the
/// contig hint only if it starts strictly better aligned. Here it does not,
/// so the aligned scan hint run stays the contig hint and an aligned
/// request fits.
#[test]
fn a_rest_as_long_as_the_scan_hint_does_not_take_the_contig_hint() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // In bits: [64, 80) (16, aligned to 64), then [200, 1024).
    let c = holes_in_one_chunk(&mut a, &[(256, 64), (800, 3296)]);
    // 808 bits at 200 leave [1008, 1024): 16 bits at 16 * 63.
    alloc_at(&mut a, 3232, 4, c, 800);
    alloc_at(&mut a, 64, 256, c, 256);
}

/// The block walk tries the last block's right free run on its own, at the
/// request's alignment (`pcpu_next_fit_region`'s right-side check): a
/// request that fits only there is served in this chunk even when the
/// block's contig hint names a run as long that it does not fit (the scan
/// hint the cut promoted; the chunk record names the better aligned rest).
#[test]
fn the_last_blocks_right_run_is_tried_at_the_end_of_the_walk() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // In bits: [68, 84) (16, at 4 mod 16), then [200, 1024).
    let c = holes_in_one_chunk(&mut a, &[(272, 64), (800, 3296)]);
    // 808 bits at 200 leave [1008, 1024), as long as the run at 68 and
    // aligned to 16 bits: the only place 16 bits aligned to 16 fit.
    alloc_at(&mut a, 3232, 4, c, 800);
    alloc_at(&mut a, 64, 64, c, 4032);
}

/// A freed run as long as a block's scan hint, farther than it and before
/// the contig hint, takes the scan hint (`pcpu_block_update`: "larger than
/// or equal and farther"). When a cut of the contig hint promotes the scan
/// hint (`pcpu_block_refresh_hint`), the farther run is the contig hint:
/// here the aligned one, so an aligned request fits in this chunk.
#[test]
fn an_equal_run_after_the_scan_hint_takes_it() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // In bits: [12, 28) (16, at 4 mod 8), then [200, 1024) (the contig
    // hint; the 16 at 12 become the scan hint), then [64, 80) (16 again,
    // aligned to 64, farther: the scan hint).
    let c = holes_in_one_chunk(&mut a, &[(48, 64), (800, 3296), (256, 64)]);
    // 820 bits at 200 leave 4 after them: the scan hint is promoted.
    alloc_at(&mut a, 3280, 4, c, 800);
    alloc_at(&mut a, 64, 256, c, 256);
}

/// An allocation at the start of a block's contig run that reaches the
/// block's end, leaving a rest as long as the scan hint and strictly
/// better aligned: the kernel's rescan (`pcpu_block_update_hint_alloc` ->
/// `pcpu_block_refresh_hint`) promotes the scan hint, then feeds the rest
/// to `pcpu_block_update`, where the better aligned start takes the contig
/// hint. The block walk then tries that rest, not the scan hint's run, and
/// a request that fits only the latter is served from the next block.
#[test]
fn a_better_aligned_rest_as_long_as_the_scan_hint_takes_the_contig_hint() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    // In bits: [60, 84) (24, at 4 mod 8), then [200, 1024), then in the
    // second block [1280, 1344) (64, the chunk's longest after the cut).
    let c = holes_in_one_chunk(&mut a, &[(240, 96), (800, 3296), (5120, 256)]);
    // 800 bits at 200 leave [1000, 1024): 24 bits at 8 mod 16.
    alloc_at(&mut a, 3200, 4, c, 800);
    // 20 bits aligned to 16 fit [60, 84) (at 64) but not [1000, 1024): the
    // first block's contig hint is the rest, so the walk goes on.
    alloc_at(&mut a, 80, 64, c, 5120);
}

/// A run longer than a block's contig hint and after it keeps a scan hint
/// as long as the old contig hint (`pcpu_block_update` promotes the old
/// contig hint only if it is longer): of the two equal runs, the nearer one
/// is promoted when the new hint is cut, and an equally aligned run later
/// does not take it. Here only the later one holds the aligned request.
#[test]
fn a_longer_run_keeps_an_equal_scan_hint() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // In bits: [112, 152) (40, the contig hint), then [16, 56) (40, equally
    // aligned: the scan hint), then [200, 1024).
    let c = holes_in_one_chunk(&mut a, &[(448, 160), (64, 160), (800, 3296)]);
    // 820 bits at 200 leave 4 after them: the scan hint is promoted.
    alloc_at(&mut a, 3280, 4, c, 800);
    // 24 bits aligned to 64 fit [112, 152) (at 128), not [16, 56).
    let p = a.alloc(96, 256).unwrap();
    assert_ne!(p.chunk, c, "the later run took the contig hint: {p:?}");
    a.check().unwrap();
}

/// A block record fed free runs one at a time, as the free path does.
fn record(runs: &[(u32, u32)]) -> BlockMd {
    let mut md = BlockMd::new_free(1024);
    md.reset_full();
    for &(s, e) in runs {
        md.update(s, e);
    }
    md
}

/// (contig start, scan hint, scan start) of a record.
fn ties(md: BlockMd) -> (u32, u32, u32) {
    (md.contig_hint_start, md.scan_hint, md.scan_hint_start)
}

/// `pcpu_block_update`: a run as long as the contig hint, not better
/// aligned, nearer than an equal scan hint leaves the farther scan hint.
#[test]
fn a_nearer_tie_leaves_an_equal_scan_hint() {
    assert_eq!(ties(record(&[(96, 112), (40, 56), (8, 24)])), (96, 16, 40));
}

/// `pcpu_block_update`: a run as long as the contig hint, after it and not
/// better aligned, becomes a scan hint after the contig hint; it skips
/// nothing (`pcpu_next_hint`).
#[test]
fn a_later_tie_is_a_scan_hint_after_the_contig_hint() {
    let md = record(&[(64, 80), (100, 116)]);
    assert_eq!(ties(md), (64, 16, 100));
    assert_eq!(md.next_hint(17), 64);
}

/// `pcpu_block_update`: a run as long as the contig hint, not better
/// aligned, farther than an equal scan hint takes it, before the contig
/// hint or after it.
#[test]
fn a_farther_tie_takes_an_equal_scan_hint() {
    assert_eq!(ties(record(&[(96, 112), (40, 56), (72, 88)])), (96, 16, 72));
    assert_eq!(
        ties(record(&[(96, 112), (40, 56), (120, 136)])),
        (96, 16, 120)
    );
}

/// `pcpu_block_update`: a run longer than the contig hint and after it
/// keeps a scan hint as long as the old contig hint.
#[test]
fn a_longer_later_run_keeps_an_equal_scan_hint() {
    assert_eq!(
        ties(record(&[(96, 112), (40, 56), (200, 240)])),
        (200, 16, 40)
    );
}

/// `pcpu_block_update`: a run longer than the contig hint, before it,
/// forgets the scan hint, even one wholly before the run.
#[test]
fn a_longer_earlier_run_forgets_the_scan_hint() {
    assert_eq!(ties(record(&[(300, 316), (500, 600), (350, 470)])).1, 0);
}

/// `pcpu_block_update`: a better aligned run as long as the contig hint and
/// after it takes the hint and keeps the scan hint as it is: unknown, or
/// as long as the hint.
#[test]
fn a_better_aligned_later_tie_keeps_the_scan_hint() {
    assert_eq!(ties(record(&[(100, 116), (128, 144)])).1, 0);
    assert_eq!(
        ties(record(&[(96, 112), (40, 56), (128, 144)])),
        (128, 16, 40)
    );
}

/// A better aligned run as long as the contig hint and after it, with a
/// shorter scan hint: `pcpu_block_update` keeps that scan hint, though the
/// old contig run, longer, now lies before the hint; mmkit makes the old
/// run the scan hint, the longest before the hint (its records stay exact).
#[test]
fn a_better_aligned_later_tie_makes_the_old_contig_run_the_scan_hint() {
    assert_eq!(
        ties(record(&[(8, 12), (100, 116), (128, 144)])),
        (128, 16, 100)
    );
}

/// `pcpu_block_update`: a better aligned run as long as the contig hint,
/// before an equal scan hint, takes the hint; the scan hint stays, now
/// after the contig hint.
#[test]
fn a_better_aligned_earlier_tie_keeps_an_equal_scan_hint() {
    assert_eq!(ties(record(&[(96, 112), (40, 56), (0, 16)])), (0, 16, 40));
}

/// A chunk refresh reads from each block only the runs
/// `pcpu_for_each_md_free_region` yields (`pcpu_chunk_refresh_hint`): the
/// contig hint, and the edge runs joined across blocks. A block's left run
/// that is neither is not read, even when it is the best aligned of the
/// longest runs, so the chunk record names the block's contig hint.
#[test]
fn a_chunk_refresh_does_not_read_a_lone_left_run() {
    // In bits from the block's start: [0, 40), then [200, 1024) (the
    // contig hint; the 40 at 0 become the scan hint), then [72, 112) (40,
    // farther: the scan hint). In the second layout the block is the
    // second one, after a block whose right run is empty.
    let one = [(0, 160), (800, 3296), (288, 160)];
    let two = [(16, 8), (4096, 160), (4896, 3296), (4384, 160)];
    for (unit, holes) in [(4096u64, &one[..]), (8192, &two[..])] {
        let mut a = PercpuAllocator::new(unit).unwrap();
        let c = holes_in_one_chunk(&mut a, holes);
        let base = (unit - 4096) as u32;
        // 784 bits at 200 leave [984, 1024), 40 bits: the block's rescan
        // promotes [72, 112), and neither the rest nor [0, 40) takes it.
        alloc_at(&mut a, 3136, 4, c, base + 800);
        // 32 bits aligned to 32 fit [0, 40) and the rest, not [72, 112):
        // the chunk record names [72, 112), so the chunk is passed over.
        let p = a.alloc(128, 128).unwrap();
        assert_ne!(p.chunk, c, "the chunk record read the left run: {p:?}");
        a.check().unwrap();
    }
}

/// A freed run as long as a block's scan hint but nearer leaves the hint
/// (`pcpu_block_update` takes an equal run only when it lies farther),
/// even when the nearer run is the better aligned: the cut then promotes
/// the farther run (`pcpu_block_refresh_hint`), and the nearer one, before
/// it, is not rescanned.
#[test]
fn a_better_aligned_nearer_run_does_not_take_the_scan_hint() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // In bits: [100, 116) (16), then [200, 1024) (the contig hint; the 16
    // at 100 become the scan hint), then [64, 80) (16, aligned to 64).
    let c = holes_in_one_chunk(&mut a, &[(400, 64), (800, 3296), (256, 64)]);
    // 820 bits at 200 leave 4 after them: the scan hint is promoted.
    alloc_at(&mut a, 3280, 4, c, 800);
    // 16 bits aligned to 64 fit only [64, 80), which no hint names.
    let p = a.alloc(64, 256).unwrap();
    assert_ne!(p.chunk, c, "the nearer run took the scan hint: {p:?}");
    a.check().unwrap();
}
