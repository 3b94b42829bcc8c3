//! The experiments every boot runs after the tests, printing one `ROW`
//! line per measurement for the host (`mmkit experiments kernel`):
//! - seed 002's loop: map, touch and unmap 4 pages on every CPU, the old
//!   design (busy list, global lock, eager flush IPIs) against the new
//!   (per-CPU `vm_map_ram` blocks, lazy flush);
//! - `test_vmalloc`'s seven tests on real mappings, performance mode (CPU 0
//!   alone) and stress mode (every CPU, shuffled order), for three designs:
//!   the busy list with eager flush (before seed 002), the busy list with
//!   lazy flush (seed 000's "before", Linux 4.20), and mmkit's tree with
//!   lazy flush;
//! - buddy order-0 alloc/free through the per-CPU lists on every CPU.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::mm::{self, KernelMmu, PhysFrames};
use crate::{arch, percpu, phys, println, smp, time, tlb};
use mmkit_vmalloc::PAGE;

/// The sizes of a run (set from the kernel command line; printed).
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    /// Seed 002 loop iterations per CPU, new design.
    pub seed_iters: u64,
    /// Seed 002 loop iterations per CPU, old design (each waits for every
    /// other CPU's acknowledgement: far slower under emulation), at 2
    /// CPUs; scaled by 2 / CPUs above.
    pub seed_old_iters: u64,
    /// `test_vmalloc`'s `test_loop_count`.
    pub loops: u64,
    /// Live areas of `long_busy_list_alloc_test` (the kernel: 15000).
    pub busy: u64,
    /// Pairs of `full_fit_alloc_test` (the kernel: lazy_max / PAGE).
    pub full_fit: u64,
    /// Stress mode's `test_loop_count`, busy list and full-fit pairs, per
    /// CPU at 2 CPUs, scaled by (2 / CPUs)^2 above: every eager flush there
    /// waits for every other CPU, so the old design's cost grows with the
    /// square of the CPU count.
    pub stress_loops: u64,
    /// See `stress_loops`.
    pub stress_busy: u64,
    /// See `stress_loops`.
    pub stress_full_fit: u64,
    /// Buddy alloc/free pairs per CPU.
    pub buddy_pairs: u64,
    /// Stale-TLB detector cycles at 2 CPUs; scaled by 2 / CPUs above.
    pub cycles: u64,
    /// Stale-TLB detector cycles at any CPU count (`stale_cycles=`: the
    /// dedicated run); 0 when unset.
    pub stale_cycles: u64,
    /// The word `tests-only`: no experiments.
    pub tests_only: bool,
}

impl Scale {
    /// The CI scale.
    pub const DEFAULT: Scale = Scale {
        seed_iters: 2000,
        seed_old_iters: 100,
        loops: 100,
        busy: 1000,
        full_fit: 256,
        stress_loops: 50,
        stress_busy: 50,
        stress_full_fit: 16,
        buddy_pairs: 20000,
        cycles: 200,
        stale_cycles: 0,
        tests_only: false,
    };

    /// The stress mode's per-CPU sizes at `cpus` CPUs.
    fn stress(self, cpus: usize) -> Scale {
        let c = cpus.max(2) as u64;
        let f = |v: u64| (v * 4 / (c * c)).max(1);
        Scale {
            loops: f(self.stress_loops),
            busy: f(self.stress_busy),
            full_fit: f(self.stress_full_fit),
            ..self
        }
    }

    /// The detector's cycles at the CPUs online: `stale_cycles` when set,
    /// `cycles` scaled otherwise.
    pub fn detector_cycles(self) -> u64 {
        if self.stale_cycles > 0 {
            self.stale_cycles
        } else {
            crate::tests::per_cpu_share(self.cycles)
        }
    }

    /// Reads `key=value` words of the command line over the defaults.
    pub fn parse(cmdline: &str) -> Scale {
        let mut s = Scale::DEFAULT;
        for w in cmdline.split_ascii_whitespace() {
            if w == "tests-only" {
                s.tests_only = true;
            }
            let Some((k, v)) = w.split_once('=') else {
                continue;
            };
            let Ok(v) = v.parse::<u64>() else { continue };
            let v = v.max(1);
            match k {
                "seed_iters" => s.seed_iters = v,
                "seed_old_iters" => s.seed_old_iters = v,
                "stress_loops" => s.stress_loops = v,
                "stress_busy" => s.stress_busy = v,
                "stress_full_fit" => s.stress_full_fit = v,
                "loops" => s.loops = v,
                "busy" => s.busy = v,
                "full_fit" => s.full_fit = v,
                "buddy_pairs" => s.buddy_pairs = v,
                "cycles" => s.cycles = v,
                "stale_cycles" => s.stale_cycles = v,
                _ => {}
            }
        }
        s
    }
}

struct Counts {
    ipis: u64,
    flushes: u64,
    pages: u64,
    locks: u64,
}

fn counts() -> Counts {
    let (ipis, flushes, pages) = tlb::counters();
    let blocks = mm::tree().lock().stats().block_ops;
    Counts {
        ipis,
        flushes,
        pages,
        locks: mm::GLOBAL_LOCKS.load(Ordering::Relaxed) + blocks,
    }
}

fn since(c: &Counts) -> Counts {
    let n = counts();
    Counts {
        ipis: n.ipis - c.ipis,
        flushes: n.flushes - c.flushes,
        pages: n.pages - c.pages,
        locks: n.locks - c.locks,
    }
}

/// Seed 002's loop on every online CPU, both designs.
pub fn seed002(s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    for design in ["old", "new"] {
        static TICKS: AtomicU64 = AtomicU64::new(0);
        static FAILS: AtomicUsize = AtomicUsize::new(0);
        TICKS.store(0, Ordering::SeqCst);
        FAILS.store(0, Ordering::SeqCst);
        let iters = if design == "old" {
            crate::tests::per_cpu_share(s.seed_old_iters)
        } else {
            s.seed_iters
        };
        let c0 = counts();
        let counted = (iters + iters / 10) * cpus as u64;
        // Operations counted in a real per-CPU variable (mmkit::percpu).
        let per_cpu_ops = alloc::sync::Arc::new(crate::pervar::Counter::new());
        let ops_counter = alloc::sync::Arc::clone(&per_cpu_ops);
        smp::run_on(cpus, move |_| {
            let cpu = arch::cpu_id();
            let frames: Vec<u64> = (0..4).filter_map(|_| phys::alloc(cpu, 0, false)).collect();
            let mut mmu = KernelMmu;
            // A tenth of the loop untimed first: blocks, page tables and
            // the emulator's translations exist before the clock starts.
            let mut t0 = arch::rdtsc();
            for i in 0..iters + iters / 10 {
                if i == iters / 10 {
                    t0 = arch::rdtsc();
                }
                let ok = if design == "old" {
                    // The guard must drop before the unmap takes the lock again.
                    let src = &mut PhysFrames;
                    let r = mm::locked(mm::linear()).vmap(&mut mmu, src, &frames, PAGE);
                    match r {
                        Ok(va) => {
                            let t = mm::touch(va, 4, i as u8);
                            t && mm::locked(mm::linear()).vunmap(&mut mmu, src, va).is_ok()
                        }
                        Err(_) => false,
                    }
                } else {
                    let ram = mm::map_ram();
                    let r = ram.map(&mut mmu, &mut PhysFrames, cpu, &frames);
                    match r {
                        Ok(va) => {
                            let t = mm::touch(va, 4, i as u8);
                            t && ram.unmap(&mut mmu, &mut PhysFrames, cpu, va, 4).is_ok()
                        }
                        Err(_) => false,
                    }
                };
                if !ok {
                    FAILS.fetch_add(1, Ordering::SeqCst);
                }
                if let Some(c) = ops_counter.as_ref() {
                    c.add(1);
                }
            }
            TICKS.fetch_add(arch::rdtsc() - t0, Ordering::SeqCst);
            for f in frames {
                phys::free(cpu, f, 0);
            }
        });
        let d = since(&c0);
        if per_cpu_ops.as_ref().as_ref().map(|c| c.sum()) != Some(counted) {
            FAILS.fetch_add(1, Ordering::SeqCst);
        }
        let ops = iters * cpus as u64;
        let ns = time::ns(TICKS.load(Ordering::SeqCst)) / ops;
        // Counts cover the warm-up too: per 10^6 of every unmap made.
        println!(
            "ROW seed002 design={design} cpus={cpus} iters={iters} ns_per_op={ns} ipis={} flushes={} pages_flushed={} ipis_per_1e6_unmaps={} locks_per_op_x1000={} failed={}",
            d.ipis,
            d.flushes,
            d.pages,
            d.ipis * 1_000_000 / counted,
            d.locks * 1000 / counted,
            FAILS.load(Ordering::SeqCst)
        );
        let failed = FAILS.load(Ordering::SeqCst);
        if failed != 0 {
            return Err(alloc::format!(
                "seed002 {design}: {failed} failed operations or a wrong per-CPU count"
            ));
        }
    }
    mm::map_ram().unmap_aliases(&mut KernelMmu, &mut PhysFrames);
    Ok(())
}

/// A small xorshift generator (the tests' `get_random_bytes`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The seven tests in `test_vmalloc`'s order.
pub const TESTS: [&str; 7] = [
    "fix_size_alloc_test",
    "full_fit_alloc_test",
    "long_busy_list_alloc_test",
    "random_size_alloc_test",
    "fix_align_alloc_test",
    "random_size_align_alloc_test",
    "align_shift_alloc_test",
];

/// One design's vmalloc for the tests.
trait Design: Sync {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64>;
    fn vfree(&self, va: u64);
}

/// The busy list, eager flush on every vfree (the kernel before seed 002).
struct Old;
/// The busy list, lazy flush: the kernel seed 000 measured as "before"
/// (Linux 4.20; lazy flushing came with seed 002).
struct OldLazy;
/// mmkit: the vmap tree, lazy flush.
struct New;

impl Design for Old {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        mm::vmalloc(mm::linear(), pages, align.max(PAGE)).ok()
    }
    fn vfree(&self, va: u64) {
        // Only areas the test allocated are freed.
        let _ = mm::vfree(mm::linear(), va);
    }
}

impl Design for OldLazy {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        mm::vmalloc(mm::linear_lazy(), pages, align.max(PAGE)).ok()
    }
    fn vfree(&self, va: u64) {
        let _ = mm::vfree(mm::linear_lazy(), va);
    }
}

impl Design for New {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        mm::vmalloc(mm::tree(), pages, align.max(PAGE)).ok()
    }
    fn vfree(&self, va: u64) {
        let _ = mm::vfree(mm::tree(), va);
    }
}

/// The designs `test_vmalloc` compares, by their names in `ROW` lines.
pub const DESIGNS: [&str; 3] = ["old", "old_lazy", "new"];

fn design(name: &str) -> &'static dyn Design {
    match name {
        "old" => &Old,
        "old_lazy" => &OldLazy,
        _ => &New,
    }
}

/// `loops` vmalloc + vfree pairs of `next()`'s (pages, align); with
/// `touch`, a byte is written in between (as the kernel's test does).
fn repeat(d: &dyn Design, loops: u64, touch: bool, mut next: impl FnMut() -> (u64, u64)) -> bool {
    for _ in 0..loops {
        let (pages, align) = next();
        match d.vmalloc(pages, align) {
            Some(a) => {
                let ok = !touch || mm::touch(a, 1, 1);
                d.vfree(a);
                if !ok {
                    return false;
                }
            }
            None => return false,
        }
    }
    true
}

fn run_test(d: &dyn Design, t: usize, s: Scale, rng: &mut Rng) -> bool {
    match t {
        0 => repeat(d, s.loops, true, || (1, PAGE)),
        1 => {
            let j = s.full_fit;
            let arr = d.vmalloc((j * 8).div_ceil(PAGE), PAGE);
            let mut kept = Vec::new();
            let mut junk = Vec::new();
            for _ in 0..j {
                kept.extend(d.vmalloc(1, PAGE));
                junk.extend(d.vmalloc(1, PAGE));
            }
            let mut ok = arr.is_some() && kept.len() as u64 == j && junk.len() as u64 == j;
            junk.into_iter().for_each(|a| d.vfree(a));
            ok = ok && repeat(d, s.loops, true, || (1, PAGE));
            kept.into_iter().for_each(|a| d.vfree(a));
            arr.into_iter().for_each(|a| d.vfree(a));
            ok
        }
        2 => {
            let arr = d.vmalloc((s.busy * 8).div_ceil(PAGE), PAGE);
            let held: Vec<u64> = (0..s.busy).filter_map(|_| d.vmalloc(1, PAGE)).collect();
            let mut ok = arr.is_some() && held.len() as u64 == s.busy;
            for _ in 0..s.loops {
                let (Some(a), Some(b)) = (d.vmalloc(100, PAGE), d.vmalloc(1, PAGE)) else {
                    ok = false;
                    break;
                };
                ok &= mm::touch(a, 1, 0) && mm::touch(b, 1, 1);
                d.vfree(a);
                d.vfree(b);
            }
            held.into_iter().for_each(|a| d.vfree(a));
            arr.into_iter().for_each(|a| d.vfree(a));
            ok
        }
        3 => repeat(d, s.loops, true, || (rng.next() % 100 + 1, PAGE)),
        4 => repeat(d, s.loops, false, || (5, 32 << 10)),
        5 => repeat(d, s.loops, false, || {
            let r = rng.next() as u8;
            (u64::from(r % 10) + 1, 1 << (r % 23))
        }),
        _ => {
            for i in 12..64 {
                match d.vmalloc(1, 1 << i) {
                    Some(a) => d.vfree(a),
                    None => break,
                }
            }
            true
        }
    }
}

/// `test_vmalloc`, performance mode: CPU 0 runs each test three times in
/// order (the other CPUs idle, and take the eager design's IPIs), after
/// one untimed run: under emulation the first pass through new code
/// translates it, a one-time cost that the kernel's 10^6 loops amortize
/// and a few hundred would not.
pub fn test_vmalloc_perf(s: Scale) -> Result<(), String> {
    for name in DESIGNS {
        let d = design(name);
        let mut rng = Rng(0x5eed_0000);
        let mut total = 0;
        for (t, test) in TESTS.iter().enumerate() {
            if !run_test(d, t, s, &mut rng) {
                return Err(alloc::format!(
                    "test_vmalloc {name} {test} failed (warm-up)"
                ));
            }
            let c0 = counts();
            let t0 = arch::rdtsc();
            let mut ok = true;
            for _ in 0..3 {
                ok &= run_test(d, t, s, &mut rng);
            }
            let ns = time::ns(arch::rdtsc() - t0);
            total += ns;
            let c = since(&c0);
            if !ok {
                return Err(alloc::format!("test_vmalloc {name} {test} failed"));
            }
            println!(
                "ROW test_vmalloc mode=performance design={name} test={test} ns={ns} ipis={} flushes={} ok={}",
                c.ipis,
                c.flushes,
                u8::from(ok)
            );
        }
        println!("ROW test_vmalloc mode=performance design={name} test=total ns={total}");
    }
    Ok(())
}

/// `test_vmalloc`, stress mode: every CPU runs the seven tests in its own
/// shuffled order at once, on one shared layer.
pub fn test_vmalloc_stress(s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    let s = s.stress(cpus);
    for name in DESIGNS {
        static FAILED: AtomicUsize = AtomicUsize::new(0);
        FAILED.store(0, Ordering::SeqCst);
        let c0 = counts();
        let t0 = arch::rdtsc();
        smp::run_on(cpus, move |cpu| {
            let d = design(name);
            let mut rng = Rng(0x5eed_0000 + cpu as u64 * 7919);
            let mut order: Vec<usize> = (0..TESTS.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
            for t in order {
                if !run_test(d, t, s, &mut rng) {
                    FAILED.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let ns = time::ns(arch::rdtsc() - t0);
        let c = since(&c0);
        println!(
            "ROW test_vmalloc mode=stress design={name} test=total cpus={cpus} loops={} busy={} full_fit={} ns={ns} ipis={} flushes={} failed={}",
            s.loops,
            s.busy,
            s.full_fit,
            c.ipis,
            c.flushes,
            FAILED.load(Ordering::SeqCst)
        );
        let failed = FAILED.load(Ordering::SeqCst);
        if failed != 0 {
            return Err(alloc::format!(
                "test_vmalloc stress {name}: {failed} tests failed"
            ));
        }
    }
    Ok(())
}

/// Buddy order-0 pages through the per-CPU lists, every CPU at once:
/// batches of 64 allocations then 64 frees.
pub fn buddy_pcp(s: Scale) -> Result<(), String> {
    let cpus = percpu::online();
    static TICKS: AtomicU64 = AtomicU64::new(0);
    static FAILED: AtomicU64 = AtomicU64::new(0);
    TICKS.store(0, Ordering::SeqCst);
    FAILED.store(0, Ordering::SeqCst);
    let pairs = s.buddy_pairs;
    let before: u64 = (0..cpus).map(|c| phys::stats(c).refills).sum();
    smp::run_on(cpus, move |_| {
        let cpu = arch::cpu_id();
        let mut held = [0u64; 64];
        let t0 = arch::rdtsc();
        for _ in 0..pairs / 64 {
            for h in held.iter_mut() {
                match phys::alloc(cpu, 0, false) {
                    Some(p) => *h = p,
                    None => {
                        FAILED.fetch_add(1, Ordering::SeqCst);
                        *h = u64::MAX;
                    }
                }
            }
            for &h in held.iter().filter(|&&h| h != u64::MAX) {
                phys::free(cpu, h, 0);
            }
        }
        TICKS.fetch_add(arch::rdtsc() - t0, Ordering::SeqCst);
    });
    let refills: u64 = (0..cpus).map(|c| phys::stats(c).refills).sum::<u64>() - before;
    let done = pairs / 64 * 64 * cpus as u64;
    println!(
        "ROW buddy_pcp cpus={cpus} pairs={done} ns_per_pair={} refills={refills} failed={}",
        time::ns(TICKS.load(Ordering::SeqCst)) / done.max(1),
        FAILED.load(Ordering::SeqCst)
    );
    phys::drain_all();
    match FAILED.load(Ordering::SeqCst) {
        0 => Ok(()),
        n => Err(alloc::format!("buddy_pcp: {n} allocations failed")),
    }
}
