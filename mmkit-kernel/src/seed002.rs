//! Seed 002's loop on every online CPU: map 4 pages, touch them, unmap
//! them. The old design is the busy list under one global lock with an
//! eager flush (an IPI to every other CPU per unmap); the new one is the
//! CPU's own `vm_map_ram` front end with lazy flush, its blocks from the
//! tree; the nodes design is the same front end, its blocks from the vmap
//! nodes. Each touch checks
//! that the write reached the frame the loop asked to map (a stale
//! translation fails the experiment, not just its time), and the loop
//! alternates between two sets of frames so that a stale translation
//! points at the wrong one. The check reads the loop's own frames
//! through the identity map: no page-table walk and no shared lock in the
//! timed loop beyond the calls'.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::counters::{counts, since};
use crate::mm::{self, KernelMmu, PhysFrames};
use crate::phys::DataFrame;
use crate::profile::{self, timed, Phase, TimedSpin};
use crate::scale::{per_cpu_share, Scale};
use crate::{arch, percpu, println, smp, time};
use mmkit_vmalloc::{MapRam, PAGE};

/// Pages per map.
const PAGES: usize = 4;

/// What one CPU's loop did.
#[derive(Clone, Copy, Default)]
struct Loop {
    ticks: u64,
    failed: u64,
}

/// One map+touch+unmap of `frames` (numbers `pfns`, made once before
/// the loop as Linux's module fills its page array once) in `design`, the
/// touch writing the fresh words from `word`; whether it all worked.
fn once(design: Design, cpu: usize, frames: &[DataFrame], pfns: &[u64; PAGES], word: u64) -> bool {
    let mut mmu = KernelMmu;
    match design {
        Design::Old => {
            // The guard drops before the unmap takes the lock again.
            let src = &mut PhysFrames;
            let r = timed(Phase::Calls, || {
                mm::locked(mm::linear()).vmap(&mut mmu, src, pfns, PAGE)
            });
            r.is_ok_and(|va| {
                crate::fault::touch_frames(va, frames, word)
                    && timed(Phase::Calls, || {
                        mm::locked(mm::linear()).vunmap(&mut mmu, src, va)
                    })
                    .is_ok()
            })
        }
        Design::Nodes => through(mm::map_ram_nodes(), cpu, frames, pfns, word),
        Design::New => through(mm::map_ram(), cpu, frames, pfns, word),
    }
}

/// A design of the loop, named once rather than compared per iteration.
#[derive(Clone, Copy)]
enum Design {
    Old,
    New,
    Nodes,
}

impl Design {
    fn of(name: &str) -> Design {
        match name {
            "old" => Design::Old,
            "nodes" => Design::Nodes,
            _ => Design::New,
        }
    }
}

/// One map+touch+unmap of `frames` (numbers `pfns`) through the
/// `vm_map_ram` front end `ram`.
fn through<R: mmkit::range::RangeAllocator>(
    ram: &MapRam<TimedSpin, R>,
    cpu: usize,
    frames: &[DataFrame],
    pfns: &[u64],
    word: u64,
) -> bool {
    let r = timed(Phase::Calls, || {
        ram.map(&mut KernelMmu, &mut PhysFrames, cpu, pfns)
    });
    r.is_ok_and(|va| {
        crate::fault::touch_frames(va, frames, word)
            && timed(Phase::Calls, || {
                ram.unmap(&mut KernelMmu, &mut PhysFrames, cpu, va, PAGES)
            })
            .is_ok()
    })
}

/// `iters` timed iterations on this CPU after a tenth untimed (blocks,
/// page tables and the emulator's translations exist before the clock
/// starts); every iteration is counted in `ops`. The timed iterations are
/// sampled every `sample` ns (0: not).
fn run_loop(design: &str, iters: u64, ops: Option<&crate::pervar::Counter>, sample: u64) -> Loop {
    let cpu = arch::cpu_id();
    let design = Design::of(design);
    let frames: Vec<DataFrame> = (0..2 * PAGES)
        .filter_map(|_| DataFrame::alloc(cpu))
        .collect();
    let mut out = Loop::default();
    if frames.len() != 2 * PAGES {
        frames.into_iter().for_each(|f| f.free(cpu));
        out.failed = 1;
        return out;
    }
    let pfns: [[u64; PAGES]; 2] =
        core::array::from_fn(|s| core::array::from_fn(|i| frames[s * PAGES + i].pfn()));
    let total = iters + iters / 10;
    // Words of this loop alone: a write that missed its frame cannot find
    // its word there by chance.
    let words = crate::fault::fresh_words(total * PAGES as u64);
    let mut t0 = arch::rdtsc();
    for i in 0..total {
        if i == iters / 10 {
            t0 = arch::rdtsc();
            crate::sample::start(sample);
        }
        let s = i as usize % 2;
        let set = &frames[s * PAGES..][..PAGES];
        if !once(design, cpu, set, &pfns[s], words + i * PAGES as u64) {
            out.failed += 1;
        }
        if let Some(c) = ops {
            c.add(1);
        }
    }
    out.ticks = arch::rdtsc() - t0;
    crate::sample::stop(sample);
    frames.into_iter().for_each(|f| f.free(cpu));
    out
}

/// Seed 002's loop on every online CPU, each design; one `ROW seed002`
/// line each.
pub fn run(s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    let designs: &[&str] = if s.no_old {
        &["new", "nodes"]
    } else {
        &["old", "new", "nodes"]
    };
    for &design in designs {
        let iters = if design == "old" {
            per_cpu_share(s.seed_old_iters)
        } else {
            s.seed_iters
        };
        let c0 = counts();
        let p0 = profile::totals();
        let counted = (iters + iters / 10) * cpus as u64;
        // Operations counted in a real per-CPU variable (mmkit::percpu).
        let ops = crate::pervar::Counter::new();
        let loops = smp::run_on(cpus, |_| run_loop(design, iters, ops.as_ref(), s.sample));
        let d = since(&c0);
        profile::report(&format!("step=seed002 design={design} cpus={cpus}"), &p0);
        let mut failed: u64 = loops.iter().map(|l| l.failed).sum();
        if ops.as_ref().map(|c| c.sum()) != Some(counted) {
            failed += 1;
        }
        let ticks: u64 = loops.iter().map(|l| l.ticks).sum();
        let ns = time::ns(ticks) / (iters * cpus as u64);
        // Counts cover the warm-up too: per 10^6 of every unmap made.
        println!(
            "ROW seed002 design={design} cpus={cpus} iters={iters} ns_per_op={ns} ipis={} flushes={} pages_flushed={} ipis_per_1e6_unmaps={} locks_per_op_x1000={} failed={failed}",
            d.ipis,
            d.flushes,
            d.pages,
            d.ipis * 1_000_000 / counted,
            d.locks * 1000 / counted,
        );
        crate::sample::report(&format!("step=seed002 design={design}"), s.sample);
        if failed != 0 {
            return Err(format!(
                "seed002 {design}: {failed} operations failed (a touch that missed its frame, or a wrong per-CPU count)"
            ));
        }
    }
    mm::map_ram().unmap_aliases(&mut KernelMmu, &mut PhysFrames);
    mm::map_ram_nodes().unmap_aliases(&mut KernelMmu, &mut PhysFrames);
    Ok(())
}
