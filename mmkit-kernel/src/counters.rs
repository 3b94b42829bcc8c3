//! What the experiments count around a run: TLB-flush IPIs, flushes,
//! pages flushed and global-lock acquisitions.

use core::sync::atomic::Ordering;

use crate::{mm, tlb};

/// Counts so far, or since a point.
pub struct Counts {
    /// TLB-flush IPIs sent.
    pub ipis: u64,
    /// Range flushes.
    pub flushes: u64,
    /// Pages flushed.
    pub pages: u64,
    /// Global-lock acquisitions: layer locks and block operations (a
    /// block of the nodes' `vm_map_ram` front end takes the nodes' free
    /// tree lock once when reserved and once when freed).
    pub locks: u64,
}

/// The counts so far.
pub fn counts() -> Counts {
    let (ipis, flushes, pages) = tlb::counters();
    let blocks = mm::tree().lock().stats().block_ops;
    let nodes_blocks = crate::nodes::ram_layer().lock().stats().block_ops;
    Counts {
        ipis,
        flushes,
        pages,
        locks: mm::GLOBAL_LOCKS.load(Ordering::Relaxed) + blocks + nodes_blocks,
    }
}

/// The counts since `c`.
pub fn since(c: &Counts) -> Counts {
    let n = counts();
    Counts {
        ipis: n.ipis - c.ipis,
        flushes: n.flushes - c.flushes,
        pages: n.pages - c.pages,
        locks: n.locks - c.locks,
    }
}
