//! Hostile input for the range allocators (vmap and the linear baseline):
//! every public function given bad arguments returns a typed error and
//! changes nothing (`check()` passes, `stats()` compares equal).

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::range::RangeAllocator;
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, FreeError};

/// The state: stats without the purge counter (a `NoSpace` counts the
/// documented purge attempt, which finds nothing lazy and changes nothing).
fn state<A: RangeAllocator>(a: &A) -> mmkit::range::RangeStats {
    mmkit::range::RangeStats {
        purges: 0,
        ..a.stats()
    }
}

fn refused<A: RangeAllocator>(a: &mut A, live: &[u64]) {
    let before = state(a);
    let (s, e) = a.space();
    let bad_allocs = [
        (0, 1, s, e),                         // zero size
        ((e - s).saturating_add(1), 1, s, e), // larger than the space (or maximal)
        (1, 0, s, e),                         // align 0
        (1, 3, s, e),                         // align not a power of two
        (1, u64::MAX, s, e),                  // align all ones
        (1, (1 << 63) + 1, s, e),             // align above 2^63
        (1, 1, e, s),                         // inverted window
        (1, 1, s, s),                         // empty window
        (1, 1, u64::MAX, u64::MAX),           // empty window at the top
        (u64::MAX - 1, 1 << 63, s, e),        // size + align overflow
    ];
    for (k, (size, align, lo, hi)) in bad_allocs.into_iter().enumerate() {
        let r = a.alloc_in(size, align, lo, hi);
        match r {
            // The first nine are malformed; the last may fit a full space.
            Err(AllocError::Invalid) if k != 1 && k != 9 => {}
            Err(AllocError::Invalid | AllocError::NoSpace) if k == 1 || k == 9 => {}
            Ok(x) if k == 1 || k == 9 => assert_eq!(a.free(x), Ok(size)),
            r => panic!("alloc_in({size:#x}, {align:#x}, {lo:#x}, {hi:#x}) = {r:?}"),
        }
        a.check().unwrap();
        assert_eq!(state(a), before);
    }
    for x in [s, s + 1, e - 1, e, u64::MAX, 0] {
        if live.contains(&x) {
            continue;
        }
        if a.free(x).is_ok() {
            panic!("free({x:#x}) of nothing succeeded");
        }
        assert_eq!(a.free_lazy(x), Err(FreeError::NotAllocated));
        a.check().unwrap();
        assert_eq!(state(a), before);
    }
}

fn hostile<A: RangeAllocator>(make: fn(u64, u64) -> Result<A, AllocError>) {
    // Spaces that are empty or inverted are refused.
    for (s, e) in [(0, 0), (5, 5), (10, 1), (u64::MAX, u64::MAX), (u64::MAX, 0)] {
        assert_eq!(
            make(s, e).err(),
            Some(AllocError::Invalid),
            "space [{s}, {e})"
        );
    }
    for (s, e) in [
        (0, 1 << 20),
        (u64::MAX - (1 << 20), u64::MAX),
        (0, u64::MAX),
        (1, 2),
    ] {
        let mut a = make(s, e).unwrap();
        refused(&mut a, &[]);
        // With live areas: interior, end and double frees change nothing.
        if let Ok(x) = a.alloc(1.max((e - s) / 8), 1) {
            let size = 1.max((e - s) / 8);
            refused(&mut a, &[x]);
            let before = state(&a);
            if size > 1 {
                assert_eq!(a.free(x + 1), Err(FreeError::NotAllocated));
            }
            assert_eq!(state(&a), before);
            assert_eq!(a.free(x), Ok(size));
            assert_eq!(a.free(x), Err(FreeError::NotAllocated));
            assert_eq!(a.free_lazy(x), Err(FreeError::NotAllocated));
            a.check().unwrap();
        }
        // A lazy threshold of 0 or u64::MAX is legal and keeps the contract.
        a.set_lazy_max(0);
        a.set_lazy_max(u64::MAX);
        a.check().unwrap();
    }
}

#[test]
fn vmap_refuses_hostile_input() {
    hostile(VmapAllocator::new);
}

#[test]
fn linear_vmap_refuses_hostile_input() {
    hostile(LinearVmap::new);
}
