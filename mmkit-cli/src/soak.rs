//! `mmkit soak`: a long run of mixed operations over every allocator, each
//! result checked against an ownership record, `check()` every few thousand
//! operations, and the high-water marks of live objects and metadata
//! reported (a steady workload must not grow without bound).
//!
//! Each thread drives its own set of allocators (vmap, linear_vmap, vblock,
//! percpu, area_map, buddy) from its own seed. Live objects per allocator are
//! capped, so the workload is steady: a cap reached means a free. Exit 1 on
//! the first disagreement, naming the allocator, operation and seed.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mmkit::baseline::area_map::AreaMapAllocator;
use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator};
use mmkit::range::RangeAllocator;
use mmkit::vblock::{Config, Policy, VblockAllocator};
use mmkit::vmap::VmapAllocator;
use rand::rngs::StdRng as SmallRng;
use rand::{Rng, SeedableRng};

/// Options of `mmkit soak`.
#[derive(Args, Debug)]
pub struct SoakOptions {
    /// Operations in all, over all threads.
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// Threads, each with its own allocators.
    #[arg(long, default_value_t = 1)]
    pub threads: u64,
    /// Seed of the first thread (thread i uses seed + i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run every allocator's check() every this many operations.
    #[arg(long, default_value_t = 10_000)]
    pub check_every: u64,
}

/// Live objects per allocator at most: the steady state.
const CAP: usize = 2048;

/// High-water marks of one thread.
#[derive(Default, Debug, Clone, Copy)]
struct Marks {
    live: usize,
    vmap_meta: u64,
    linear_meta: u64,
    percpu_chunks: u64,
    area_chunks: u64,
    vblock_blocks: u64,
}

impl Marks {
    fn max(self, o: Marks) -> Marks {
        Marks {
            live: self.live.max(o.live),
            vmap_meta: self.vmap_meta.max(o.vmap_meta),
            linear_meta: self.linear_meta.max(o.linear_meta),
            percpu_chunks: self.percpu_chunks.max(o.percpu_chunks),
            area_chunks: self.area_chunks.max(o.area_chunks),
            vblock_blocks: self.vblock_blocks.max(o.vblock_blocks),
        }
    }
}

/// Live ranges `start -> end` that must never overlap.
#[derive(Default)]
struct Owned(BTreeMap<u64, u64>);

impl Owned {
    fn take(&mut self, s: u64, e: u64) -> Result<(), String> {
        let before = self.0.range(..e).next_back();
        if let Some((&ps, &pe)) = before {
            if pe > s {
                return Err(format!("[{s:#x}, {e:#x}) overlaps live [{ps:#x}, {pe:#x})"));
            }
        }
        self.0.insert(s, e);
        Ok(())
    }

    fn pick(&self, r: &mut SmallRng) -> Option<(u64, u64)> {
        let n = self.0.len();
        (n > 0).then(|| {
            let (&s, &e) = self.0.iter().nth(r.gen_range(0..n.min(64))).expect("n > 0");
            (s, e)
        })
    }
}

struct World {
    vmap: VmapAllocator,
    vmap_live: Owned,
    linear: LinearVmap,
    linear_live: Owned,
    vblock: VblockAllocator<VmapAllocator>,
    vblock_live: Owned,
    percpu: PercpuAllocator,
    percpu_live: BTreeMap<PcpuPtr, u64>,
    area: AreaMapAllocator,
    area_live: BTreeMap<PcpuPtr, u64>,
    buddy: BuddyAllocator,
    buddy_live: BTreeMap<u64, u8>,
    marks: Marks,
}

const PAGE: u64 = 4096;

impl World {
    fn new() -> Result<World, String> {
        let e = |e: mmkit::AllocError| e.to_string();
        let mut vmap = VmapAllocator::new(1 << 30, 1 << 46).map_err(e)?;
        vmap.set_lazy_max(64 << 20);
        let cfg = Config {
            page_size: PAGE,
            max_alloc: 64,
            bits: 1024,
        };
        let range = VmapAllocator::new(1 << 30, 1 << 44).map_err(e)?;
        let mut buddy = BuddyAllocator::new(0, 1 << 16, BuddyConfig::default()).map_err(e)?;
        buddy
            .add_free_range(0, 1 << 16)
            .map_err(|x| x.to_string())?;
        Ok(World {
            vmap,
            vmap_live: Owned::default(),
            linear: LinearVmap::new(0, 1 << 32).map_err(e)?,
            linear_live: Owned::default(),
            vblock: VblockAllocator::new(range, cfg, Policy::Current, 4).map_err(e)?,
            vblock_live: Owned::default(),
            percpu: PercpuAllocator::new(32 << 10).map_err(e)?,
            percpu_live: BTreeMap::new(),
            area: AreaMapAllocator::new(32 << 10).map_err(e)?,
            area_live: BTreeMap::new(),
            buddy,
            buddy_live: BTreeMap::new(),
            marks: Marks::default(),
        })
    }

    /// One operation on one allocator, chosen by `r`.
    fn step(&mut self, r: &mut SmallRng) -> Result<(), String> {
        match r.gen_range(0..6) {
            0 => range_step(&mut self.vmap, &mut self.vmap_live, r, 1 << 24),
            1 => range_step(&mut self.linear, &mut self.linear_live, r, 1 << 16),
            2 => self.vblock_step(r),
            3 => percpu_step(&mut self.percpu, &mut self.percpu_live, r),
            4 => percpu_step(&mut self.area, &mut self.area_live, r),
            _ => self.buddy_step(r),
        }
    }

    fn vblock_step(&mut self, r: &mut SmallRng) -> Result<(), String> {
        let live = &mut self.vblock_live;
        if live.0.len() >= CAP || (!live.0.is_empty() && r.gen_bool(0.5)) {
            let (s, e) = live.pick(r).expect("nonempty");
            live.0.remove(&s);
            return self
                .vblock
                .unmap(s, (e - s) / PAGE)
                .map_err(|x| format!("vblock unmap({s:#x}): {x}"));
        }
        let pages = if r.gen_bool(0.9) {
            r.gen_range(1..=64)
        } else {
            r.gen_range(65..=256)
        };
        let cpu = r.gen_range(0..4);
        let a = self
            .vblock
            .map(cpu, pages)
            .map_err(|x| format!("vblock map({cpu}, {pages}): {x}"))?;
        live.take(a, a + pages * PAGE)
            .map_err(|x| format!("vblock: {x}"))
    }

    fn buddy_step(&mut self, r: &mut SmallRng) -> Result<(), String> {
        let live = &mut self.buddy_live;
        if live.len() >= CAP || (!live.is_empty() && r.gen_bool(0.5)) {
            let n = r.gen_range(0..live.len().min(64));
            let (&pfn, &order) = live.iter().nth(n).expect("nonempty");
            live.remove(&pfn);
            return self
                .buddy
                .free(pfn, order)
                .map_err(|x| format!("buddy free({pfn}, {order}): {x}"));
        }
        let order = r.gen_range(0..=4);
        let mt = MigrateType::from_index(r.gen_range(0..3)).expect("valid index");
        match self.buddy.alloc(order, mt) {
            Ok(pfn) => {
                let end = pfn + (1 << order);
                let clash = live
                    .range(..end)
                    .next_back()
                    .is_some_and(|(&p, &o)| p + (1 << o) > pfn);
                if clash || pfn % (1 << order) != 0 {
                    return Err(format!(
                        "buddy alloc({order}) = {pfn}: overlaps or misaligned"
                    ));
                }
                live.insert(pfn, order);
                Ok(())
            }
            Err(mmkit::AllocError::NoSpace) => Ok(()),
            Err(x) => Err(format!("buddy alloc({order}): {x}")),
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let c = |n: &str, r: Result<(), mmkit::CheckError>| r.map_err(|e| format!("{n}: {e}"));
        c("vmap", self.vmap.check())?;
        c("linear_vmap", self.linear.check())?;
        c("vblock", self.vblock.check())?;
        c("percpu", self.percpu.check())?;
        c("area_map", self.area.check())?;
        c("buddy", self.buddy.check())?;
        let (vs, ls) = (self.vmap.stats(), self.linear.stats());
        let owned = |o: &Owned| {
            o.0.values()
                .zip(o.0.keys())
                .map(|(e, s)| e - s)
                .sum::<u64>()
        };
        if vs.live_bytes != owned(&self.vmap_live) || ls.live_bytes != owned(&self.linear_live) {
            return Err("live bytes differ from the ownership record".into());
        }
        if self.percpu.stats().live != self.percpu_live.len() as u64
            || self.area.stats().live != self.area_live.len() as u64
        {
            return Err("percpu live count differs from the ownership record".into());
        }
        let live = [
            self.vmap_live.0.len(),
            self.linear_live.0.len(),
            self.vblock_live.0.len(),
            self.percpu_live.len(),
            self.area_live.len(),
            self.buddy_live.len(),
        ];
        let v = self.vblock.counters();
        self.marks = self.marks.max(Marks {
            live: live.into_iter().sum(),
            vmap_meta: vs.metadata_bytes,
            linear_meta: ls.metadata_bytes,
            percpu_chunks: self.percpu.stats().chunks,
            area_chunks: self.area.stats().chunks,
            vblock_blocks: v.blocks_created - v.blocks_released,
        });
        Ok(())
    }
}

fn range_step<R: RangeAllocator>(
    a: &mut R,
    live: &mut Owned,
    r: &mut SmallRng,
    max: u64,
) -> Result<(), String> {
    if live.0.len() >= CAP || (!live.0.is_empty() && r.gen_bool(0.5)) {
        let (s, e) = live.pick(r).expect("nonempty");
        live.0.remove(&s);
        let got = if r.gen_bool(0.5) {
            a.free(s)
        } else {
            a.free_lazy(s)
        };
        return match got {
            Ok(n) if n == e - s => Ok(()),
            other => Err(format!("free({s:#x}) = {other:?}, want Ok({})", e - s)),
        };
    }
    if r.gen_ratio(1, 64) {
        // A bad free must be refused.
        let x = r.gen::<u64>() | 1;
        if !live.0.contains_key(&x) && a.free(x).is_ok() {
            return Err(format!("free({x:#x}) of nothing succeeded"));
        }
    }
    let size = r.gen_range(1..=max);
    let align = 1 << r.gen_range(0..16);
    match a.alloc(size, align) {
        Ok(x) if x % align == 0 => live.take(x, x + size),
        Ok(x) => Err(format!("alloc({size}, {align}) = {x:#x}: misaligned")),
        Err(mmkit::AllocError::NoSpace) => Ok(()),
        Err(e) => Err(format!("alloc({size}, {align}): {e}")),
    }
}

fn percpu_step<A: PercpuAlloc>(
    a: &mut A,
    live: &mut BTreeMap<PcpuPtr, u64>,
    r: &mut SmallRng,
) -> Result<(), String> {
    if live.len() >= CAP || (!live.is_empty() && r.gen_bool(0.5)) {
        let n = r.gen_range(0..live.len().min(64));
        let (&p, &size) = live.iter().nth(n).expect("nonempty");
        live.remove(&p);
        return match a.free(p) {
            Ok(got) if got >= size => Ok(()),
            other => Err(format!("percpu free({p:?}) = {other:?}, want {size}")),
        };
    }
    let size = if r.gen_bool(0.9) {
        r.gen_range(1..=64)
    } else {
        r.gen_range(65..=4096)
    };
    let align = 1 << r.gen_range(0..6);
    let p = a
        .alloc(size, align)
        .map_err(|e| format!("percpu alloc({size}, {align}): {e}"))?;
    if live.insert(p, size).is_some() {
        return Err(format!("percpu alloc returned live {p:?}"));
    }
    Ok(())
}

/// Runs `ops` operations from `seed`; returns the marks or the first
/// disagreement.
fn thread(seed: u64, ops: u64, every: u64, done: &AtomicU64) -> Result<Marks, String> {
    let mut r = SmallRng::seed_from_u64(seed);
    let mut w = World::new()?;
    for i in 0..ops {
        w.step(&mut r)
            .map_err(|e| format!("seed {seed}, op {i}: {e}"))?;
        if (i + 1) % every == 0 {
            w.check().map_err(|e| format!("seed {seed}, op {i}: {e}"))?;
        }
        if i % 4096 == 4095 {
            done.fetch_add(4096, Ordering::Relaxed);
        }
    }
    w.check().map_err(|e| format!("seed {seed}, end: {e}"))?;
    Ok(w.marks)
}

/// Runs every thread, showing progress on `pb`; each thread's marks or its
/// first disagreement.
fn run_threads(o: &SoakOptions, pb: &ProgressBar) -> Vec<Result<Marks, String>> {
    let done = Arc::new(AtomicU64::new(0));
    let per = o.ops / o.threads;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..o.threads)
            .map(|t| {
                let done = Arc::clone(&done);
                let n = per + u64::from(t < o.ops % o.threads);
                s.spawn(move || thread(o.seed.wrapping_add(t), n, o.check_every, &done))
            })
            .collect();
        while hs.iter().any(|h| !h.is_finished()) {
            pb.set_position(done.load(Ordering::Relaxed));
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a soak thread panicked".into()))
            })
            .collect()
    })
}

/// `mmkit soak`: the summary goes to `out`.
pub fn main(o: &SoakOptions, out: &mut dyn std::io::Write) -> std::io::Result<ExitCode> {
    if o.threads == 0 || o.check_every == 0 {
        eprintln!("mmkit soak: --threads and --check-every must be at least 1");
        return Ok(ExitCode::from(2));
    }
    mmkit::debug::set_debug_check_period(o.check_every);
    let pb = ProgressBar::new(o.ops);
    pb.set_style(
        ProgressStyle::with_template("soak [{bar:40}] {pos}/{len} ops {elapsed} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let start = std::time::Instant::now();
    let results = run_threads(o, &pb);
    pb.finish_and_clear();
    let mut marks = Marks::default();
    for r in results {
        match r {
            Ok(m) => marks = marks.max(m),
            Err(e) => {
                eprintln!("mmkit soak: DISAGREEMENT: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    summary(o, &marks, start.elapsed().as_secs_f64(), out)?;
    Ok(ExitCode::SUCCESS)
}

fn summary(
    o: &SoakOptions,
    marks: &Marks,
    secs: f64,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "soak: {} ops, {} threads, seed {}: no disagreement in {secs:.1} s ({:.2} Mops/s)",
        o.ops,
        o.threads,
        o.seed,
        o.ops as f64 / secs / 1e6
    )?;
    writeln!(
        out,
        "high-water marks (per thread): live objects {} (cap {}), vmap metadata {} B, \
         linear_vmap metadata {} B, percpu chunks {}, area_map chunks {}, vblock blocks {}",
        marks.live,
        6 * CAP,
        marks.vmap_meta,
        marks.linear_meta,
        marks.percpu_chunks,
        marks.area_chunks,
        marks.vblock_blocks
    )
}
