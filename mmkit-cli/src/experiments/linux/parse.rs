//! Reading a Linux boot's serial output: the steps the initramfs ran
//! (`scripts/linux/init.sh`), the kernel log lines each wrote (copied
//! from dmesg with an `MMKIT LOG ` prefix), Linux's `test_vmalloc`
//! summaries and the vm_map_ram loop's result line.

/// One step of a boot: a module loaded with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its name on the kernel command line (`mmkit.step=NAME:...`).
    pub name: String,
    /// The loader's exit status (0: loaded, or its init returned -EAGAIN).
    pub rc: i32,
    /// TLB-shootdown interrupts all CPUs took during the step (the `TLB`
    /// line of /proc/interrupts: user address spaces only).
    pub tlb: u64,
    /// Function-call interrupts all CPUs took during the step (the `CAL`
    /// line): x86 sends kernel-range flushes, vmalloc's purges among them,
    /// as these, with other cross-CPU calls.
    pub cal: u64,
    /// Wall time of the `finit_module` call, as the loader measured it.
    pub load_ns: Option<u64>,
    /// The kernel log lines the step wrote, prefix removed.
    pub log: Vec<String>,
}

/// Everything one Linux boot printed that the experiment reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinuxRun {
    /// The steps, in the order they ran.
    pub steps: Vec<Step>,
    /// The TSC frequency Linux calibrated, MHz (test_vmalloc reports
    /// whole runs in TSC cycles).
    pub tsc_mhz: Option<f64>,
    /// The initramfs reached its end (`MMKIT DONE`).
    pub done: bool,
}

/// One `Summary:` line of test_vmalloc: one test on one worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The test's name (`fix_size_alloc_test`, ...).
    pub test: String,
    /// Runs that passed.
    pub passed: u32,
    /// Runs that failed.
    pub failed: u32,
    /// `test_repeat_count`.
    pub repeat: u32,
    /// `test_loop_count`.
    pub loops: u64,
    /// Mean time of one run, microseconds.
    pub avg_us: u64,
}

/// The vm_map_ram loop's result line.
#[derive(Debug, Clone, PartialEq)]
pub struct MapRam {
    /// CPUs that ran the loop.
    pub cpus: u64,
    /// Pages per mapping.
    pub pages: u64,
    /// Timed iterations per CPU.
    pub iters: u64,
    /// Mean ns of one map + touch + unmap, over every CPU.
    pub ns_per_op: u64,
    /// Failed mappings or threads.
    pub failed: u64,
}

/// The text after the `[ seconds]` stamp of a kernel log line.
fn message(line: &str) -> &str {
    let l = line.trim_start();
    match l.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((_, rest)) => rest.trim_start(),
        None => l,
    }
}

/// The value of `key=value` among `words`.
fn word<'a>(words: &'a str, key: &str) -> Option<&'a str> {
    words
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn number<T: std::str::FromStr>(words: &str, key: &str) -> Option<T> {
    word(words, key)?.parse().ok()
}

impl LinuxRun {
    /// Reads the serial lines of a boot (carriage returns allowed).
    pub fn parse<S: AsRef<str>>(lines: &[S]) -> LinuxRun {
        let mut run = LinuxRun::default();
        let mut open: Option<Step> = None;
        let mut detected = None;
        let mut refined = None;
        for raw in lines {
            let line = raw.as_ref().trim_end_matches('\r');
            if let Some(log) = line.strip_prefix("MMKIT LOG ") {
                let m = message(log);
                if let Some(mhz) = tsc(m, "tsc: Detected ") {
                    detected = Some(mhz);
                }
                if let Some(mhz) = tsc(m, "tsc: Refined TSC clocksource calibration: ") {
                    refined = Some(mhz);
                }
                if let Some(s) = open.as_mut() {
                    s.log.push(log.to_string());
                }
            } else if let Some(rest) = line.strip_prefix("MMKIT STEP ") {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if tail.starts_with("begin") {
                    open = Some(Step {
                        name: name.to_string(),
                        rc: -1,
                        tlb: 0,
                        cal: 0,
                        load_ns: None,
                        log: Vec::new(),
                    });
                } else if let Some(end) = tail.strip_prefix("end") {
                    if let Some(mut s) = open.take().filter(|s| s.name == name) {
                        s.rc = number(end, "rc").unwrap_or(-1);
                        s.tlb = number(end, "tlb").unwrap_or(0);
                        s.cal = number(end, "cal").unwrap_or(0);
                        run.steps.push(s);
                    }
                }
            } else if let Some(rest) = line.strip_prefix("MMKIT load ") {
                if let Some(s) = open.as_mut() {
                    s.load_ns = number(rest, "ns");
                }
            } else if line.starts_with("MMKIT DONE") {
                run.done = true;
            }
        }
        run.tsc_mhz = refined.or(detected);
        run
    }

    /// The step named `name`, when it ran to its end.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }
}

/// `2495.998` from "tsc: Detected 2495.998 MHz processor".
fn tsc(message: &str, prefix: &str) -> Option<f64> {
    let rest = message.strip_prefix(prefix)?;
    let mhz: f64 = rest.split_whitespace().next()?.parse().ok()?;
    (mhz.is_finite() && mhz > 0.0).then_some(mhz)
}

impl Step {
    /// Every IPI that may carry a TLB flush: shootdowns and function calls
    /// (an upper bound on the flush IPIs).
    pub fn flush_ipis(&self) -> u64 {
        self.tlb.saturating_add(self.cal)
    }

    /// test_vmalloc's `Summary:` lines, every worker's.
    pub fn summaries(&self) -> Vec<Summary> {
        self.log
            .iter()
            .filter_map(|l| summary(message(l)))
            .collect()
    }

    /// test_vmalloc's `All test took workerN=C cycles` lines: (N, C).
    pub fn worker_cycles(&self) -> Vec<(u32, u64)> {
        self.log
            .iter()
            .filter_map(|l| {
                let rest = message(l).strip_prefix("All test took worker")?;
                let (n, c) = rest.split_once('=')?;
                let c = c.strip_suffix(" cycles")?;
                Some((n.parse().ok()?, c.parse().ok()?))
            })
            .collect()
    }

    /// The vm_map_ram loop's result, when the step printed one.
    pub fn map_ram(&self) -> Option<MapRam> {
        self.log.iter().find_map(|l| {
            let rest = message(l).strip_prefix("vm_map_ram_loop: ")?;
            Some(MapRam {
                cpus: number(rest, "cpus")?,
                pages: number(rest, "pages")?,
                iters: number(rest, "iters")?,
                ns_per_op: number(rest, "ns_per_op")?,
                failed: number(rest, "failed")?,
            })
        })
    }
}

/// Parses "Summary: NAME passed: P failed: F repeat: R loops: L avg: U usec".
fn summary(message: &str) -> Option<Summary> {
    let rest = message.strip_prefix("Summary: ")?;
    let w: Vec<&str> = rest.split_whitespace().collect();
    let [test, "passed:", p, "failed:", f, "repeat:", r, "loops:", l, "avg:", u, "usec"] =
        w.as_slice()
    else {
        return None;
    };
    Some(Summary {
        test: test.to_string(),
        passed: p.parse().ok()?,
        failed: f.parse().ok()?,
        repeat: r.parse().ok()?,
        loops: l.parse().ok()?,
        avg_us: u.parse().ok()?,
    })
}

/// Linux's align_shift_alloc_test asks for every alignment up to 2^63 and
/// counts the first refusal as its failure: every run "fails" by design.
const FAILS_BY_DESIGN: &str = "align_shift_alloc_test";

impl Summary {
    /// Every run ended as the test means it to.
    fn ok(&self) -> bool {
        let runs = self.passed.saturating_add(self.failed) == self.repeat;
        runs && (self.failed == 0 || self.test == FAILS_BY_DESIGN)
    }
}

/// test_vmalloc in performance mode (one worker): the time of all runs
/// of each test, ms (`avg` times `repeat`), in the order of `tests`, or
/// `None` when a run failed or a test is missing.
pub fn perf_ms(step: &Step, tests: &[&str]) -> Option<Vec<f64>> {
    let s = step.summaries();
    tests
        .iter()
        .map(|t| {
            let r = s.iter().find(|r| r.test == *t)?;
            r.ok().then(|| r.avg_us as f64 * f64::from(r.repeat) / 1e3)
        })
        .collect()
}

/// test_vmalloc in stress mode: the slowest worker's whole run, ms, from
/// its TSC cycles; `None` when a run failed, a worker is missing or the
/// TSC frequency is unknown.
pub fn stress_ms(step: &Step, workers: usize, tsc_mhz: Option<f64>) -> Option<f64> {
    let mhz = tsc_mhz?;
    if !step.summaries().iter().all(Summary::ok) {
        return None;
    }
    let cycles = step.worker_cycles();
    if cycles.len() != workers {
        return None;
    }
    let max = cycles.iter().map(|c| c.1).max()?;
    Some(max as f64 / mhz / 1e3)
}
