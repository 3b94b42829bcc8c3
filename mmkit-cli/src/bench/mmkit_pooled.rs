//! mmkit's inexact mode, [`PooledVmap`] with one CPU: pools of freed
//! areas by size (1 to 256 pages, 64 areas each) in front of the exact
//! `VmapAllocator`, after Linux 6.9's vmap nodes. An allocation of a
//! pooled size takes the newest freed area of that size when it is
//! aligned; anything else goes to the exact allocator. Fast where frees
//! and allocations repeat sizes, but not the lowest fit: the bench's
//! speed goal is about the exact allocator, and this row does not count
//! toward it.

use mmkit::vmap::pooled::{PooledConfig, PooledVmap};

use super::{PeerRange, PAGE};

/// [`PooledVmap`] over `[0, space)`, CPU 0 only; the handle is the start.
pub struct MmkitPooled(PooledVmap);

impl PeerRange for MmkitPooled {
    type Handle = u64;

    fn name() -> &'static str {
        "mmkit-pooled"
    }

    fn about() -> &'static str {
        "mmkit's inexact mode: per-size pools of freed areas, then lowest fit"
    }

    fn new(space_bytes: u64, max_areas: usize) -> Self {
        let va = super::mmkit_vmap::reserved(space_bytes, max_areas);
        let cfg = PooledConfig {
            cpus: 1,
            granule: PAGE,
            ..PooledConfig::default()
        };
        MmkitPooled(PooledVmap::new(va, cfg).expect("one CPU, a page granule: valid"))
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        let a = self.0.alloc(0, size, align).ok()?;
        Some((a, a))
    }

    fn free(&mut self, addr: u64) -> bool {
        self.0.free(0, addr).is_ok()
    }

    fn exact_lowest_fit() -> bool {
        false
    }

    fn supports_align() -> bool {
        true
    }
}
