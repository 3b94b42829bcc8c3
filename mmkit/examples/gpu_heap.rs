//! A GPU-style heap: suballocate buffers with alignment from a fixed
//! 256 MiB device range, free some lazily (the device may still read them
//! until the next fence), and reuse space only after the fence.
//!
//! Run with `cargo run -p mmkit --example gpu_heap`.

use mmkit::vmap::VmapAllocator;

fn main() {
    const HEAP: u64 = 0x1_0000_0000; // device address of the heap
    let mut heap = VmapAllocator::new(HEAP, HEAP + (256 << 20)).expect("valid range");

    // Vertex buffers want 256-byte alignment, textures 64 KiB.
    let vb = heap.alloc(3 * 1024, 256).expect("space");
    let tex = heap.alloc(4 << 20, 64 << 10).expect("space");
    let ub = heap.alloc(512, 256).expect("space");
    println!("vertex buffer {vb:#x}, texture {tex:#x}, uniforms {ub:#x}");

    // The frame is submitted; the texture is dropped but the GPU may still
    // sample it, so release it lazily: its range is not handed out again
    // until the fence (purge) passes.
    heap.free_lazy(tex).expect("live");
    let next = heap.alloc(4 << 20, 64 << 10).expect("space");
    assert_ne!(
        next, tex,
        "lazily freed space is not reused before the fence"
    );

    // The fence signalled: one purge makes the space reusable and reports the
    // one range to invalidate.
    heap.purge(&mut |s, e| println!("invalidate [{s:#x}, {e:#x})"));
    let again = heap.alloc(4 << 20, 64 << 10).expect("space");
    assert_eq!(again, tex, "lowest fit reuses the purged range");

    // Bad input is a typed error and changes nothing.
    assert!(heap.alloc(0, 256).is_err());
    assert!(heap.alloc(64, 3).is_err());
    assert!(heap.free(vb + 1).is_err());
    heap.check().expect("consistent");
    println!("{:?}", heap.stats());
}
