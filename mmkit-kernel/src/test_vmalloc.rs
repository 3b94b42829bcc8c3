//! `test_vmalloc` on real mappings: the seven tests of
//! `mmkit_vmalloc::test_vmalloc` (the same code `mmkit experiments vmalloc`
//! runs on the host) for four designs: the busy list with eager flush
//! (before seed 002), the busy list with lazy flush (seed 000's "before",
//! Linux 4.20), mmkit's tree with lazy flush behind one lock, and the tree
//! behind Linux 6.9's vmap nodes (a layer and a node per CPU). Frames come from the
//! per-CPU lists, PTEs are written, every area has its guard page, and a
//! touch checks that the write reached the area's frame.
//!
//! - Performance mode: CPU 0 runs each test once untimed (under emulation
//!   the first pass through new code translates it, a one-time cost that
//!   the kernel's 10^6 loops amortize and a few hundred would not), then
//!   three times while the others idle (and take the eager design's IPIs).
//! - Stress mode: every CPU runs the seven in its own shuffled order at
//!   once, on one shared layer.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::range::RangeAllocator;
use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::test_vmalloc::{Params, Rng, TestVmalloc, Workload, TESTS};
use mmkit_vmalloc::{Vmalloc, PAGE};

use crate::counters::{counts, since};
use crate::linux_like::LinuxLike;
use crate::mm::{self, Lock};
use crate::scale::Scale;
use crate::{arch, percpu, println, smp, time};

/// A design: a layer of [`mm`].
struct Design<R: 'static>(&'static Lock<Vmalloc<R>>);

impl<R: RangeAllocator> TestVmalloc for Design<R> {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        mm::vmalloc(self.0, pages, align.max(PAGE)).ok()
    }

    fn vfree(&self, va: u64) {
        // Only areas the tests allocated are freed.
        let _ = mm::vfree(self.0, va);
    }

    fn touch(&self, va: u64) -> bool {
        crate::fault::touch(va, 1)
    }
}

/// The nodes design: each CPU's own layer over its vmap node.
struct NodesDesign;

impl TestVmalloc for NodesDesign {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        crate::nodes::vmalloc(pages, align.max(PAGE)).ok()
    }

    fn vfree(&self, va: u64) {
        // Only areas the tests allocated are freed.
        let _ = crate::nodes::vfree(va);
    }

    fn touch(&self, va: u64) -> bool {
        crate::fault::touch(va, 1)
    }
}

/// The designs: four lean ones, and the tree with Linux's per-call work
/// (`new_ll`, the like-for-like comparison).
struct Designs {
    old: Design<LinearVmap>,
    old_lazy: Design<LinearVmap>,
    new: Design<VmapAllocator>,
    nodes: NodesDesign,
    new_ll: LinuxLike<VmapAllocator>,
}

impl Designs {
    fn new() -> Self {
        Designs {
            old: Design(mm::linear()),
            old_lazy: Design(mm::linear_lazy()),
            new: Design(mm::tree()),
            nodes: NodesDesign,
            new_ll: LinuxLike(mm::tree()),
        }
    }

    /// Each with its name in `ROW` lines.
    /// Each with its name in `ROW` lines; without the busy-list ones when
    /// `no_old` (the stock sizes, where they would take hours).
    fn named(&self, no_old: bool) -> Vec<(&'static str, &(dyn TestVmalloc + Sync))> {
        let all: [(&'static str, &(dyn TestVmalloc + Sync)); 5] = [
            ("old", &self.old),
            ("old_lazy", &self.old_lazy),
            ("new", &self.new),
            ("nodes", &self.nodes),
            ("new_ll", &self.new_ll),
        ];
        all.into_iter()
            .filter(|(n, _)| !(no_old && n.starts_with("old")))
            .collect()
    }
}

fn params(s: Scale) -> Params {
    Params {
        loops: s.loops,
        full_fit: s.full_fit as usize,
        busy_list: s.busy as usize,
    }
}

/// Performance mode; one `ROW test_vmalloc mode=performance` line per
/// design and test, and one for each design's total.
pub fn performance(s: Scale) -> Result<(), String> {
    let designs = Designs::new();
    for (name, d) in designs.named(s.no_old) {
        let w = Workload {
            va: d,
            p: params(s),
        };
        let mut rng = Rng::for_worker(0);
        let mut total = 0;
        let mut phases = [0u64; 6];
        for t in TESTS {
            if !w.run(t, &mut rng) {
                return Err(format!("test_vmalloc {name} {} failed (warm-up)", t.name()));
            }
            let c0 = counts();
            let p0 = crate::profile::totals();
            let t0 = arch::rdtsc();
            crate::sample::start(s.sample);
            let ok = (0..3).all(|_| w.run(t, &mut rng));
            crate::sample::stop(s.sample);
            let d = crate::profile::since(&p0);
            phases.iter_mut().zip(d).for_each(|(p, d)| *p += d);
            let ns = time::ns(arch::rdtsc() - t0);
            total += ns;
            let c = since(&c0);
            if !ok {
                return Err(format!("test_vmalloc {name} {} failed", t.name()));
            }
            println!(
                "ROW test_vmalloc mode=performance design={name} test={} ns={ns} ipis={} flushes={} ok=1",
                t.name(),
                c.ipis,
                c.flushes,
            );
            crate::sample::report(&format!("design={name} test={}", t.name()), s.sample);
        }
        println!("ROW test_vmalloc mode=performance design={name} test=total ns={total}");
        crate::profile::report_ticks(&format!("step=performance design={name} cpus=1"), &phases);
    }
    Ok(())
}

/// Stress mode; one `ROW test_vmalloc mode=stress` line per design.
pub fn stress(s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    let s = s.stress(cpus);
    let designs = Designs::new();
    for (name, d) in designs.named(s.no_old) {
        let c0 = counts();
        let p0 = crate::profile::totals();
        let t0 = arch::rdtsc();
        let failed = smp::run_on(cpus, |cpu| {
            let w = Workload {
                va: d,
                p: params(s),
            };
            let mut rng = Rng::for_worker(cpu as u64);
            let order = rng.shuffled();
            order.iter().filter(|&&t| !w.run(t, &mut rng)).count()
        });
        let ns = time::ns(arch::rdtsc() - t0);
        let c = since(&c0);
        crate::profile::report(&format!("step=stress design={name} cpus={cpus}"), &p0);
        let failed: usize = failed.iter().sum();
        println!(
            "ROW test_vmalloc mode=stress design={name} test=total cpus={cpus} loops={} busy={} full_fit={} ns={ns} ipis={} flushes={} failed={failed}",
            s.loops,
            s.busy,
            s.full_fit,
            c.ipis,
            c.flushes,
        );
        if failed != 0 {
            return Err(format!("test_vmalloc stress {name}: {failed} tests failed"));
        }
    }
    Ok(())
}
