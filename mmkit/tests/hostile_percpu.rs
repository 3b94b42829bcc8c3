//! Hostile input for both percpu allocators (bitmap and area map): every
//! bad argument returns a typed error and changes nothing.

use mmkit::baseline::area_map::AreaMapAllocator;
use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator};
use mmkit::{AllocError, FreeError};

fn hostile<A: PercpuAlloc>(make: fn(u64) -> Result<A, AllocError>) {
    for unit in [0, 1, 3, 4095, u64::MAX] {
        assert!(make(unit).is_err(), "unit {unit}");
    }
    let mut a = make(4096).unwrap();
    let p = a.alloc(64, 16).unwrap();
    let before = a.stats();
    for (size, align) in [
        (0, 1),
        (4097, 1),
        (u64::MAX, 1),
        (8, 0),
        (8, 3),
        (8, 8192),
        (8, u64::MAX),
    ] {
        assert_eq!(
            a.alloc(size, align),
            Err(AllocError::Invalid),
            "{size} {align}"
        );
        a.check().unwrap();
        assert_eq!(a.stats(), before);
    }
    let bad = [
        PcpuPtr {
            chunk: p.chunk,
            offset: p.offset + 4,
        }, // interior
        PcpuPtr {
            chunk: p.chunk,
            offset: p.offset + 1,
        }, // unaligned
        PcpuPtr {
            chunk: p.chunk,
            offset: 4096,
        }, // past the unit
        PcpuPtr {
            chunk: p.chunk,
            offset: u32::MAX,
        },
        PcpuPtr {
            chunk: p.chunk + 1,
            offset: 0,
        }, // foreign chunk
        PcpuPtr {
            chunk: u32::MAX,
            offset: 0,
        },
    ];
    for q in bad {
        let r = a.free(q);
        assert!(
            matches!(r, Err(FreeError::Invalid | FreeError::NotAllocated)),
            "free({q:?}) = {r:?}"
        );
        a.check().unwrap();
        assert_eq!(a.stats(), before);
    }
    assert_eq!(a.free(p), Ok(64));
    assert!(a.free(p).is_err(), "double free");
    a.check().unwrap();
}

#[test]
fn bitmap_refuses_hostile_input() {
    hostile(PercpuAllocator::new);
    // The largest unit is taken (no chunk exists before the first
    // allocation), one block more is refused.
    use mmkit::percpu::{BLOCK_SIZE, MAX_UNIT_SIZE};
    assert!(PercpuAllocator::new(MAX_UNIT_SIZE).is_ok());
    assert_eq!(
        PercpuAllocator::new(MAX_UNIT_SIZE + BLOCK_SIZE).err(),
        Some(AllocError::Invalid)
    );
}

#[test]
fn area_map_refuses_hostile_input() {
    hostile(AreaMapAllocator::new);
}
