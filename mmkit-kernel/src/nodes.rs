//! The fourth design: Linux 6.9's vmap nodes (`mmkit::nodes::VmapNodes`)
//! under the driver, as the kernel runs them. One `Vmalloc` layer per CPU,
//! each behind its own lock, all over one `VmapNodes` whose node `c` is
//! CPU `c`'s (and one more node for the `vm_map_ram` front end's blocks):
//!
//! ```text
//!   CPU c: layer c (lock c): areas, lazy list ──> node c (lock): busy, pools
//!                                                  free tree (global lock):
//!                                                  only on a pool miss,
//!                                                  an overflow or a drain
//! ```
//!
//! A `vmalloc` on CPU `c` takes only lock `c` and node `c`'s lock when its
//! size's pool has an area; a `vfree` of an area of another CPU takes that
//! CPU's layer. Each layer keeps its own lazy list with the kernel's
//! `lazy_max` (the kernel keeps one count over every node; here up to one
//! `lazy_max` per CPU waits, so a purge comes no more often than there),
//! and its purge flushes its own span; the flushed ranges go into their
//! node's pools.

use alloc::vec::Vec;

use mmkit::error::{AllocError, CheckError, FreeError};
use mmkit::nodes::{NodesConfig, VmapNodes};
use mmkit::range::{FlushHook, RangeAllocator, RangeStats};
use mmkit::request::Request;
use mmkit_vmalloc::{Flush, VmError, Vmalloc, Where, PAGE};
use spin::Once;

use crate::mm::{KernelMmu, Lock, PhysFrames};
use crate::percpu::MAX_CPUS;
use crate::profile::{timed, Phase, TimedSpin};
use crate::{arch, tlb};

/// The nodes' lock: a spin lock.
type Nodes = VmapNodes<TimedSpin>;

/// One node of the shared [`VmapNodes`], as a layer's range allocator.
#[derive(Debug)]
pub struct NodeRange {
    nodes: &'static Nodes,
    node: usize,
    space: (u64, u64),
}

impl RangeAllocator for NodeRange {
    fn space(&self) -> (u64, u64) {
        self.space
    }

    fn alloc_in(
        &mut self,
        size: u64,
        align: u64,
        vstart: u64,
        vend: u64,
    ) -> Result<u64, AllocError> {
        if (vstart, vend) == self.space {
            return self.nodes.alloc(self.node, size, align);
        }
        let req = Request::bytes(size)
            .ok_or(AllocError::Invalid)?
            .align(align)
            .within(vstart..vend);
        self.nodes
            .allocate(self.node, &req)
            .map_err(AllocError::from)
    }

    fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.nodes.free(self.node, addr)
    }

    fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
        self.nodes.free_lazy(self.node, addr)
    }

    /// Purges every node through the nodes' own flush hook (the
    /// shootdown, installed at [`init`]); `flush` is not called.
    fn purge(&mut self, _flush: &mut dyn FnMut(u64, u64)) -> bool {
        self.nodes.purge()
    }

    /// The layer keeps the lazy list: the nodes' threshold is set out of
    /// reach once, at [`init`].
    fn set_lazy_max(&mut self, _bytes: u64) {}

    fn set_flush_hook(&mut self, hook: Option<FlushHook>) {
        self.nodes.set_flush_hook(hook);
    }

    /// The free tree's figures, with this node's live areas (what its
    /// layer's books hold) as the live count.
    fn stats(&self) -> RangeStats {
        let mut s = self.nodes.with_allocator(|va| va.stats());
        s.live_areas = self.nodes.node_stats(self.node).live;
        s
    }

    fn check(&self) -> Result<(), CheckError> {
        self.nodes.check()
    }
}

/// A layer over one node.
pub type NodeLayer = Vmalloc<NodeRange>;

static NODES: Once<Nodes> = Once::new();
/// Layer `c` for CPU `c`; the last one is the `vm_map_ram` front end's.
static LAYERS: Once<Vec<Lock<NodeLayer>>> = Once::new();

/// The nodes design's range.
pub const RANGE: (u64, u64) = crate::mm::layer_range(7);

/// Builds the nodes and one layer per CPU, plus the `vm_map_ram` blocks'.
pub fn init(cpus: usize, lazy: Flush) {
    let cpus = cpus.clamp(1, MAX_CPUS);
    let nodes = NODES.call_once(|| {
        let cfg = NodesConfig {
            nodes: cpus + 1,
            granule: PAGE,
            lazy_max: u64::MAX,
            ..NodesConfig::default()
        };
        let n = Nodes::new(RANGE.0, RANGE.1, cfg).expect("nodes range");
        n.set_flush_hook(Some(alloc::boxed::Box::new(tlb::flush_range)));
        n
    });
    LAYERS.call_once(|| {
        (0..=cpus)
            .map(|node| {
                let r = NodeRange {
                    nodes,
                    node,
                    space: RANGE,
                };
                Lock::new(Vmalloc::new(r, lazy))
            })
            .collect()
    });
}

/// Every layer, the `vm_map_ram` blocks' last.
pub fn layers() -> &'static [Lock<NodeLayer>] {
    LAYERS.get().expect("nodes::init ran")
}

/// The layer whose blocks the nodes' `vm_map_ram` front end uses.
pub fn ram_layer() -> &'static Lock<NodeLayer> {
    layers().last().expect("at least one layer")
}

/// CPU `cpu`'s layer.
fn own(cpu: usize) -> &'static Lock<NodeLayer> {
    let l = layers();
    &l[cpu % (l.len() - 1)]
}

/// `vmalloc` on the running CPU's layer.
pub fn vmalloc(pages: u64, align: u64) -> Result<u64, VmError> {
    let size = pages
        .checked_mul(PAGE)
        .ok_or(VmError::TooLarge { bytes: pages })?;
    timed(Phase::Calls, || {
        own(arch::cpu_id())
            .lock()
            .vmalloc_aligned(&mut KernelMmu, &mut PhysFrames, size, align)
    })
}

/// `vfree` on the layer that holds the area at `va`: the running CPU's
/// first, then the others; an address none holds is refused by the
/// running CPU's layer, which says why.
pub fn vfree(va: u64) -> Result<(), VmError> {
    timed(Phase::Calls, || vfree_owned(va))
}

fn vfree_owned(va: u64) -> Result<(), VmError> {
    let l = layers();
    let k = l.len() - 1;
    let me = arch::cpu_id() % k;
    for i in (0..k).map(|j| (me + j) % k) {
        let mut layer = l[i].lock();
        if layer.area(va).is_some() {
            return layer.vfree(&mut KernelMmu, &mut PhysFrames, va);
        }
    }
    l[me].lock().vfree(&mut KernelMmu, &mut PhysFrames, va)
}

/// Purges every layer's lazy list.
pub fn purge_all() {
    for l in layers() {
        l.lock().purge(&mut KernelMmu, &mut PhysFrames);
    }
}

/// What the layers know of `va` without waiting for a lock: the first
/// layer that knows more than `Free`; `None` when a layer is busy.
pub fn whereabouts(va: u64) -> Option<Where> {
    for l in layers() {
        match l.try_lock()?.lookup(va) {
            Where::Free => {}
            w => return Some(w),
        }
    }
    Some(Where::Free)
}

/// The layer each of `ptes` belongs to (the one whose books explain it;
/// an unexplained PTE goes to layer 0, whose walk then refuses it).
pub fn split_ptes(ptes: &[(u64, u64)]) -> Vec<Vec<(u64, u64)>> {
    let l = layers();
    let mut owner = alloc::vec![None; ptes.len()];
    for (i, layer) in l.iter().enumerate() {
        let layer = layer.lock();
        let areas: Vec<_> = layer.areas().collect();
        for (o, &(va, _)) in owner.iter_mut().zip(ptes) {
            let known = matches!(
                layer.lookup_in(&areas, va),
                Where::Mapped { .. } | Where::Block { .. }
            );
            if o.is_none() && known {
                *o = Some(i);
            }
        }
    }
    let mut out = alloc::vec![Vec::new(); l.len()];
    for (&pte, o) in ptes.iter().zip(owner) {
        out[o.unwrap_or(0)].push(pte);
    }
    out
}
