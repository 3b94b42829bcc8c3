//! `mmkit experiments linux` (opt-in): Linux 6.12's vmalloc beside
//! mmkit-kernel's, in the same QEMU machine. Linux is built from Debian's
//! `linux-source-6.12` by `scripts/linux/build.sh` (cached outside the
//! checkout, in `$MMKIT_LINUX_CACHE`), with a busybox initramfs that loads
//! Linux's own `test_vmalloc` (performance mode: one worker, sequential
//! order; stress mode: one worker per vCPU, shuffled order) and a module
//! running seed 002's loop through `vm_map_ram` (one bound kthread per
//! CPU, 4 pages, one write per page). Each vCPU count boots mmkit-kernel
//! and Linux in turn, several times, at the same sizes; the tables show
//! medians with their spread, and the TLB-shootdown IPIs each side took.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod parse;
mod tables;

use parse::{perf_ms, stress_ms, LinuxRun};
use tables::{
    ipi_rows, map_ram_row, mode_row, targets, test_rows, AtCpus, BootRow, MapRamRow, ModeRow,
    TestRow, BOOT_COLS, IPI_CASES, IPI_COLS, MAP_RAM_COLS, PERF_COLS, STRESS_COLS, TEST_COLS,
};

use super::kernel::qemu::{self, Accel, Boot};
use super::{Experiment, Options};
use crate::render::{Report, Table, Target};

/// The registry entry (opt-in: `mmkit experiments linux`).
pub const EXPERIMENT: Experiment = Experiment {
    name: "linux",
    about: "opt-in: Linux 6.12's vmalloc and vm_map_ram beside mmkit-kernel's, same QEMU",
    run,
};

/// test_vmalloc's seven tests, in its order (its `run_test_mask` bits 0-6).
const TESTS: [&str; 7] = [
    "fix_size_alloc_test",
    "full_fit_alloc_test",
    "long_busy_list_alloc_test",
    "random_size_alloc_test",
    "fix_align_alloc_test",
    "random_size_align_alloc_test",
    "align_shift_alloc_test",
];

/// Where Linux is built and how.
fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/linux/build.sh")
}

/// A built Linux: the kernel and its initramfs.
#[derive(Debug, Clone, PartialEq)]
struct Image {
    kernel: PathBuf,
    initrd: PathBuf,
}

/// Reads build.sh's `KERNEL path` and `INITRD path` lines.
fn image_of(stdout: &str) -> Option<Image> {
    let path = |tag: &str| {
        stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(tag))
            .map(PathBuf::from)
    };
    Some(Image {
        kernel: path("KERNEL ")?,
        initrd: path("INITRD ")?,
    })
}

/// Builds Linux (cached) or says why it cannot.
fn build_linux() -> Result<Image, String> {
    eprintln!(
        "linux: building Linux 6.12 with {} (cached; the first build takes 10-30 minutes)",
        build_script().display()
    );
    let out = Command::new("bash")
        .arg(build_script())
        .output()
        .map_err(|e| format!("running bash: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = err
            .lines()
            .rev()
            .find(|l| l.starts_with("linux build:"))
            .map_or_else(
                || err.lines().rev().take(4).collect::<Vec<_>>().join(" | "),
                str::to_string,
            );
        return Err(why);
    }
    image_of(&stdout).ok_or_else(|| "build.sh printed no KERNEL and INITRD lines".into())
}

/// The sizes both systems run at: mmkit-kernel's scale words.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sizes {
    seed_iters: u64,
    loops: u64,
    busy: u64,
    full_fit: u64,
    stress_loops: u64,
    stress_busy: u64,
    stress_full_fit: u64,
}

impl Sizes {
    /// Reads the `key=value` words of mmkit-kernel's `SCALE` line (the
    /// last of a key wins).
    fn of(append: &str) -> Sizes {
        let mut s = Sizes {
            seed_iters: 2000,
            loops: 100,
            busy: 1000,
            full_fit: 256,
            stress_loops: 50,
            stress_busy: 50,
            stress_full_fit: 16,
        };
        for (k, v) in append.split_whitespace().filter_map(|w| w.split_once('=')) {
            let Ok(v) = v.parse::<u64>() else { continue };
            let v = v.max(1);
            match k {
                "seed_iters" => s.seed_iters = v,
                "loops" => s.loops = v,
                "busy" => s.busy = v,
                "full_fit" => s.full_fit = v,
                "stress_loops" => s.stress_loops = v,
                "stress_busy" => s.stress_busy = v,
                "stress_full_fit" => s.stress_full_fit = v,
                _ => {}
            }
        }
        s
    }

    /// Stress mode's per-worker (loops, busy, full_fit) at `cpus`, as
    /// mmkit-kernel scales them: the sizes at 2 CPUs times (2 / CPUs)^2.
    fn stress(self, cpus: usize) -> (u64, u64, u64) {
        let c = cpus.max(2) as u64;
        let f = |v: u64| (v.saturating_mul(4) / (c * c)).max(1);
        (
            f(self.stress_loops),
            f(self.stress_busy),
            f(self.stress_full_fit),
        )
    }

    /// Linux's command line: a warm-up pass of the seven tests, the
    /// timed performance-mode pass (three runs each), stress mode, the
    /// vm_map_ram loop, then a load that its module refuses (no work: the
    /// IPIs of a module's load and unload alone).
    fn linux_append(self, cpus: usize) -> String {
        let perf = format!(
            "test_vmalloc:run_test_mask=127,nr_threads=1,sequential_test_order=1,test_loop_count={},busy_count={},full_fit_pairs={}",
            self.loops, self.busy, self.full_fit
        );
        let (l, b, f) = self.stress(cpus);
        format!(
            "console=ttyS0 quiet panic=-1 no_timer_check \
             mmkit.step=warm:{perf},test_repeat_count=1 \
             mmkit.step=perf:{perf},test_repeat_count=3 \
             mmkit.step=stress:test_vmalloc:run_test_mask=127,nr_threads={cpus},test_loop_count={l},busy_count={b},full_fit_pairs={f} \
             mmkit.step=vm_map_ram:vm_map_ram_loop:iterations={},nr_pages=4 \
             mmkit.step=load:vm_map_ram_loop:iterations=0",
            self.seed_iters
        )
    }
}

/// One boot's figures, either system.
#[derive(Debug, Clone, Default, PartialEq)]
struct Measured {
    /// Performance mode, ms of the three timed runs, per test.
    perf_tests: Vec<f64>,
    perf_total_ms: f64,
    stress_ms: f64,
    stress_ipis: f64,
    map_ram_ns: f64,
    map_ram_ipis_per_1e6: f64,
}

/// Unmaps the vm_map_ram loop makes, counted as mmkit-kernel counts them:
/// the untimed tenth included.
fn unmaps(iters: u64, cpus: u64) -> f64 {
    ((iters + iters / 10) * cpus) as f64
}

/// Linux's figures from a boot's serial lines, or why they are missing.
fn linux_measured(run: &LinuxRun, cpus: usize) -> Result<Measured, String> {
    let step = |name: &str| {
        run.step(name)
            .filter(|s| s.rc == 0)
            .ok_or_else(|| format!("Linux's step {name} did not run to its end"))
    };
    step("warm")?;
    let perf = step("perf")?;
    let perf_tests = perf_ms(perf, &TESTS)
        .ok_or("test_vmalloc performance mode: a test failed or is missing")?;
    let stress = step("stress")?;
    let stress_ms = stress_ms(stress, cpus, run.tsc_mhz)
        .ok_or("test_vmalloc stress mode: a test failed, a worker is missing or the TSC frequency is unknown")?;
    let vmr = step("vm_map_ram")?;
    // Refused by design (iterations=0), so any exit status.
    let load = run
        .step("load")
        .ok_or("Linux's step load did not run to its end")?
        .flush_ipis();
    let ipis = |s: &parse::Step| s.flush_ipis().saturating_sub(load) as f64;
    let m = vmr
        .map_ram()
        .ok_or("the vm_map_ram loop printed no result")?;
    if m.failed > 0 || m.cpus != cpus as u64 {
        return Err(format!(
            "the vm_map_ram loop: {} failures on {} of {cpus} CPUs",
            m.failed, m.cpus
        ));
    }
    Ok(Measured {
        perf_total_ms: perf_tests.iter().sum(),
        perf_tests,
        stress_ms,
        stress_ipis: ipis(stress),
        map_ram_ns: m.ns_per_op as f64,
        map_ram_ipis_per_1e6: ipis(vmr) * 1e6 / unmaps(m.iters, m.cpus),
    })
}

/// The value of `k` in a `ROW` line's map.
fn get(r: &std::collections::BTreeMap<String, String>, k: &str) -> f64 {
    r.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// A `ROW` line of `name` whose words include every pair of `want`.
fn row(
    b: &Boot,
    name: &str,
    want: &[(&str, &str)],
) -> Option<std::collections::BTreeMap<String, String>> {
    b.rows(name).into_iter().find(|r| {
        want.iter()
            .all(|(k, v)| r.get(*k).map(String::as_str) == Some(*v))
    })
}

/// mmkit-kernel's figures for `design` from its `ROW` lines.
fn mmkit_measured(b: &Boot, design: &str) -> Option<Measured> {
    let perf_tests = TESTS
        .iter()
        .map(|t| {
            row(
                b,
                "test_vmalloc",
                &[("mode", "performance"), ("design", design), ("test", t)],
            )
            .map(|r| get(&r, "ns") / 1e6)
        })
        .collect::<Option<Vec<f64>>>()?;
    let stress = row(b, "test_vmalloc", &[("mode", "stress"), ("design", design)])?;
    // vm_map_ram exists in the new and nodes designs only; the old maps
    // through the busy list.
    let seed_design = match design {
        "new" | "nodes" => design,
        _ => "old",
    };
    let seed = row(b, "seed002", &[("design", seed_design)]);
    Some(Measured {
        perf_total_ms: perf_tests.iter().sum(),
        perf_tests,
        stress_ms: get(&stress, "ns") / 1e6,
        stress_ipis: get(&stress, "ipis"),
        map_ram_ns: seed.as_ref().map_or(f64::NAN, |r| get(r, "ns_per_op")),
        map_ram_ipis_per_1e6: seed
            .as_ref()
            .map_or(f64::NAN, |r| get(r, "ipis_per_1e6_unmaps")),
    })
}

/// mmkit-kernel's shootdown timings (median ns of each `ROW ipi` case,
/// idle then busy targets; NaN where a case is missing).
fn ipi_measured(b: &Boot) -> [f64; 8] {
    let mut out = [f64::NAN; 8];
    for (i, state) in ["idle", "busy"].into_iter().enumerate() {
        for (k, what) in IPI_CASES.into_iter().enumerate() {
            if let Some(r) = row(b, "ipi", &[("what", what), ("targets", state)]) {
                out[i * 4 + k] = get(&r, "median_ns");
            }
        }
    }
    out
}

/// vCPU counts and boots per system of a run.
fn plan(quick: bool) -> (&'static [usize], usize) {
    if quick {
        (&[1, 2], 1)
    } else {
        (&ALL_VCPUS, 3)
    }
}

/// Every vCPU count the experiment knows how to run.
const ALL_VCPUS: [usize; 4] = [1, 2, 4, 8];

/// The vCPU counts of [`ALL_VCPUS`] that `only` (the value of
/// `MMKIT_LINUX_VCPUS`, a comma-separated list) names, so a quick run can
/// take 4 or 8 vCPUs; the plan's `counts` when `only` is unset or names
/// none of them.
fn only_vcpus(counts: &[usize], only: Option<&str>) -> Vec<usize> {
    let named: Vec<usize> = only
        .unwrap_or("")
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let kept: Vec<usize> = ALL_VCPUS
        .iter()
        .copied()
        .filter(|c| named.contains(c))
        .collect();
    if kept.is_empty() {
        counts.to_vec()
    } else {
        kept
    }
}

/// Linux's stock `test_vmalloc` sizes: 15,000 areas in the long busy list.
const STOCK_BUSY: u64 = 15_000;

/// Linux's stock full-fit pairs at `cpus`: `fls(cpus)` times 32 MiB of
/// pages (its `lazy_max_pages()`).
fn stock_full_fit(cpus: usize) -> u64 {
    u64::from(usize::BITS - cpus.leading_zeros()) * (32 << 20) / 4096
}

/// The guest memory of the stock-size pass, MiB: the most q35 keeps below
/// 4 GiB in one range (from 2816 MiB on it moves memory above 4 GiB,
/// which mmkit-kernel does not map).
const STOCK_MEM_MIB: u64 = 2800;

/// mmkit-kernel's command line for Linux's stock sizes at `cpus`, on
/// `base`: every worker (the one of performance mode and each of stress
/// mode) at the stock sizes, the busy-list designs left out (`no-old`:
/// hours under emulation at these sizes).
fn stock_append(base: &str, cpus: usize) -> String {
    // The kernel's stress sizes are per worker at 2 CPUs, scaled by
    // (2 / CPUs)^2 above: the inverse gives the stock size per worker.
    let c = cpus.max(2) as u64;
    let at2 = |v: u64| v * c * c / 4;
    let f = stock_full_fit(cpus);
    format!(
        "{base} no-old busy={STOCK_BUSY} full_fit={f} stress_busy={} stress_full_fit={}",
        at2(STOCK_BUSY),
        at2(f)
    )
}

/// One pass of the comparison: its name, guest memory and mmkit-kernel's
/// command line at a vCPU count (Linux is sized from its SCALE line).
struct Pass {
    name: &'static str,
    mem_mib: u64,
    append: Box<dyn Fn(usize) -> String>,
    counts: Vec<usize>,
}

/// Boots both systems `boots` times at `vcpus`.
fn measure(
    elf: &Path,
    linux: &Image,
    vcpus: usize,
    boots: usize,
    pass: &Pass,
    accel: Accel,
    notes: &mut Vec<String>,
) -> AtCpus {
    let append = (pass.append)(vcpus);
    let mmkit = qemu::Guest {
        kernel: elf,
        initrd: None,
        mem_mib: pass.mem_mib,
    };
    let linux_guest = qemu::Guest {
        kernel: &linux.kernel,
        initrd: Some(&linux.initrd),
        mem_mib: pass.mem_mib,
    };
    let timeout = Duration::from_secs(1200);
    let mut a = AtCpus {
        vcpus,
        ..AtCpus::default()
    };
    // Linux runs at the sizes mmkit-kernel printed on its SCALE line.
    let mut sizes: Option<Sizes> = None;
    for n in 1..=boots {
        let booted = qemu::boot_image(&mmkit, vcpus, &append, timeout, accel, None);
        if let Some(line) = booted
            .as_ref()
            .ok()
            .and_then(|b| b.lines.iter().find(|l| l.starts_with("SCALE ")))
        {
            sizes = Some(Sizes::of(line));
        }
        let verdict = match booted {
            Ok(b) if b.passed => {
                let found =
                    ["old", "old_lazy", "new", "nodes", "new_ll"].map(|d| mmkit_measured(&b, d));
                // The busy-list designs are left out of the stock sizes.
                match found {
                    [o, l, Some(w), Some(n), Some(ll)] => {
                        a.old.extend(o);
                        a.lazy.extend(l);
                        a.new.push(w);
                        a.nodes.push(n);
                        a.new_ll.push(ll);
                        a.ipi.push(ipi_measured(&b));
                        ("pass".to_string(), b.wall)
                    }
                    _ => ("FAIL: ROW lines missing".to_string(), b.wall),
                }
            }
            Ok(b) => (format!("FAIL: {}", b.failure.unwrap_or_default()), b.wall),
            Err(e) => (format!("FAIL: {e}"), Duration::ZERO),
        };
        a.boots.push(BootRow {
            vcpus,
            system: "mmkit-kernel",
            boot: n,
            wall_s: verdict.1.as_secs_f64(),
            verdict: verdict.0,
        });
        let Some(linux_append) = sizes.map(|s| s.linux_append(vcpus)) else {
            a.boots.push(BootRow {
                vcpus,
                system: "Linux 6.12",
                boot: n,
                wall_s: 0.0,
                verdict: "FAIL: no SCALE line from mmkit-kernel to size it".into(),
            });
            continue;
        };
        if n == 1 {
            notes.push(format!(
                "{}: at {vcpus} vCPUs, mmkit-kernel's command line: {append}; Linux's: {linux_append}",
                pass.name
            ));
        }
        let verdict =
            match qemu::boot_image(&linux_guest, vcpus, &linux_append, timeout, accel, None) {
                Ok(b) => {
                    let run = LinuxRun::parse(&b.lines);
                    match linux_measured(&run, vcpus) {
                        Ok(m) => {
                            a.linux.push(m);
                            ("pass".to_string(), b.wall)
                        }
                        Err(e) => {
                            let last: Vec<&str> = b
                                .lines
                                .iter()
                                .rev()
                                .take(3)
                                .rev()
                                .map(String::as_str)
                                .collect();
                            notes.push(format!(
                                "{}: Linux at {vcpus} vCPUs, boot {n}: {e}; last lines: {}",
                                pass.name,
                                last.join(" | ")
                            ));
                            (format!("FAIL: {e}"), b.wall)
                        }
                    }
                }
                Err(e) => (format!("FAIL: {e}"), Duration::ZERO),
            };
        a.boots.push(BootRow {
            vcpus,
            system: "Linux 6.12",
            boot: n,
            wall_s: verdict.1.as_secs_f64(),
            verdict: verdict.0,
        });
    }
    if n_ok(&a) < boots {
        notes.push(format!(
            "{}: {vcpus} vCPUs: {} of {boots} boot pairs gave figures",
            pass.name,
            n_ok(&a)
        ));
    }
    a
}

/// The tables and targets of one pass.
fn tabulate(report: &mut Report, pass: &Pass, all: &[AtCpus], boots: usize, a: &str) {
    let perf: Vec<ModeRow> = all
        .iter()
        .map(|x| mode_row(x, |m| m.perf_total_ms, |_| f64::NAN))
        .collect();
    let stress: Vec<ModeRow> = all
        .iter()
        .map(|x| mode_row(x, |m| m.stress_ms, |m| m.stress_ipis))
        .collect();
    let maps: Vec<MapRamRow> = all.iter().map(map_ram_row).collect();
    let tests: Vec<TestRow> = all.iter().flat_map(test_rows).collect();
    let p = pass.name;
    report.tables.push(Table::of(
        format!("{p}: test_vmalloc performance mode (one worker, sequential, 3 timed runs after a warm-up), total ms, median (min-max) of {boots} boots ({a})"),
        &PERF_COLS,
        &perf,
    ));
    report.tables.push(Table::of(
        format!("{p}: test_vmalloc stress mode (one worker per vCPU, shuffled), ms to the slowest worker's end, with the TLB-shootdown IPIs taken ({a})"),
        &STRESS_COLS,
        &stress,
    ));
    report.tables.push(Table::of(
        format!("{p}: vm_map_ram loop: ns per map + one write per page + unmap of 4 pages, one bound thread per vCPU ({a})"),
        &MAP_RAM_COLS,
        &maps,
    ));
    let ipi: Vec<_> = all.iter().flat_map(ipi_rows).collect();
    report.tables.push(Table::of(
        format!("{p}: mmkit-kernel's TLB shootdown: IPI send to last acknowledgement, and a whole flush (local invlpg or CR3 reload + IPIs + wait), median ns of each boot's median, targets idle and busy ({a})"),
        &IPI_COLS,
        &ipi,
    ));
    report.tables.push(Table::of(
        format!("{p}: test_vmalloc performance mode per test, 3 timed runs ({a})"),
        &TEST_COLS,
        &tests,
    ));
    report.tables.push(Table::of(
        format!("{p}: boots ({a})"),
        &BOOT_COLS,
        &all.iter().flat_map(|x| &x.boots).collect::<Vec<_>>(),
    ));
    report
        .targets
        .extend(targets(&format!("{p}; {a}"), &tests, &perf, &stress, &maps));
}

fn n_ok(a: &AtCpus) -> usize {
    a.new.len().min(a.linux.len())
}

fn run(opts: &Options) -> Report {
    let mut report = Report::new("linux");
    let skip = |report: &mut Report, why: String| {
        report.notes.push(format!("linux: skipped: {why}"));
        report.targets.push(Target::skipped(
            "Linux and mmkit-kernel boot and run the comparison",
            why,
        ));
    };
    let qemu_line = match qemu::qemu_version() {
        Ok(v) => v,
        Err(e) => {
            skip(&mut report, e.message().to_string());
            return report;
        }
    };
    let elf = match qemu::build() {
        Ok(p) => p,
        Err(e) => {
            skip(&mut report, e.message().to_string());
            return report;
        }
    };
    let linux = match build_linux() {
        Ok(i) => i,
        Err(e) => {
            skip(&mut report, format!("Linux could not be built: {e}"));
            return report;
        }
    };
    let accel = Accel::here();
    let a = accel.name();
    let base = qemu::scale(if opts.quick { "quick" } else { "default" }, opts.loops);
    let (counts, boots) = plan(opts.quick);
    let only = std::env::var("MMKIT_LINUX_VCPUS").ok();
    let counts = only_vcpus(counts, only.as_deref());
    // Quick: the stock sizes at the most vCPUs of the CI pass only.
    let stock_counts = if opts.quick {
        counts.iter().max().map_or_else(Vec::new, |&c| vec![c])
    } else {
        counts.clone()
    };
    let ci = base.clone();
    let stock = base.clone();
    let passes = [
        Pass {
            name: "CI scale",
            mem_mib: qemu::MEM_MIB,
            append: Box::new(move |_| ci.clone()),
            counts,
        },
        Pass {
            name: "Linux's stock sizes",
            mem_mib: STOCK_MEM_MIB,
            append: Box::new(move |c| stock_append(&stock, c)),
            counts: stock_counts,
        },
    ];
    let mut notes = Vec::new();
    let mut all_ok = Vec::new();
    for pass in &passes {
        let all: Vec<AtCpus> = (pass.counts.iter())
            .map(|&c| measure(&elf, &linux, c, boots, pass, accel, &mut notes))
            .collect();
        tabulate(&mut report, pass, &all, boots, a);
        all_ok.extend(all.iter().map(|x| (pass.name, x.vcpus, n_ok(x), boots)));
    }
    report.targets.push(Target::new(
        format!("every boot of both systems gives its figures ({a})"),
        (all_ok.iter())
            .map(|(p, c, n, b)| format!("{p} {c}: {n}/{b}"))
            .collect::<Vec<_>>()
            .join(", "),
        all_ok.iter().all(|(_, _, n, b)| n == b),
    ));
    report.notes.push(format!(
        "accelerator: {a} ({qemu_line}); both systems boot on mmkit-kernel's QEMU command line (q35; 512 MiB at the CI \
         scale, {STOCK_MEM_MIB} MiB at Linux's stock sizes); Linux runs at the sizes of mmkit-kernel's SCALE line"
    ));
    report.notes.push(
        "Linux is Debian's linux-source-6.12 built by scripts/linux/build.sh (tinyconfig + scripts/linux/linux.config: x86_64, SMP, \
         full SLUB, -O2, no debug options, mitigations off); its test_vmalloc is lib/test_vmalloc.c with the long-busy-list \
         count and the full-fit pair count made parameters (stock values when unset), run at mmkit-kernel's sizes. \
         Lean (Linux/new, Linux/nodes): mmkit-kernel's vmalloc takes the frames, one range and the driver's area record \
         with its frame list; Linux's also allocates a vm_struct and a zeroed page array per call and zeroes the pages of \
         the aligned tests (__GFP_ZERO). Like for like (Linux/new-ll): the tree with that work added (a record and a \
         zeroed page array from the kernel heap per call, freed by vfree; pages zeroed where Linux's test asks). What \
         else differs: Linux's areas come from a slab and its pages from its page allocator with struct page \
         bookkeeping, and it runs the tests in kthreads under its scheduler; mmkit-kernel runs them on bare CPUs. \
         The vm_map_ram loop is lean on both sides (Linux's vm_map_ram allocates nothing per call). At Linux's stock sizes mmkit-kernel leaves its busy-list \
         designs out. Linux's flush IPIs are the TLB and CAL lines of /proc/interrupts over the step (x86 sends \
         kernel-range flushes as function calls, which the TLB line does not count), less those of loading and \
         unloading a module that does no work in the same boot: an upper bound, with any other cross-CPU call."
            .into(),
    );
    report.notes.extend(notes);
    report
}

#[cfg(test)]
mod tests;
