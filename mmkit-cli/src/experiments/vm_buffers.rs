//! `mmkit experiments vm_buffers`: large buffers on real memory.
//!
//! Churn: threads loop {allocate a buffer, write one byte into each page,
//! free it} with `Vm::vmalloc`/`vfree` (lazy, batched unmapping), with
//! std's `System` allocator, and with a direct `mmap`/`munmap` per buffer.
//! Growth: one buffer doubled from 4 KiB with `Vm::vrealloc` (no byte
//! copied: the frames stay, only new ones are mapped) against `Vec<u8>`
//! doubling (`reserve_exact`, then touch the new part).

use std::sync::Barrier;
use std::time::{Duration, Instant};

use mmkit_vm::Vm;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use serde_json::json;

use super::real::{met, reset_peak, rss_mib, touch, unmap_calls, vm};
use super::{progress, Experiment, Options};
use crate::report::{ratio, Report, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vm_buffers",
    about: "large buffers on real memory: vmalloc/vfree churn vs System vs mmap/munmap; vrealloc growth vs Vec",
    run,
};

const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;
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

/// One allocate + touch + free of `len` bytes.
fn once(b: Backend, vm: &Vm, len: u64) {
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
    let go = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|id| {
                let (vm, go) = (&vm, &go);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(0xb0f + id as u64);
                    go.wait();
                    let t0 = Instant::now();
                    (0..iters).for_each(|_| once(b, vm, size_of(size, &mut rng)));
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
        Backend::Mmap => Some(threads as u64 * iters),
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

/// The churn tables; returns whether 2 threads beat mmap by 2x everywhere.
fn churn_tables(budget: u64, report: &mut Report) -> bool {
    let mut speed = Table::new(
        "churn: ns per allocate + touch every page + free (wall time / all operations)",
        &["buffer", "threads", "vmalloc ns", "System ns", "mmap ns", "mmap/vmalloc", "System/vmalloc"],
    );
    let mut mem = Table::new(
        "churn: unmapping system calls and memory (RSS at the end of the loop, peak during it)",
        &["buffer", "threads", "backend", "ops", "unmap calls", "RSS MiB", "peak RSS MiB"],
    );
    let pb = progress((SIZES.len() * 2 * BACKENDS.len()) as u64, "vm_buffers churn");
    let mut ok = true;
    for size in SIZES {
        let iters = (budget / size.unwrap_or(3 * MIB)).max(4);
        for threads in [1, 2] {
            let r: Vec<Churn> = BACKENDS.iter().map(|&(b, _)| {
                let c = churn(b, size, threads, iters);
                pb.inc(1);
                c
            }).collect();
            ok &= threads != 2 || r[2].ns >= 2.0 * r[0].ns;
            speed.row(vec![size_name(size), threads.to_string(), format!("{:.0}", r[0].ns),
                format!("{:.0}", r[1].ns), format!("{:.0}", r[2].ns), ratio(r[2].ns, r[0].ns), ratio(r[1].ns, r[0].ns)]);
            for (c, (_, name)) in r.iter().zip(BACKENDS) {
                mem.row(vec![size_name(size), threads.to_string(), name.into(), (threads as u64 * iters).to_string(),
                    c.calls.map_or("-".into(), |n| n.to_string()), format!("{:.0}", c.rss.0), format!("{:.0}", c.rss.1)]);
                report.rows.push(json!({"part": "churn", "buffer": size_name(size), "threads": threads, "backend": name,
                    "ns_per_op": c.ns, "ops": threads as u64 * iters, "unmap_calls": c.calls, "rss_mib": c.rss.0, "peak_rss_mib": c.rss.1}));
            }
        }
    }
    pb.finish_and_clear();
    report.tables.extend([speed, mem]);
    ok
}

/// Cumulative time at each size from 1 MiB up to `max`, growing with
/// `vrealloc` (also returns the `Vm`'s stats line) ...
fn grow_vm(max: u64) -> (Vec<Duration>, String) {
    let vm = vm(true, max + max / 2, mmkit::range::DEFAULT_LAZY_MAX);
    let (mut out, t0) = (Vec::new(), Instant::now());
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
        }
    }
    let s = vm.stats().space;
    let line = format!("vrealloc: {} in place, {} moved, {} pages remapped, 0 bytes copied",
        s.realloc_in_place, s.realloc_moved, s.remapped_pages);
    (out, line)
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

/// The growth table; returns whether vrealloc beat Vec at every size from
/// 256 MiB (None when the run stops below).
fn growth_table(max: u64, reps: usize, report: &mut Report) -> Option<bool> {
    let best = |a: Vec<Duration>, b: Vec<Duration>| a.iter().zip(b).map(|(x, y)| y.min(*x)).collect::<Vec<_>>();
    let (mut vmt, line) = grow_vm(max);
    let (mut vect, copied) = grow_vec(max);
    for _ in 1..reps {
        vmt = best(vmt, grow_vm(max).0);
        vect = best(vect, grow_vec(max).0);
    }
    let mut t = Table::new(
        format!("growth by doubling from 4 KiB: cumulative time at each size (best of {reps})"),
        &["size MiB", "vrealloc ms", "Vec ms", "Vec/vrealloc", "Vec copied MiB", "vrealloc copied MiB"],
    );
    let mut beats = None;
    for (i, (v, w)) in vmt.iter().zip(&vect).enumerate() {
        let size = MIB << i;
        let (a, b) = (v.as_secs_f64() * 1e3, w.as_secs_f64() * 1e3);
        if size >= 256 * MIB {
            beats = Some(beats.unwrap_or(true) && a < b);
        }
        t.row(vec![(size / MIB).to_string(), format!("{a:.2}"), format!("{b:.2}"), ratio(b, a),
            format!("{:.1}", copied[i] as f64 / MIB as f64), "0".into()]);
        report.rows.push(json!({"part": "growth", "size_mib": size / MIB, "vrealloc_ms": a, "vec_ms": b,
            "vec_copied_bytes": copied[i], "vrealloc_copied_bytes": 0}));
    }
    report.tables.push(t);
    report.notes.push(line);
    beats
}

fn run(opts: &Options) -> Report {
    let (budget, max, reps) = if opts.quick { (64 * MIB, 64 * MIB, 1) } else { (1 << 30, 1 << 30, 3) };
    let budget = opts.loops.map_or(budget, |l| l * MIB);
    let mut report = Report { name: "vm_buffers".into(), ..Report::default() };
    // Growth first: both contenders start from fresh memory (after the
    // churn, glibc's heap would hold resident pages for Vec).
    let pb = progress(1, "vm_buffers growth");
    let grow = growth_table(max, reps, &mut report);
    pb.finish_and_clear();
    let churn_ok = churn_tables(budget, &mut report);
    report.notes.extend([
        format!("target: churn from 2 threads >= 2x faster than mmap/munmap per buffer (every size): {}", met(churn_ok)),
        format!("target: vrealloc growth copies 0 bytes and beats Vec doubling at 256 MiB and above: {}",
            grow.map_or("not evaluated (this run stops below 256 MiB)", met)),
        format!("churn: {} MiB per thread per case (--loops N sets N MiB); vmalloc = new design (lazy, lazy_max 32 MiB); \
                 its RSS counts only the memfd pages mapped, freed frames stay in the memfd; the System allocator \
                 is glibc malloc here (large chunks: mmap, then heap once its threshold adapts); unmapping calls of \
                 System are not counted", budget / MIB),
        "Vec copied = the old length at each reallocation that moved the buffer (glibc's realloc may move a \
         large chunk with mremap instead of copying, so this is what Vec asks for, an upper bound); \
         Vec's sizes below glibc's adaptive mmap threshold (up to 32 MiB) reuse heap pages that an \
         earlier repetition left resident".into(),
    ]);
    report
}
