//! The memfd machine as the shared layer's [`Mmu`]: in user space clearing
//! and flushing are one system call, so `clear` records the range (the
//! mapping stays, and the layer keeps the range and its frames) and
//! `flush` unmaps the recorded ranges inside its span, one call per run of
//! adjacent ranges, never touching a live area. A call the kernel refuses
//! leaves its run recorded and is reported: the layer keeps it stuck.
//!
//! ```text
//!  layer: retire ──clear──> cleared [(start, end), ...]   still mapped
//!         purge  ──flush(lo, hi)──> munmap per run inside [lo, hi)
//!                                   refused runs stay in `cleared`
//! ```

use mmkit_vmalloc::{MapFailed, Mmu, Refused, VmError as LayerError, PAGE};

use super::Space;
use crate::phys::Block;
use crate::sys;

/// The memfd machine, borrowed with the recorded ranges (which live under
/// the space's lock, beside the layer).
pub(crate) struct MemfdMmu<'a> {
    pub(crate) space: &'a Space,
    pub(crate) cleared: &'a mut Vec<(u64, u64)>,
}

/// A released entry of `cleared`.
const DONE: (u64, u64) = (0, 0);

impl Mmu for MemfdMmu<'_> {
    /// Maps `pfns` (order-0 frames the caller holds) with one `mmap` per
    /// run of consecutive frames, charged to the mapping budget; the owner
    /// of the area credits it when the range is released, as
    /// [`Space`]'s areas do from their runs.
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        let blocks: Vec<Block> = pfns.iter().map(|&pfn| Block { pfn, order: 0 }).collect();
        self.space.map_frames(va, &blocks).map(drop).map_err(|p| {
            let mapped = p.blocks as u64;
            let err = LayerError::MapFailed {
                va: va + mapped * PAGE,
            };
            MapFailed { err, mapped }
        })
    }

    fn clear(&mut self, va: u64, pages: u64) {
        self.cleared.push((va, va + pages * PAGE));
    }

    fn flush(&mut self, start: u64, end: u64) -> Refused {
        let c = &mut *self.cleared;
        c.sort_unstable();
        let (lo, hi) = (
            c.partition_point(|r| r.0 < start),
            c.partition_point(|r| r.1 <= end),
        );
        let mut refused = Refused::new();
        let mut i = lo;
        while i < hi {
            let (s, mut e) = c[i];
            let mut j = i + 1;
            while j < hi && c[j].0 == e {
                e = c[j].1;
                j += 1;
            }
            if self.space.unmap_range(s, e - s) {
                c[i..j].fill(DONE);
            } else {
                refused.push((s, e));
            }
            i = j;
        }
        c.retain(|&r| r != DONE);
        refused
    }

    /// What the kernel maps at `va` (`/proc/self/maps`: slow, for checks).
    /// A cleared range still shows its frames until it is flushed.
    fn translate(&self, va: u64) -> Option<u64> {
        let inode = self.space.phys.mem.inode().ok()?;
        let lines = sys::mappings().ok()?;
        let l = lines.iter().find(|l| l.start <= va && va < l.end)?;
        let ours = &l.perms == b"rw-s" && l.inode == inode;
        ours.then(|| (l.offset + (va - l.start)) / self.space.page)
    }
}
