use super::*;
use alloc::vec;

fn va(start: u64, end: u64) -> VmapAllocator {
    VmapAllocator::new(start, end).unwrap()
}

fn free_blocks(v: &VmapAllocator) -> Vec<(u64, u64)> {
    v.free_blocks().map(|r| (r.start, r.end)).collect()
}

/// The size the module docs give (a field added changes it there too).
#[cfg(target_pointer_width = "64")]
#[test]
fn the_allocator_is_the_size_its_docs_say() {
    assert_eq!(core::mem::size_of::<VmapAllocator>(), 968);
    assert_eq!(core::mem::size_of::<Pending>(), 48);
}

#[test]
fn fit_types_split_as_drawn() {
    let mut v = va(0, 100);
    // LE: the block's start moves up.
    assert_eq!(v.alloc(10, 1), Ok(0));
    assert_eq!(free_blocks(&v), [(10, 100)]);
    // NE: aligned inside, leaving a left remainder.
    assert_eq!(v.alloc(10, 32), Ok(32));
    assert_eq!(free_blocks(&v), [(10, 32), (42, 100)]);
    // RE: a window that ends at the block's end.
    assert_eq!(v.alloc_in(8, 1, 92, 100), Ok(92));
    assert_eq!(free_blocks(&v), [(10, 32), (42, 92)]);
    // FL: the whole block.
    assert_eq!(v.alloc(22, 1), Ok(10));
    assert_eq!(free_blocks(&v), [(42, 92)]);
    v.check().unwrap();
}

#[test]
fn free_merges_both_sides_at_once() {
    let mut v = va(0, 30);
    let a = v.alloc(10, 1).unwrap();
    let b = v.alloc(10, 1).unwrap();
    let c = v.alloc(10, 1).unwrap();
    v.free(a).unwrap();
    v.free(c).unwrap();
    assert_eq!(free_blocks(&v), [(0, 10), (20, 30)]);
    v.free(b).unwrap();
    assert_eq!(free_blocks(&v), [(0, 30)]);
    assert_eq!(v.stats().free_blocks, 1);
    v.check().unwrap();
}

#[test]
fn bad_frees_change_nothing() {
    let mut v = va(0, 100);
    let a = v.alloc(10, 1).unwrap();
    let before = free_blocks(&v);
    assert_eq!(v.free(a + 1), Err(FreeError::NotAllocated));
    assert_eq!(v.free(50), Err(FreeError::NotAllocated));
    assert_eq!(v.free(a), Ok(10));
    assert_eq!(v.free(a), Err(FreeError::NotAllocated));
    assert_eq!(v.free_lazy(a), Err(FreeError::NotAllocated));
    assert_ne!(before, free_blocks(&v));
    v.check().unwrap();
}

#[test]
fn invalid_requests() {
    let mut v = va(0, 100);
    assert_eq!(v.alloc(0, 1), Err(AllocError::Invalid));
    assert_eq!(v.alloc(1, 3), Err(AllocError::Invalid));
    assert_eq!(v.alloc(1, 0), Err(AllocError::Invalid));
    assert_eq!(v.alloc_in(1, 1, 5, 5), Err(AllocError::Invalid));
    assert_eq!(v.alloc_in(1, 1, 200, 300), Err(AllocError::NoSpace));
    assert_eq!(v.alloc(101, 1), Err(AllocError::NoSpace));
    assert_eq!(v.stats().live_areas, 0);
    v.check().unwrap();
}

#[test]
fn edges_near_u64_max_never_overflow() {
    let top = u64::MAX;
    let mut v = va(top - 100, top);
    assert_eq!(v.alloc(u64::MAX, 1), Err(AllocError::NoSpace));
    assert_eq!(v.alloc(1, 1 << 63), Err(AllocError::NoSpace));
    assert_eq!(v.alloc(100, 1), Ok(top - 100));
    assert_eq!(v.alloc(1, 1), Err(AllocError::NoSpace));
    v.free(top - 100).unwrap();
    assert_eq!(v.alloc_in(10, 1, top - 10, top), Ok(top - 10));
    v.check().unwrap();

    let mut w = va(0, u64::MAX);
    assert_eq!(w.alloc(1, 1 << 63), Ok(0));
    assert_eq!(w.alloc(1, 1 << 63), Ok(1 << 63));
    assert_eq!(w.alloc(1, 1 << 63), Err(AllocError::NoSpace));
    // Free: [1, 2^63) and [2^63 + 1, MAX).
    assert_eq!(w.alloc((1 << 63) - 1, 1), Ok(1));
    assert_eq!(w.alloc((1 << 63) - 1, 1), Err(AllocError::NoSpace));
    assert_eq!(w.alloc((1 << 63) - 2, 1), Ok((1 << 63) + 1));
    w.check().unwrap();
    // No area starts at u64::MAX (the busy index's empty-slot key).
    assert_eq!(w.free(u64::MAX), Err(FreeError::NotAllocated));
    assert_eq!(w.free_lazy(u64::MAX), Err(FreeError::NotAllocated));
    w.check().unwrap();
}

#[test]
fn exact_lowest_fit_past_near_misses() {
    // Free blocks that are long enough but wrongly aligned must be
    // examined one by one and rejected, without missing a later fit.
    let mut v = va(0, 64);
    let mut busy = vec![];
    for i in 0..16u64 {
        busy.push(v.alloc(4, 1).unwrap());
        assert_eq!(busy[i as usize], 4 * i);
    }
    // Free [4k+1..] style holes: free the 4-byte areas 1, 5, 9 -> free
    // blocks [4,8), [20,24), [36,40), all 4-aligned and of length 4.
    for i in [1, 5, 9] {
        v.free(busy[i]).unwrap();
    }
    // Size 4 align 8: [4,8) and [20,24) are near misses; [36,40)? 36%8=4,
    // also a miss -> NoSpace after checking all three.
    assert_eq!(v.alloc(4, 8), Err(AllocError::NoSpace));
    // Size 2 align 8: no block holds a multiple of 8.
    assert_eq!(v.alloc(2, 8), Err(AllocError::NoSpace));
    // Free [40, 44) too: it merges with [36, 40) into [36, 44), whose
    // only multiple of 8 (40) has room; the kernel's search for
    // size + align - 1 = 11 bytes would find nothing at all.
    v.free(busy[10]).unwrap();
    assert_eq!(v.alloc(4, 8), Ok(40));
    // Size 2 align 2: lowest is 4.
    assert_eq!(v.alloc(2, 2), Ok(4));
    v.check().unwrap();
}

#[test]
fn lazy_is_not_reused_until_purge_and_flushes_once() {
    let mut v = va(0, 40);
    let a = v.alloc(10, 1).unwrap();
    let b = v.alloc(10, 1).unwrap();
    let _c = v.alloc(10, 1).unwrap();
    v.free_lazy(a).unwrap();
    v.free_lazy(b).unwrap();
    assert_eq!(v.alloc(10, 1), Ok(30));
    let mut flushes = vec![];
    assert!(v.purge(&mut |s, e| flushes.push((s, e))));
    assert_eq!(flushes, [(0, 20)]);
    assert!(!v.purge(&mut |s, e| flushes.push((s, e))));
    assert_eq!(flushes.len(), 1);
    assert_eq!(free_blocks(&v), [(0, 20)]);
    v.check().unwrap();
}

#[test]
fn nospace_purges_once_and_retries() {
    let mut v = va(0, 20);
    let a = v.alloc(20, 1).unwrap();
    v.free_lazy(a).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let s2 = seen.clone();
    v.set_flush_hook(Some(alloc::boxed::Box::new(move |s, e| {
        s2.lock().unwrap().push((s, e))
    })));
    assert_eq!(v.alloc(5, 1), Ok(0));
    assert_eq!(*seen.lock().unwrap(), [(0, 20)]);
    assert_eq!(v.stats().flushes, 1);
    v.check().unwrap();
}

#[test]
fn lazy_max_is_strictly_greater() {
    let mut v = va(0, 100);
    v.set_lazy_max(20);
    let a = v.alloc(10, 1).unwrap();
    let b = v.alloc(10, 1).unwrap();
    let c = v.alloc(10, 1).unwrap();
    v.free_lazy(a).unwrap();
    v.free_lazy(b).unwrap();
    assert_eq!(v.stats().lazy_bytes, 20); // equal: no purge yet
    v.free_lazy(c).unwrap();
    assert_eq!(v.stats().lazy_bytes, 0); // 30 > 20: purged
    assert_eq!(v.stats().flushes, 1);
    assert_eq!(free_blocks(&v), [(0, 100)]);
    v.check().unwrap();
}

#[test]
fn purges_count_only_purges_that_released_something() {
    let mut v = va(0, 100);
    assert!(!v.purge(&mut |_, _| {}));
    assert_eq!((v.stats().purges, v.stats().flushes), (0, 0));
    let a = v.alloc(10, 1).unwrap();
    v.free_lazy(a).unwrap();
    assert!(v.purge(&mut |_, _| {}));
    assert!(!v.purge(&mut |_, _| {}));
    assert_eq!((v.stats().purges, v.stats().flushes), (1, 1));
}

#[test]
fn check_errors_name_the_invariant_and_the_place() {
    use crate::error::Invariant;
    let mut v = va(0, 100);
    v.alloc(10, 1).unwrap();
    v.free_bytes += 1;
    let e = v.check().unwrap_err();
    assert_eq!(
        (e.component(), e.invariant()),
        ("mmkit::vmap", Invariant::Accounting)
    );
    v.free_bytes -= 1;
    v.check().unwrap();
    // A lazy area overlapping a free block: the partition breaks there.
    v.lazy.areas.push((40, 50));
    (v.lazy.lo, v.lazy.hi) = (40, 50);
    let e = v.check().unwrap_err();
    assert_eq!((e.invariant(), e.at()), (Invariant::Layout, Some(40)));
    assert!(alloc::format!("{e}").starts_with("mmkit::vmap: layout invariant violated at 0x28: "));
}

// The brute-force model of the tests below: a sorted list of free
// ranges, linear lowest fit (`crate::testkit`).
use crate::testkit::{model_free, model_take};

/// The model's lowest fit in `[ws, we)`, taken out of its free blocks.
fn model_alloc(
    model: &mut Vec<(u64, u64)>,
    size: u64,
    align: u64,
    ws: u64,
    we: u64,
) -> Option<u64> {
    let a = model
        .iter()
        .find_map(|&(s, e)| crate::range::fit_in(s.max(ws), e.min(we), size, align))?;
    model_take(model, a, size);
    Some(a)
}

/// [`model_alloc`], with the allocator's purge and retry when it finds
/// nothing and areas wait in `lazy`.
fn model_alloc_purging(
    model: &mut Vec<(u64, u64)>,
    lazy: &mut Vec<(u64, u64)>,
    size: u64,
    align: u64,
    ws: u64,
    we: u64,
) -> Option<u64> {
    if let Some(a) = model_alloc(model, size, align, ws, we) {
        return Some(a);
    }
    if lazy.is_empty() {
        return None;
    }
    model_purge(model, lazy);
    model_alloc(model, size, align, ws, we)
}

/// The model's purge: every lazily freed area returns to free space.
fn model_purge(model: &mut Vec<(u64, u64)>, lazy: &mut Vec<(u64, u64)>) {
    for (s, e) in lazy.drain(..) {
        model_free(model, s, e);
    }
}

#[test]
fn random_ops_match_linear_scan() {
    let mut rnd = crate::testkit::xorshift(0x9e3779b97f4a7c15u64);
    for round in 0..20 {
        let (lo, hi) = if round % 2 == 0 {
            (0, 4096)
        } else {
            (u64::MAX - 4096, u64::MAX)
        };
        let mut v = va(lo, hi);
        let mut model: Vec<(u64, u64)> = vec![(lo, hi)];
        let mut live: Vec<(u64, u64)> = vec![];
        for _ in 0..400 {
            if rnd() % 3 != 0 || live.is_empty() {
                let size = rnd() % 64 + 1;
                let align = 1u64 << (rnd() % 8);
                let ws = lo + rnd() % 4096;
                let we = ws.saturating_add(rnd() % 4096 + 1);
                let want = model_alloc(&mut model, size, align, ws, we);
                assert_eq!(v.alloc_in(size, align, ws, we).ok(), want);
                if let Some(a) = want {
                    live.push((a, a + size));
                }
            } else {
                let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                assert_eq!(v.free(s), Ok(e - s));
                model_free(&mut model, s, e);
            }
            v.check().unwrap();
            assert_eq!(free_blocks(&v), model);
        }
    }
}

/// The wilderness can lie below an isolated block: a lower fit in it
/// is found before the isolated block is taken.
#[test]
fn a_wilderness_below_an_isolated_block_is_searched_first() {
    let p = 0x1000;
    let mut v = va(0, 100 * p);
    for (a, size) in [(0, 1), (1, 1), (2, 2), (4, 1), (5, 95)] {
        assert_eq!(v.alloc(size * p, p), Ok(a * p));
    }
    // Both freed areas merge with nothing: isolated [0, 1) and [2, 4).
    v.free(0).unwrap();
    v.free(2 * p).unwrap();
    // Two pages: [0, 1) is looked at in vain and pushed into the tree,
    // where, the only block, it is the wilderness.
    assert_eq!(v.alloc(2 * p, p), Ok(2 * p));
    assert_eq!(v.isolated.len(), 0);
    v.free(2 * p).unwrap(); // isolated [2, 4) again
    assert_eq!(v.isolated.len(), 1);
    assert_eq!(v.alloc(p, p), Ok(0));
    assert_eq!(v.alloc(p, p), Ok(2 * p));
    v.check().unwrap();
}

/// A best fit whose isolated block has exactly the request's length takes
/// an equal block lower in the tree instead (the lowest among equals), and
/// the isolated one once the tree holds none as short.
#[test]
fn an_isolated_block_of_the_size_yields_to_a_lower_equal_one() {
    use crate::request::{Policy, Request};
    let p = 0x1000;
    let mut v = va(0, 100 * p);
    let best = |v: &mut VmapAllocator, pages: u64| {
        v.allocate(Request::bytes(pages * p).unwrap().policy(Policy::BestFit))
    };
    for i in 0..6 {
        assert_eq!(v.alloc(3 * p, p), Ok(3 * i * p));
    }
    // [9, 12) is isolated and taken back: the array has paid.
    v.free(9 * p).unwrap();
    assert_eq!(v.isolated.len(), 1);
    assert_eq!(best(&mut v, 3), Ok(9 * p));
    // [3, 6) is isolated, then goes into the tree: it cannot hold four pages.
    v.free(3 * p).unwrap();
    assert_eq!(v.isolated.len(), 1);
    assert_eq!(best(&mut v, 4), Ok(18 * p));
    assert_eq!(v.isolated.len(), 0);
    // [9, 12) is isolated: the tree's [3, 6) is as short and lower.
    v.free(9 * p).unwrap();
    assert_eq!(v.isolated.len(), 1);
    assert_eq!(best(&mut v, 3), Ok(3 * p));
    assert_eq!(best(&mut v, 3), Ok(9 * p));
    assert_eq!(v.isolated.len(), 0);
    v.check().unwrap();
}

/// A freed area between two free blocks waits as the pending area,
/// the blocks left in the tree as its pads: taken back whole without a
/// change to the tree, found exactly when a request takes part of the
/// extent or a pad, and merged before a free beside a pad.
#[test]
fn a_pending_area_is_exact_in_every_use() {
    let p = 0x1000;
    let blocks = |v: &VmapAllocator| -> Vec<(u64, u64)> {
        free_blocks(v)
            .iter()
            .map(|&(s, e)| (s / p, e / p))
            .collect()
    };
    // One-page areas at pages 0..5, pages 5..95 live, the wilderness
    // [95, 100) above; pages 1 and 3 freed and moved into the tree (the
    // pads to be: a pad is never the wilderness).
    let mut v = va(0, 100 * p);
    for a in 0..5 {
        assert_eq!(v.alloc(p, p), Ok(a * p));
    }
    assert_eq!(v.alloc(90 * p, p), Ok(5 * p));
    v.free(p).unwrap();
    v.free(3 * p).unwrap();
    v.settle_isolated();
    assert_eq!((v.free.len(), v.isolated.len()), (3, 0));
    // Page 2 freed: pending, [1, 4) one free block, the tree as it was.
    v.free(2 * p).unwrap();
    let h = v.pending.held().unwrap();
    assert_eq!((h.area, h.extent), ((2 * p, 3 * p), (p, 4 * p)));
    assert_eq!(v.free.len(), 3);
    assert_eq!(blocks(&v), [(1, 4), (95, 100)]);
    assert_eq!(v.stats().free_blocks, 2);
    assert_eq!(v.stats().largest_free, 5 * p);
    v.check().unwrap();
    // Two-page aligned: exactly the area, taken back.
    assert_eq!(v.alloc(p, 2 * p), Ok(2 * p));
    assert!(v.pending.held().is_none());
    assert_eq!(
        (v.free.len(), blocks(&v)),
        (3, vec![(1, 2), (3, 4), (95, 100)])
    );
    // Again pending; one page: the lowest is the pad at 1, in the tree.
    v.free(2 * p).unwrap();
    assert!(v.pending.held().is_some());
    assert_eq!(v.alloc(p, p), Ok(p));
    assert!(v.pending.held().is_none());
    assert_eq!(blocks(&v), [(2, 4), (95, 100)]);
    v.check().unwrap();
    // Pending with one pad, [2, 3) beside [3, 4); two pages: the extent.
    v.free(p).unwrap();
    v.alloc(p, p).unwrap(); // back to [2, 4) in the tree
    assert_eq!(v.alloc(p, 2 * p), Ok(2 * p));
    v.free(2 * p).unwrap();
    assert_eq!(v.pending.held().unwrap().extent, (2 * p, 4 * p));
    assert_eq!(v.alloc(2 * p, p), Ok(2 * p));
    assert_eq!(blocks(&v), [(95, 100)]);
    v.check().unwrap();
    // Pending again, then a free beside its pad: merged into one.
    v.free(2 * p).unwrap(); // nothing beside: isolated
    v.settle_isolated();
    assert_eq!(v.alloc(p, p), Ok(2 * p)); // [3, 4) stays in the tree
    v.free(2 * p).unwrap();
    assert_eq!(v.pending.held().unwrap().extent, (2 * p, 4 * p));
    v.free(4 * p).unwrap();
    assert!(v.pending.held().is_none());
    assert_eq!(blocks(&v), [(2, 5), (95, 100)]);
    assert_eq!(v.stats().free_blocks, 2);
    v.check().unwrap();
}

/// Churn that keeps isolated blocks and the pending area in use (areas
/// freed between live ones or beside free blocks, and taken back),
/// mixed with everything that must see them: frees beside them, lazy
/// frees and purges, windows, alignments, growing, shrinking and the
/// highest fit. Every answer and every free block is checked against
/// the model.
#[test]
fn isolated_and_pending_blocks_stay_exact_through_every_operation() {
    let mut rnd = crate::testkit::xorshift(0x2545_f491_4f6c_dd1du64);
    let (lo, hi) = (0x1000, 0x1000 + 64 * 256);
    let mut v = va(lo, hi);
    let mut model = vec![(lo, hi)];
    let mut live: Vec<(u64, u64)> = vec![];
    let mut lazy: Vec<(u64, u64)> = vec![];
    let (mut kept, mut taken_back) = (0, 0);
    let (mut held, mut held_back) = (0, 0);
    // Packed areas of 1..4 units of 64.
    for _ in 0..48 {
        let size = 64 * (1 + rnd() % 4);
        let a = model_alloc(&mut model, size, 64, lo, hi).unwrap();
        assert_eq!(v.alloc(size, 64), Ok(a));
        live.push((a, a + size));
    }
    for step in 0..4000 {
        let kept_before = v.isolated.len();
        match rnd() % 16 {
            // Free an area and ask for its size back: the common case.
            0..=9 if !live.is_empty() => {
                let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                assert_eq!(v.free(s), Ok(e - s));
                model_free(&mut model, s, e);
                kept += usize::from(v.isolated.len() > kept_before);
                let pending = v.pending.held().map(|h| h.area);
                held += usize::from(pending.is_some());
                let size = if rnd() % 4 == 0 {
                    64 * (1 + rnd() % 4)
                } else {
                    e - s
                };
                let align = 64 << (rnd() % 3);
                let want = model_alloc_purging(&mut model, &mut lazy, size, align, lo, hi);
                let before = v.isolated.len();
                assert_eq!(v.alloc(size, align).ok(), want, "step {step}");
                taken_back += usize::from(v.isolated.len() < before);
                held_back +=
                    usize::from(pending.is_some() && pending == want.map(|a| (a, a + size)));
                if let Some(a) = want {
                    live.push((a, a + size));
                }
            }
            10 if !live.is_empty() => {
                let (s, e) = live.swap_remove((rnd() % live.len() as u64) as usize);
                assert_eq!(v.free_lazy(s), Ok(e - s));
                lazy.push((s, e));
            }
            11 => {
                if v.purge(&mut |_, _| {}) {
                    model_purge(&mut model, &mut lazy);
                }
                assert!(lazy.is_empty());
            }
            12 => {
                let (size, ws) = (64 * (1 + rnd() % 3), lo + 64 * (rnd() % 256));
                let want = model_alloc_purging(&mut model, &mut lazy, size, 64, ws, ws + 1024);
                assert_eq!(v.alloc_in(size, 64, ws, ws + 1024).ok(), want);
                if let Some(a) = want {
                    live.push((a, a + size));
                }
            }
            13 => {
                // The highest fit, from the model's last block that holds it.
                let size = 64;
                let highest = |m: &[(u64, u64)]| {
                    m.iter()
                        .rev()
                        .find(|&&(s, e)| e - s >= size)
                        .map(|&(_, e)| e - size)
                };
                let mut want = highest(&model);
                if want.is_none() && !lazy.is_empty() {
                    // A failing request purges once and retries.
                    model_purge(&mut model, &mut lazy);
                    want = highest(&model);
                }
                let req = crate::request::Request::bytes(size)
                    .unwrap()
                    .policy(crate::request::Policy::Highest);
                assert_eq!(v.allocate(req).ok(), want);
                if let Some(a) = want {
                    model_alloc(&mut model, size, 1, a, a + size).unwrap();
                    live.push((a, a + size));
                }
            }
            14 => {
                // Grow by a unit at the top, then shrink it away if free.
                let (s, e) = v.space();
                v.grow(s..e + 64).unwrap();
                model_free(&mut model, e, e + 64);
                if v.shrink(s..e).is_ok() {
                    model_alloc(&mut model, 64, 1, e, e + 64).unwrap();
                }
            }
            _ => {}
        }
        v.check().unwrap();
        assert_eq!(free_blocks(&v), model, "step {step}");
    }
    // The churn used the array and the pending area: blocks went in
    // and came back out.
    assert!(
        kept > 100 && taken_back > 100 && held > 300 && held_back > 100,
        "kept {kept}, taken back {taken_back}, held {held}, held back {held_back}"
    );
}

/// Without the alignment summaries the searches find the same lowest
/// (and highest) fits: two allocators, one of each, in lockstep through
/// allocations at every alignment up to 2^24 pages' worth, frees and
/// lazy frees over a fragmented space.
#[test]
fn without_align_summaries_the_fits_are_the_same() {
    let mut with = va(0, 1 << 36);
    let mut without = va(0, 1 << 36).without_align_summaries();
    let mut live: Vec<u64> = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000 {
        let r = next();
        if r % 3 != 0 || live.is_empty() {
            let size = ((r >> 8) % 64 + 1) << 12;
            let align = 1u64 << (12 + (r >> 20) % 25 * u64::from(r % 4 == 1));
            let policy = if r % 17 == 0 {
                crate::request::Policy::Highest
            } else {
                crate::request::Policy::Lowest
            };
            let a = with.alloc_placed(size, align, (0, 1 << 36), policy);
            assert_eq!(
                a,
                without.alloc_placed(size, align, (0, 1 << 36), policy),
                "op {i}"
            );
            live.extend(a);
        } else {
            let at = live.swap_remove((r >> 8) as usize % live.len());
            if r % 5 == 0 {
                assert_eq!(with.free_lazy(at), without.free_lazy(at), "op {i}");
            } else {
                assert_eq!(with.free(at), without.free(at), "op {i}");
            }
        }
        if i % 1000 == 0 {
            with.check().unwrap();
            without.check().unwrap();
        }
    }
    with.check().unwrap();
    without.check().unwrap();
}
