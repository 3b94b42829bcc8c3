//! Hostile input for the vblock front end: every bad argument returns a
//! typed error and changes nothing (`check()` passes, counters equal).

use mmkit::vblock::{Config, Policy, VblockAllocator};
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, FreeError};

const CFG: Config = Config {
    page_size: 4096,
    max_alloc: 16,
    bits: 64,
};

fn make(policy: Policy) -> VblockAllocator<VmapAllocator> {
    VblockAllocator::new(VmapAllocator::new(0, 64 << 20).unwrap(), CFG, policy, 2).unwrap()
}

#[test]
fn bad_configs_are_refused() {
    let range = || VmapAllocator::new(0, 64 << 20).unwrap();
    for cfg in [
        Config {
            page_size: 0,
            ..CFG
        },
        Config {
            page_size: 4095,
            ..CFG
        },
        Config { bits: 0, ..CFG },
        Config { bits: 63, ..CFG },
        Config {
            max_alloc: 0,
            ..CFG
        },
        Config {
            max_alloc: 64,
            ..CFG
        },
        Config {
            page_size: 1 << 62,
            ..CFG
        },
    ] {
        assert_eq!(cfg.validate(), Err(AllocError::Invalid), "{cfg:?}");
        assert!(VblockAllocator::new(range(), cfg, Policy::Current, 1).is_err());
    }
    assert!(
        VblockAllocator::new(range(), CFG, Policy::Current, 0).is_err(),
        "0 cpus"
    );
}

/// `max_alloc` above 2^63 would wrap `next_power_of_two` and pass
/// validation: it is refused.
#[test]
fn max_alloc_near_u64_max_is_refused() {
    let cfg = Config {
        max_alloc: u64::MAX,
        bits: 1024,
        ..CFG
    };
    assert_eq!(cfg.validate(), Err(AllocError::Invalid));
}

#[test]
fn vblock_refuses_hostile_input() {
    for policy in [Policy::Legacy, Policy::Current] {
        let mut vb = make(policy);
        let a = vb.map(0, 3).unwrap();
        let big = vb.map(1, 40).unwrap();
        let before = (vb.counters(), vb.live_pages());
        for (cpu, pages) in [(0, 0), (2, 1), (usize::MAX, 1), (0, u64::MAX), (0, 1 << 40)] {
            let r = vb.map(cpu, pages);
            assert!(r.is_err(), "map({cpu}, {pages}) = {r:?}");
            vb.check().unwrap();
            assert_eq!((vb.counters(), vb.live_pages()), before);
        }
        let bad = [
            (a, 0), // zero pages
            (a, 2), // wrong page count
            (a, 4),
            (a + 4096, 1), // interior
            (a + 1, 3),    // unaligned
            (big, 39),     // wrong count, large mapping
            (big + 4096, 39),
            (u64::MAX, 1), // foreign
            (u64::MAX - 4095, u64::MAX),
            (1 << 40, 1),
        ];
        for (addr, pages) in bad {
            let r = vb.unmap(addr, pages);
            assert!(
                matches!(r, Err(FreeError::NotAllocated | FreeError::Invalid)),
                "unmap({addr:#x}, {pages}) = {r:?}"
            );
            vb.check().unwrap();
            assert_eq!((vb.counters(), vb.live_pages()), before);
        }
        assert_eq!(vb.unmap(a, 3), Ok(()));
        assert!(vb.unmap(a, 3).is_err(), "double unmap");
        assert_eq!(vb.unmap(big, 40), Ok(()));
        assert!(vb.unmap(big, 40).is_err(), "double unmap, large");
        vb.check().unwrap();
    }
}
