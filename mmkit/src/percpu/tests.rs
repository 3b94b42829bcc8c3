//! Hint transitions of the bitmap allocator, one case each: the cases the
//! kernel's `pcpu_block_update_hint_alloc/free` distinguish.

use super::block_md::BlockMd;
use super::chunk::Chunk;
use super::*;

const BB: usize = BLOCK_BITS as usize;

/// A three-block chunk (12 KiB unit).
fn chunk3() -> Chunk {
    Chunk::new(3 * BLOCK_BITS)
}

fn hints(b: &BlockMd) -> (u32, u32, u32, u32, u32, u32, u32) {
    (
        b.contig_hint,
        b.contig_hint_start,
        b.scan_hint,
        b.scan_hint_start,
        b.left_free,
        b.right_free,
        b.first_free,
    )
}

/// Allocates through the hints, the way `alloc` does, and checks.
fn alloc(c: &mut Chunk, bits: usize, align: usize) -> usize {
    let start = c.find_block_fit(bits, align).expect("fits by hints");
    let off = c.alloc_area(bits, align, start).expect("fits in window");
    c.check().unwrap();
    off
}

fn free(c: &mut Chunk, off: usize) -> usize {
    let n = c.free_area(off).unwrap();
    c.check().unwrap();
    n
}

#[test]
fn alloc_at_first_free_advances_it_and_cuts_contig() {
    let mut c = chunk3();
    assert_eq!(alloc(&mut c, 10, 1), 0);
    // contig, start, scan, scan start, left, right, first_free
    assert_eq!(
        hints(c.block(0)),
        (BB as u32 - 10, 10, 0, 0, 0, BB as u32 - 10, 10)
    );
    assert_eq!(c.md.first_free, 10);
    assert_eq!(c.md.contig_hint, 3 * BB as u32 - 10);
}

#[test]
fn alloc_inside_contig_hint_splits_it_and_sets_scan() {
    let mut c = chunk3();
    // Block 0: used [0, 100), free [100, 1024).
    c.alloc_at(0, 100);
    // Cut the contig run [100, 1024) at 300: runs [100, 300) and [310, 1024).
    c.alloc_at(300, 10);
    c.check().unwrap();
    let b = c.block(0);
    assert_eq!((b.contig_hint, b.contig_hint_start), (714, 310));
    assert_eq!(
        (b.scan_hint, b.scan_hint_start),
        (200, 100),
        "run before contig known"
    );
    assert_eq!(b.first_free, 100);
    // A request larger than the scan hint starts searching past it.
    assert_eq!(b.next_hint(201), 300);
    assert_eq!(b.next_hint(200), 100);
}

#[test]
fn alloc_over_scan_hint_forgets_it_and_promotion_keeps_contig_exact() {
    let mut c = chunk3();
    c.alloc_at(0, 100);
    c.alloc_at(300, 10); // scan = [100, 300), contig = [310, 1024)
    c.alloc_at(150, 1); // cuts the scan run
    assert_eq!(c.block(0).scan_hint, 0);
    c.check().unwrap();
    // Now cut the contig run: the refresh scans from first_free.
    c.alloc_at(310, 700); // contig [1010, 1024) = 14 bits, runs 50, 149
    let b = c.block(0);
    assert_eq!((b.contig_hint, b.contig_hint_start), (149, 151));
    c.check().unwrap();
}

#[test]
fn alloc_spanning_blocks_fills_middle_and_trims_edges() {
    let mut c = chunk3();
    c.alloc_at(0, 1000); // block 0: free [1000, 1024)
    let off = alloc(&mut c, BB + 100, 1); // [1000, 2124): spans all three
    assert_eq!(off, 1000);
    assert_eq!(hints(c.block(0)).0, 0);
    assert_eq!(c.block(0).first_free, BB as u32);
    assert_eq!(hints(c.block(1)), (0, 0, 0, 0, 0, 0, BB as u32));
    let b2 = c.block(2);
    assert_eq!(
        (b2.left_free, b2.first_free, b2.contig_hint),
        (0, 76, BB as u32 - 76)
    );
    assert_eq!(c.md.first_free, 2124);
}

#[test]
fn alignment_uses_better_aligned_contig_and_skips_misaligned_hints() {
    let mut c = chunk3();
    // 4-byte objects at 8-byte alignment leave 1-bit holes.
    for i in 0..10 {
        assert_eq!(alloc(&mut c, 1, 2), 2 * i);
    }
    // Every hole is 1 bit at an odd position: no fit for 2-bit aligned
    // requests before the tail run, which starts at bit 19 (odd).
    let b = c.block(0);
    assert_eq!((b.contig_hint_start, b.first_free), (19, 1));
    // The next aligned allocation lands at 20, past all the holes.
    assert_eq!(alloc(&mut c, 1, 2), 20);
}

#[test]
fn free_merges_left() {
    let mut c = chunk3();
    for _ in 0..4 {
        alloc(&mut c, 10, 1);
    }
    free(&mut c, 0);
    assert_eq!(c.block(0).left_free, 10);
    free(&mut c, 10); // merges with [0, 10)
    let b = c.block(0);
    assert_eq!((b.left_free, b.first_free), (20, 0));
    assert_eq!(
        (b.scan_hint, b.scan_hint_start),
        (0, 0),
        "run before contig was unknown"
    );
}

#[test]
fn free_merges_right_into_contig() {
    let mut c = chunk3();
    for _ in 0..4 {
        alloc(&mut c, 10, 1);
    }
    assert_eq!(free(&mut c, 30), 10); // merges with the tail run [40, ..)
    let b = c.block(0);
    assert_eq!((b.contig_hint, b.contig_hint_start), (BB as u32 - 30, 30));
    assert_eq!(b.right_free, BB as u32 - 30);
}

#[test]
fn free_merges_both_sides() {
    let mut c = chunk3();
    for _ in 0..5 {
        alloc(&mut c, 10, 1);
    }
    alloc(&mut c, BB - 50, 1); // block 0 full
    free(&mut c, 10);
    free(&mut c, 30);
    assert_eq!(c.block(0).contig_hint, 10);
    free(&mut c, 20); // joins [10, 20) and [30, 40)
    let b = c.block(0);
    assert_eq!(
        (b.contig_hint, b.contig_hint_start, b.first_free),
        (30, 10, 10)
    );
    assert_eq!(
        c.md.contig_hint,
        2 * BB as u32,
        "chunk hint: blocks 1 and 2"
    );
}

#[test]
fn free_across_blocks_refreshes_the_chunk() {
    let mut c = chunk3();
    let a = alloc(&mut c, 1000, 1);
    let b = alloc(&mut c, BB + 100, 1); // [1000, 2124)
    alloc(&mut c, 10, 1);
    free(&mut c, a);
    free(&mut c, b); // [0, 2124) free again, one run across two blocks
    assert!(c.block(0).is_free() && c.block(1).is_free());
    assert_eq!(c.block(2).left_free, 76);
    assert_eq!((c.md.contig_hint, c.md.contig_hint_start), (2124, 0));
}

#[test]
fn chunk_hint_may_lag_after_a_free_inside_one_block() {
    let mut c = chunk3();
    c.alloc_at(0, 3 * BB); // full
    c.free_area(1000).unwrap_err(); // interior: refused
    c.check().unwrap();
    let mut c = chunk3();
    c.alloc_at(1000, 24); // block 0's tail
    c.alloc_at(1024, 24); // block 1's head
    c.alloc_at(0, 1000);
    c.alloc_at(1048, 3 * BB - 1048);
    free(&mut c, 1024); // run [1024, 1048) in block 1 only
    free(&mut c, 1000); // run [1000, 1024) in block 0: truly [1000, 1048)
    assert_eq!(c.block(0).contig_hint, 24);
    assert!(c.md.contig_hint >= 24 && c.md.contig_hint <= 48);
}

#[test]
fn bad_frees_change_nothing() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    let p = a.alloc(16, 4).unwrap();
    let before = a.stats();
    let bad = [
        PcpuPtr {
            chunk: 0,
            offset: 4,
        },
        PcpuPtr {
            chunk: 0,
            offset: 2,
        },
        PcpuPtr {
            chunk: 0,
            offset: 8192,
        },
        PcpuPtr {
            chunk: 7,
            offset: 0,
        },
        PcpuPtr {
            chunk: u32::MAX,
            offset: u32::MAX,
        },
    ];
    for q in bad {
        assert!(a.free(q).is_err(), "{q:?}");
        assert_eq!(a.stats(), before);
    }
    assert_eq!(a.free(p), Ok(16));
    assert_eq!(a.free(p), Err(FreeError::NotAllocated));
    a.check().unwrap();
}

#[test]
fn bad_requests_are_invalid() {
    let mut a = PercpuAllocator::new(8192).unwrap();
    for (size, align) in [(0, 4), (8193, 4), (4, 3), (4, 0), (4, 8192), (u64::MAX, 4)] {
        assert_eq!(
            a.alloc(size, align),
            Err(AllocError::Invalid),
            "{size} {align}"
        );
    }
    assert_eq!(a.stats().chunks, 0);
    assert!(PercpuAllocator::new(1000).is_err());
    assert!(PercpuAllocator::new(0).is_err());
    assert!(PercpuAllocator::new(MAX_UNIT_SIZE + BLOCK_SIZE).is_err());
}

#[test]
fn failed_fit_moves_low_slot_chunk_to_slot_0() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    // Fill the chunk with 4-byte objects at 8-byte alignment: 512 objects,
    // 512 one-bit holes. Its hint (4 bytes) is the right size, wrong align.
    for _ in 0..512 {
        a.alloc(4, 8).unwrap();
    }
    assert_eq!(a.stats().chunks, 1);
    let p = a.alloc(4, 8).unwrap();
    assert_eq!(p.chunk, 1, "a new chunk");
    assert_eq!(
        a.stats().slot_counts[0],
        1,
        "the first chunk sits in slot 0"
    );
    a.check().unwrap();
    // A 4-byte request with 4-byte alignment would fit the holes, but the
    // chunk in slot 0 is not tried: not strict first fit, like the kernel.
    assert_eq!(a.alloc(4, 4).unwrap().chunk, 1);
    // A free moves it back to where its hints say.
    a.free(PcpuPtr {
        chunk: 0,
        offset: 0,
    })
    .unwrap();
    a.check().unwrap();
    assert_eq!(a.stats().slot_counts[0], 0);
}

#[test]
fn keeps_at_most_one_free_chunk() {
    let mut a = PercpuAllocator::new(4096).unwrap();
    let x = a.alloc(4096, 4).unwrap();
    let y = a.alloc(4096, 4).unwrap();
    let z = a.alloc(4096, 4).unwrap();
    assert_eq!(a.stats().chunks, 3);
    a.free(x).unwrap();
    a.free(y).unwrap();
    assert_eq!(a.stats().chunks, 2, "second free chunk released");
    a.check().unwrap();
    a.free(z).unwrap();
    assert_eq!(a.stats().chunks, 1);
    assert_eq!(a.alloc(8, 8).unwrap().chunk, x.chunk);
}
