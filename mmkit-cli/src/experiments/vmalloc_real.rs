//! `mmkit experiments vmalloc-real`: `test_vmalloc`'s tests (see
//! [`super::vmalloc`]) on real mappings of [`mmkit_vm::Vm`], one byte
//! written into every page of every area. Old design: each `vfree` unmaps
//! at once (one system call each, `lazy_unmap: false`); new: lazy, batched
//! by purges. Beside them, the allocator-level figures at the same scale
//! (busy-list baseline vs augmented tree, addresses only).
//!
//! Scale: a real area is two kernel VMAs (its mapping and its guard), and
//! a process may hold `vm.max_map_count` (65530) of them, so the full-fit
//! and long-busy-list tests hold far fewer live areas than the kernel's.

use indicatif::ProgressBar;
use mmkit_vm::Vm;
use serde_json::json;

use super::real::{touch, unmap_calls, vm};
use super::vmalloc::{
    lazy_max, new_baseline, new_vmap, on_allocator, run_mode, Mode, ModeResult, Params, Vmalloc,
    PAGE, TESTS,
};
use super::{cpus, ms, progress, Experiment, Options};
use crate::report::{ratio, Report, Table};

/// The registry entry.
pub const EXPERIMENT: Experiment = Experiment {
    name: "vmalloc-real",
    about: "seed 000 on real memory: test_vmalloc with page writes, eager unmap per vfree vs lazy batched purges",
    run,
};

/// Pairs of `full_fit_alloc_test` per thread (kernel: 8192 per CPU bit).
const FULL_FIT: usize = 1024;
/// Live areas of `long_busy_list_alloc_test` per thread (kernel: 15000).
const BUSY_LIST: usize = 2000;
/// "Physical memory" of each `Vm`.
const PHYS_LIMIT: u64 = 2 << 30;

/// `test_vmalloc`'s vmalloc on a real `Vm`: every page is written once.
struct Real {
    vm: Vm,
}

impl Vmalloc for Real {
    fn vmalloc(&self, pages: u64, align: u64) -> Option<u64> {
        let a = self.vm.vmalloc_aligned(pages * PAGE, align).ok()?;
        // SAFETY: `a` is a live area of `pages` pages just mapped read-write
        // for us; no reference points into it.
        unsafe { touch(a, pages * PAGE, PAGE) };
        Some(a)
    }

    fn vfree(&self, a: u64) {
        self.vm.vfree(a).expect("vfree of a live area");
    }

    fn unmap_calls(&self) -> u64 {
        unmap_calls(&self.vm)
    }
}

/// One mode on a real `Vm`, purged at the end (the final purge's calls
/// count); returns the result and the unmapping calls in all.
fn on_real(lazy: bool, p: Params, mode: Mode, pb: &ProgressBar) -> (ModeResult, u64) {
    let real = Real {
        vm: vm(lazy, PHYS_LIMIT, lazy_max(cpus())),
    };
    let mut r = run_mode(&real, p, mode, pb);
    real.vm.purge();
    let check = real.vm.check().map_or_else(|e| e.to_string(), |()| "check() ok".into());
    r.after = format!("{check}, {} live areas", real.vm.stats().space.live_areas);
    (r, unmap_calls(&real.vm))
}

/// Everything one mode measured.
struct Measured {
    old: (ModeResult, u64),
    new: (ModeResult, u64),
    list: ModeResult,
    tree: ModeResult,
}

fn measure(p: Params, mode: Mode, pb: &ProgressBar) -> Measured {
    let n = cpus();
    Measured {
        old: on_real(false, p, mode, pb),
        new: on_real(true, p, mode, pb),
        list: on_allocator(new_baseline(), p, mode, n, pb),
        tree: on_allocator(new_vmap(), p, mode, n, pb),
    }
}

/// One mode's table; its rows go into `rows`.
fn table(name: &str, title: String, p: Params, m: &Measured, rows: &mut Vec<serde_json::Value>) -> Table {
    let mut t = Table::new(
        title,
        &["test", "loops", "old ms", "new ms", "old/new", "old unmaps", "new unmaps",
          "alloc busy-list ms", "alloc tree ms", "list/tree"],
    );
    let perf = name == "performance";
    let calls = |r: &ModeResult, i: usize| if perf { r.unmaps[i].to_string() } else { "-".into() };
    for (i, tc) in TESTS.iter().enumerate() {
        let v = [&m.old.0, &m.new.0, &m.list, &m.tree].map(|r| ms(r.per_test[i]));
        t.row(vec![
            tc.name().into(), tc.loops(p.loops).to_string(),
            format!("{:.1}", v[0]), format!("{:.1}", v[1]), ratio(v[0], v[1]),
            calls(&m.old.0, i), calls(&m.new.0, i),
            format!("{:.1}", v[2]), format!("{:.1}", v[3]), ratio(v[2], v[3]),
        ]);
        rows.push(json!({"mode": name, "test": tc.name(), "old_ms": v[0], "new_ms": v[1],
            "old_unmaps": m.old.0.unmaps[i], "new_unmaps": m.new.0.unmaps[i],
            "alloc_list_ms": v[2], "alloc_tree_ms": v[3]}));
    }
    let v = [&m.old.0, &m.new.0, &m.list, &m.tree].map(|r| ms(r.wall));
    t.row(vec![
        "total (wall, with the final purge's calls)".into(), String::new(),
        format!("{:.1}", v[0]), format!("{:.1}", v[1]), ratio(v[0], v[1]),
        m.old.1.to_string(), m.new.1.to_string(),
        format!("{:.1}", v[2]), format!("{:.1}", v[3]), ratio(v[2], v[3]),
    ]);
    rows.push(json!({"mode": name, "test": "total", "old_ms": v[0], "new_ms": v[1],
        "old_unmaps": m.old.1, "new_unmaps": m.new.1, "alloc_list_ms": v[2], "alloc_tree_ms": v[3]}));
    t
}

fn run(opts: &Options) -> Report {
    let loops = opts.loops.unwrap_or(if opts.quick { 100 } else { 3000 });
    let p = Params { loops, full_fit: FULL_FIT, busy_list: BUSY_LIST };
    let n = cpus();
    let modes = [
        ("performance", Mode::Performance, "performance mode: 1 thread, tests in order, repeat 3".to_string()),
        ("stress", Mode::Stress(n), format!("stress mode: {n} threads (one per CPU), shuffled order; test rows sum the threads")),
        ("stress 2x", Mode::Stress(2 * n), format!("stress mode, 2x oversubscribed: {} threads on {n} CPUs", 2 * n)),
    ];
    let per_mode = |m: Mode| TESTS.len() * match m { Mode::Performance => 1, Mode::Stress(t) => t };
    let total: usize = modes.iter().map(|m| 4 * per_mode(m.1)).sum();
    let pb = progress(total as u64, "vmalloc-real");
    let mut report = Report { name: "vmalloc-real".into(), ..Report::default() };
    let mut failed = 0;
    for (name, mode, title) in modes {
        pb.set_message(name);
        let m = measure(p, mode, &pb);
        failed += [&m.old.0, &m.new.0, &m.list, &m.tree].iter().flat_map(|r| &r.failed).sum::<u32>();
        report.tables.push(table(name, title, p, &m, &mut report.rows));
        report.notes.push(format!("after {name}: old {}; new {}", m.old.0.after, m.new.0.after));
    }
    pb.finish_and_clear();
    report.notes.extend([
        format!("test_loop_count = {loops} (--loops N); full_fit {FULL_FIT} pairs and long_busy_list {BUSY_LIST} \
                 areas per thread (the kernel: 8192 per CPU bit and 15000; a real area costs two of the process's \
                 65530 VMAs); lazy_max = fls({n}) * 32 MiB; one byte written per page"),
        "old = Vm with lazy_unmap: false (one unmapping call per vfree), new = lazy_unmap: true (batched purges); \
         both on the augmented tree: the alloc columns are the allocator-level figures (busy list vs tree, no memory) \
         at the same scale; areas aligned as test_vmalloc asks (vmalloc_aligned)."
            .into(),
        format!("failed test runs: {failed}"),
    ]);
    report
}
