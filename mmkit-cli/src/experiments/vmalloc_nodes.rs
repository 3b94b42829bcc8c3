//! test_vmalloc on the vmap-node allocator (`mmkit::nodes::VmapNodes`),
//! the third column of `vmalloc`'s stress mode: as the kernel since 6.9,
//! one node per thread (each thread's node given round robin, a stand-in
//! for the CPU it runs on), `vfree` lazy into the freeing thread's node
//! first, and the kernel's lazy threshold for `cpus` CPUs split over the
//! nodes. Its locks are the same spinning ticket locks as the one lock of
//! the other two columns, so the columns differ in design, not in lock.

use indicatif::ProgressBar;
use mmkit::nodes::{NodesConfig, VmapNodes};

use mmkit_vmalloc::test_vmalloc::TestVmalloc;

use super::vmalloc::{lazy_max, run_mode, Area, Mode, ModeResult, Params, SpinThenYield, Vmalloc};
use crate::run::{PAGE, VMALLOC_END, VMALLOC_START};

/// Vmap nodes behind the stress mode's ticket locks.
struct Nodes(VmapNodes<spin::mutex::TicketMutex<(), SpinThenYield>>);

impl TestVmalloc for Nodes {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<Area> {
        self.0.alloc_here((pages + 1) * PAGE, align).ok()
    }

    fn vfree(&self, a: Area) {
        let here = mmkit::vblock::current_slot();
        // Only areas this workload allocated are freed: an error is a bug.
        self.0.free_lazy(here, a).expect("vfree of a live area");
    }
}

impl Vmalloc for Nodes {}

/// `mode` on vmap nodes, one per CPU, drained and checked afterwards.
pub fn on_nodes(p: Params, mode: Mode, cpus: usize, pb: &ProgressBar) -> ModeResult {
    let cfg = NodesConfig {
        nodes: cpus.max(1),
        granule: PAGE,
        lazy_max: lazy_max(cpus) / cpus.max(1) as u64,
        ..NodesConfig::default()
    };
    let v = Nodes(VmapNodes::new(VMALLOC_START, VMALLOC_END, cfg).expect("a valid config"));
    let mut r = run_mode(&v, p, mode, pb);
    let v = v.0;
    v.drain();
    let s = v.stats();
    let check = v
        .check()
        .map_or_else(|e| e.to_string(), |()| "check() ok".into());
    r.after = format!(
        "{check}, {} live areas, {} free blocks, {} of {} allocations from a pool",
        s.live,
        s.tree.free_blocks,
        s.hits,
        s.hits + s.misses
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::vmalloc::kernel_params;

    /// Every test runs to the end on the nodes from two threads, and the
    /// drain leaves the space whole (tiny loop count; not a timing).
    #[test]
    fn every_test_passes_on_the_nodes_in_stress_mode() {
        let pb = ProgressBar::hidden();
        let r = on_nodes(kernel_params(20, 2), Mode::Stress(2), 2, &pb);
        assert!(r.failed.iter().all(|&f| f == 0), "{:?}", r.failed);
        assert!(
            r.after
                .starts_with("check() ok, 0 live areas, 1 free blocks"),
            "{}",
            r.after
        );
    }
}
