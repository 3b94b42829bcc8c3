//! `mmkit experiments vm_buffers`: large buffers on real memory.
//!
//! Churn: threads loop {allocate a buffer, write one byte into each page,
//! free it} with `Vm::vmalloc`/`vfree` (lazy, batched unmapping), with
//! std's `System` allocator, and with a direct `mmap`/`munmap` per buffer.
//! Growth: one buffer doubled from 4 KiB with `Vm::vrealloc` (no byte
//! copied: the frames stay, only new ones are mapped) against `Vec<u8>`
//! doubling (`reserve_exact`, then touch the new part).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mmkit_vm::Vm;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use serde::Serialize;

use super::real::{reset_peak, rss_mib, touch, unmap_calls, vm};
use super::{Experiment, Options};
use crate::plot::{self, Axis, Chart, Series};
use crate::render::{col, Col, Fmt, Report, Table, Target};
use crate::run::{ms, progress, ratio, MIB, PAGE};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vm_buffers",
    about: "large buffers on real memory: vmalloc/vfree churn vs System vs mmap/munmap; vrealloc growth vs Vec",
    run,
};

/// Buffer sizes of the churn; `None` is the mix (log-uniform 64 KiB..16 MiB).
const SIZES: [Option<u64>; 4] = [Some(64 << 10), Some(MIB), Some(16 * MIB), None];
/// What allocates the buffers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Vm,
    System,
    Mmap,
}
const BACKENDS: [(Backend, &str); 3] = [
    (Backend::Vm, "vmalloc"),
    (Backend::System, "System"),
    (Backend::Mmap, "mmap"),
];

/// One allocate + touch + free of `len` bytes; `unmaps` counts the
/// `munmap` calls of the mmap backend.
fn once(b: Backend, vm: &Vm, len: u64, unmaps: &AtomicU64) {
    match b {
        Backend::Vm => {
            let a = vm.vmalloc(len).expect("vmalloc");
            // SAFETY: `a` is a live area of `len` bytes just mapped for us.
            unsafe { touch(a, len, PAGE) };
            vm.vfree(a).expect("a live area");
        }
        Backend::System => {
            let mut v: Vec<u8> = Vec::with_capacity(len as usize);
            // SAFETY: `v` owns `len` bytes of capacity that nothing borrows.
            unsafe { touch(v.as_mut_ptr() as u64, len, PAGE) };
            std::hint::black_box(&v);
        }
        Backend::Mmap => {
            let (rw, private) = (ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE);
            // SAFETY: a null hint lets the kernel pick an unused range.
            let p = unsafe { mmap_anonymous(std::ptr::null_mut(), len as usize, rw, private) }
                .expect("mmap");
            // SAFETY: `p` is a fresh private mapping of `len` bytes, ours alone.
            unsafe { touch(p as u64, len, PAGE) };
            // SAFETY: the mapping is ours and nothing refers to it any more.
            unsafe { munmap(p, len as usize) }.expect("munmap");
            unmaps.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A buffer size: `size`, or log-uniform between 64 KiB and 16 MiB.
fn size_of(size: Option<u64>, rng: &mut StdRng) -> u64 {
    size.unwrap_or_else(|| {
        let pages = 2f64.powf(rng.gen_range(4.0..=12.0)) as u64;
        pages * PAGE
    })
}

/// One churn case: wall time, unmapping calls (None: not counted), RSS
/// at the end and peak RSS, in MiB.
struct Churn {
    ns: f64,
    calls: Option<u64>,
    rss: (f64, f64),
}

fn churn(b: Backend, size: Option<u64>, threads: usize, iters: u64) -> Churn {
    let vm = vm(true, 2 << 30, mmkit::range::DEFAULT_LAZY_MAX);
    reset_peak();
    let unmaps = AtomicU64::new(0);
    let go = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|id| {
                let (vm, go, unmaps) = (&vm, &go, &unmaps);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(0xb0f + id as u64);
                    go.wait();
                    let t0 = Instant::now();
                    (0..iters).for_each(|_| once(b, vm, size_of(size, &mut rng), unmaps));
                    (t0, Instant::now())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    let rss = rss_mib();
    vm.purge();
    let wall = spans.iter().map(|s| s.1).max().expect("a thread") - spans.iter().map(|s| s.0).min().expect("a thread");
    let calls = match b {
        Backend::Vm => Some(unmap_calls(&vm)),
        Backend::System => None,
        Backend::Mmap => Some(unmaps.load(Ordering::Relaxed)),
    };
    Churn { ns: wall.as_nanos() as f64 / (threads as u64 * iters) as f64, calls, rss }
}

fn size_name(size: Option<u64>) -> String {
    match size {
        Some(s) if s >= MIB => format!("{} MiB", s / MIB),
        Some(s) => format!("{} KiB", s >> 10),
        None => "mix 64K..16M".into(),
    }
}

/// One churn case, one backend.
#[derive(Serialize)]
struct ChurnRow {
    buffer: String,
    threads: usize,
    backend: &'static str,
    ns_per_op: f64,
    ops: u64,
    unmap_calls: Option<u64>,
    rss_mib: f64,
    peak_rss_mib: f64,
}

/// One churn case, the three backends side by side.
#[derive(Serialize)]
struct SpeedRow {
    buffer: String,
    threads: usize,
    vmalloc_ns: f64,
    system_ns: f64,
    mmap_ns: f64,
    mmap_ratio: Option<f64>,
    system_ratio: Option<f64>,
}

const SPEED_COLS: [Col; 7] = [
    col("buffer", "buffer", Fmt::Text),
    col("threads", "threads", Fmt::Text),
    col("vmalloc_ns", "vmalloc ns", Fmt::Dec(0)),
    col("system_ns", "System ns", Fmt::Dec(0)),
    col("mmap_ns", "mmap ns", Fmt::Dec(0)),
    col("mmap_ratio", "mmap/vmalloc", Fmt::Ratio),
    col("system_ratio", "System/vmalloc", Fmt::Ratio),
];

const MEM_COLS: [Col; 7] = [
    col("buffer", "buffer", Fmt::Text),
    col("threads", "threads", Fmt::Text),
    col("backend", "backend", Fmt::Text),
    col("ops", "ops", Fmt::Text),
    col("unmap_calls", "unmap calls", Fmt::Text),
    col("rss_mib", "RSS MiB", Fmt::Dec(0)),
    col("peak_rss_mib", "peak RSS MiB", Fmt::Dec(0)),
];

/// Runs every churn case: (speed rows, per-backend rows).
fn churn_rows(budget: u64) -> (Vec<SpeedRow>, Vec<ChurnRow>) {
    let pb = progress((SIZES.len() * 2 * BACKENDS.len()) as u64, "vm_buffers churn");
    let (mut speed, mut mem) = (Vec::new(), Vec::new());
    for size in SIZES {
        let iters = (budget / size.unwrap_or(3 * MIB)).max(4);
        for threads in [1, 2] {
            let r: Vec<ChurnRow> = BACKENDS
                .iter()
                .map(|&(b, backend)| {
                    let c = churn(b, size, threads, iters);
                    pb.inc(1);
                    let ops = threads as u64 * iters;
                    let (buffer, unmap_calls) = (size_name(size), c.calls);
                    let (rss_mib, peak_rss_mib) = c.rss;
                    ChurnRow { buffer, threads, backend, ns_per_op: c.ns, ops, unmap_calls, rss_mib, peak_rss_mib }
                })
                .collect();
            let (vm, sys, mm) = (r[0].ns_per_op, r[1].ns_per_op, r[2].ns_per_op);
            speed.push(SpeedRow {
                buffer: size_name(size),
                threads,
                vmalloc_ns: vm,
                system_ns: sys,
                mmap_ns: mm,
                mmap_ratio: ratio(mm, vm),
                system_ratio: ratio(sys, vm),
            });
            mem.extend(r);
        }
    }
    pb.finish_and_clear();
    (speed, mem)
}

/// Cumulative time at each size from 1 MiB up to `max`, growing with
/// `vrealloc`, and the bytes its moves copied so far at each size (the
/// `Vm`'s own count); also returns the `Vm`'s stats line ...
fn grow_vm(max: u64) -> (Vec<Duration>, Vec<u64>, String) {
    let vm = vm(true, max + max / 2, mmkit::range::DEFAULT_LAZY_MAX);
    let (mut out, mut copied, t0) = (Vec::new(), Vec::new(), Instant::now());
    let mut a = vm.vmalloc(PAGE).expect("vmalloc");
    let mut len = PAGE;
    // SAFETY: `a` is a live area of `len` bytes, ours alone.
    unsafe { touch(a, len, PAGE) };
    while len < max {
        a = vm.vrealloc(a, 2 * len).expect("vrealloc");
        // SAFETY: the area at `a` is now `2 * len` bytes, live and ours.
        unsafe { touch(a + len, len, PAGE) };
        len *= 2;
        if len >= MIB {
            out.push(t0.elapsed());
            copied.push(vm.stats().space.realloc_copied_bytes);
        }
    }
    let s = vm.stats().space;
    let line = format!("vrealloc: {} in place, {} moved, {} pages remapped, {} bytes copied (counted by the Vm)",
        s.realloc_in_place, s.realloc_moved, s.remapped_pages, s.realloc_copied_bytes);
    (out, copied, line)
}

/// ... and with `Vec<u8>` (also returns the bytes a move copies: the old
/// length at each reallocation that changed the address).
fn grow_vec(max: u64) -> (Vec<Duration>, Vec<u64>) {
    let (mut out, mut copied, t0) = (Vec::new(), Vec::new(), Instant::now());
    let mut v: Vec<u8> = Vec::with_capacity(PAGE as usize);
    let (mut len, mut moved) = (PAGE as usize, 0);
    // SAFETY: `v` owns a page of capacity that nothing borrows.
    unsafe { touch(v.as_mut_ptr() as u64, PAGE, PAGE) };
    while (len as u64) < max {
        let before = v.as_ptr();
        v.reserve_exact(2 * len);
        if v.as_ptr() != before {
            moved += len as u64;
        }
        // SAFETY: `v` owns `2 * len` bytes of capacity that nothing borrows.
        unsafe { touch(v.as_mut_ptr() as u64 + len as u64, len as u64, PAGE) };
        len *= 2;
        if len as u64 >= MIB {
            out.push(t0.elapsed());
            copied.push(moved);
        }
    }
    std::hint::black_box(&v);
    (out, copied)
}

/// One size of the growth by doubling.
#[derive(Serialize)]
struct GrowthRow {
    size_mib: u64,
    vrealloc_ms: f64,
    vec_ms: f64,
    ratio: Option<f64>,
    vec_copied_mib: f64,
    vrealloc_copied_mib: f64,
}

const GROWTH_COLS: [Col; 6] = [
    col("size_mib", "size MiB", Fmt::Text),
    col("vrealloc_ms", "vrealloc ms", Fmt::Dec(2)),
    col("vec_ms", "Vec ms", Fmt::Dec(2)),
    col("ratio", "Vec/vrealloc", Fmt::Ratio),
    col("vec_copied_mib", "Vec copied MiB", Fmt::Dec(1)),
    col("vrealloc_copied_mib", "vrealloc copied MiB", Fmt::Dec(1)),
];

/// The growth rows (best of `reps` at each size) and the `Vm`'s line.
fn growth_rows(max: u64, reps: usize) -> (Vec<GrowthRow>, String) {
    let best = |a: Vec<Duration>, b: Vec<Duration>| a.iter().zip(b).map(|(x, y)| y.min(*x)).collect::<Vec<_>>();
    let (mut vmt, vm_copied, line) = grow_vm(max);
    let (mut vect, copied) = grow_vec(max);
    for _ in 1..reps {
        vmt = best(vmt, grow_vm(max).0);
        vect = best(vect, grow_vec(max).0);
    }
    let rows = vmt
        .iter()
        .zip(&vect)
        .zip(copied.iter().zip(&vm_copied))
        .enumerate()
        .map(|(i, ((v, w), (&c, &vc)))| GrowthRow {
            size_mib: 1 << i,
            vrealloc_ms: ms(*v),
            vec_ms: ms(*w),
            ratio: ratio(ms(*w), ms(*v)),
            vec_copied_mib: c as f64 / MIB as f64,
            vrealloc_copied_mib: vc as f64 / MIB as f64,
        })
        .collect();
    (rows, line)
}

fn targets(speed: &[SpeedRow], growth: &[GrowthRow]) -> Vec<Target> {
    let two: Vec<&SpeedRow> = speed.iter().filter(|r| r.threads == 2).collect();
    let worst = two.iter().filter_map(|r| r.mmap_ratio).fold(f64::INFINITY, f64::min);
    let big: Vec<&GrowthRow> = growth.iter().filter(|r| r.size_mib >= 256).collect();
    let churn = Target::new(
        "churn from 2 threads >= 2x faster than mmap/munmap per buffer, every size",
        format!("slowest size {worst:.2}x"),
        worst >= 2.0,
    );
    let what = "vrealloc growth copies 0 bytes and beats Vec doubling at 256 MiB and above";
    let grow = match big.is_empty() {
        true => Target::skipped(what, "this run stops below 256 MiB"),
        false => Target::new(
            what,
            format!("Vec/vrealloc {}", big.iter().map(|r| format!("{:.2}x", r.ratio.unwrap_or(f64::NAN))).collect::<Vec<_>>().join(" ")),
            big.iter().all(|r| r.vrealloc_ms < r.vec_ms && r.vrealloc_copied_mib == 0.0),
        ),
    };
    vec![churn, grow]
}

fn plot_growth(rows: &[GrowthRow]) -> Result<String, Box<dyn std::error::Error>> {
    let chart = Chart {
        title: "vm_buffers: growing one buffer by doubling from 4 KiB".into(),
        x: Axis::log("buffer size, MiB (log scale)"),
        y: Axis::log("cumulative time, ms (log scale)"),
    };
    let pts = |f: fn(&GrowthRow) -> f64| rows.iter().map(|r| (r.size_mib as f64, f(r))).collect();
    plot::lines(&chart, &[Series::new("Vm::vrealloc (maps new frames, copies nothing)", pts(|r| r.vrealloc_ms)), Series::new("Vec<u8> reserve_exact (copies on a move)", pts(|r| r.vec_ms))])
}

fn plot_churn(speed: &[SpeedRow]) -> Result<String, Box<dyn std::error::Error>> {
    let two: Vec<&SpeedRow> = speed.iter().filter(|r| r.threads == 2).collect();
    let chart = Chart {
        title: "vm_buffers: allocate + touch + free, 2 threads".into(),
        x: Axis::linear("buffer size"),
        y: Axis::log("ns per buffer (log scale)"),
    };
    let bar = |f: fn(&SpeedRow) -> f64| two.iter().map(|r| f(r)).collect();
    let cases = two.iter().map(|r| r.buffer.clone()).collect::<Vec<_>>();
    plot::bars(&chart, &cases, &[("Vm vmalloc/vfree (lazy)".into(), bar(|r| r.vmalloc_ns)), ("System (glibc malloc)".into(), bar(|r| r.system_ns)), ("mmap/munmap per buffer".into(), bar(|r| r.mmap_ns))])
}

fn run(opts: &Options) -> Report {
    let (budget, max, reps) = opts.pick((64 * MIB, 64 * MIB, 1), (256 * MIB, 256 * MIB, 1), (1 << 30, 1 << 30, 3));
    let budget = opts.loops.map_or(budget, |l| l * MIB);
    let mut report = Report::new("vm_buffers");
    // Growth first: both contenders start from fresh memory (after the
    // churn, glibc's heap would hold resident pages for Vec).
    let pb = progress(1, "vm_buffers growth");
    let (growth, line) = growth_rows(max, reps);
    pb.finish_and_clear();
    let (speed, mem) = churn_rows(budget);
    report.tables.extend([
        Table::of("churn: ns per allocate + touch every page + free (wall time / all operations)", &SPEED_COLS, &speed),
        Table::of("churn: unmapping system calls and memory (RSS at the end of the loop, peak during it)", &MEM_COLS, &mem),
        Table::of(format!("growth by doubling from 4 KiB: cumulative time at each size (best of {reps})"), &GROWTH_COLS, &growth),
    ]);
    report.targets = targets(&speed, &growth);
    report.plot("vm_buffers-churn.svg", "Time per allocate + touch + free of one buffer from 2 threads, by buffer size (log scale): lazy batched unmapping (Vm) against glibc malloc and a direct mmap/munmap per buffer; lower is faster.", plot_churn(&speed));
    report.plot("vm_buffers-growth.svg", "Cumulative time to grow one buffer by doubling up to each size (log-log): vrealloc maps new frames and copies nothing, Vec may copy the old contents when the buffer moves; the lower line is the faster way to grow.", plot_growth(&growth));
    report.notes.push(line);
    report.notes.extend([
        format!("churn: {} MiB per thread per case (--loops N sets N MiB); vmalloc = new design (lazy, lazy_max 32 MiB); \
                 its RSS counts only the memfd pages mapped, freed frames stay in the memfd; the System allocator \
                 is glibc malloc here (large chunks: mmap, then heap once its threshold adapts); unmapping calls of \
                 System are not counted; those of mmap are the munmap calls the loop made, counted", budget / MIB),
        "vrealloc copied = the bytes the Vm's moves copied, as its stats count them (pages of the old area \
         not shown from the same frame by the new one); Vec copied = the old length at each reallocation that moved the buffer (glibc's realloc may move a \
         large chunk with mremap instead of copying, so this is what Vec asks for, an upper bound); \
         Vec's sizes below glibc's adaptive mmap threshold (up to 32 MiB) reuse heap pages that an \
         earlier repetition left resident".into(),
    ]);
    report
}
