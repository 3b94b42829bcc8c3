//! A GPU-style heap: suballocate buffers with alignment from a fixed
//! 256 MiB device range, free some lazily (the device may still read them
//! until the next fence), and reuse space only after the fence. Short-lived
//! staging buffers come from the top of the heap so they do not fragment
//! the long-lived resources at the bottom, and the heap grows when the
//! driver maps more VRAM.
//!
//! Run with `cargo run -p mmkit --example gpu_heap`.

use core::alloc::Layout;

use mmkit::request::{Policy, Request};
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

    // Staging buffers: top down, out of the way of long-lived resources.
    let staging = Request::bytes(1 << 20).expect("non-zero").align(4096);
    let st = heap
        .allocate(staging.clone().policy(Policy::Highest))
        .expect("space");
    assert_eq!(st, HEAP + (256 << 20) - (1 << 20));
    // A CPU-side struct mirrored on the device: a `Layout` is a request.
    let params = heap
        .alloc_layout(Layout::new::<[f32; 16]>())
        .expect("space");
    println!("staging {st:#x}, params {params:#x}");

    // The upload finished: the staging buffer goes, and the top of the heap
    // is contiguous again.
    heap.free(st).expect("live");

    // The driver maps 256 MiB more VRAM right after the heap: grow it. The
    // new space merges with the free block at the old top.
    heap.grow(HEAP..HEAP + (512 << 20))
        .expect("contains the old heap");
    let big = heap
        .alloc(300 << 20, 2 << 20)
        .expect("space after the grow");
    println!("after grow: 300 MiB buffer at {big:#x}");

    // Bad input is a typed error and changes nothing.
    assert!(heap.alloc(0, 256).is_err());
    assert!(heap.alloc(64, 3).is_err());
    assert!(heap.free(vb + 1).is_err());
    heap.check().expect("consistent");
    println!("{:?}", heap.stats());
}
