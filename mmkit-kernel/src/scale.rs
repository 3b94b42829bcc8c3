//! The sizes of a run. The kernel owns its named scales (`scale=quick`,
//! `scale=default`, `scale=full` on the command line); single sizes can be
//! set over a scale with `key=value` words, and `tests-only` skips the
//! experiments. The boot prints what it runs on a `SCALE` line.

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
    /// The word `profile`: per-phase cycle counters on (`ROW phases`).
    pub profile: bool,
    /// `sample=N`: seed 002's loops and the performance step sampled
    /// every N ns (see
    /// [`crate::sample`]); 0, off, when unset.
    pub sample: u64,
    /// The word `no-old`: the busy-list designs are left out (at Linux's
    /// stock sizes they would take hours under emulation).
    pub no_old: bool,
    /// `steps=NAME,...`: the experiments run (a bit per name of
    /// [`STEPS`]); every one when unset.
    pub steps: u8,
}

/// The experiments' names for `steps=`, in the order they run.
pub const STEPS: [&str; 5] = ["ipi", "seed002", "performance", "stress", "buddy"];

/// `steps=`'s mask of the names in `list` (comma-separated; unknown
/// names are ignored).
fn steps_mask(list: &str) -> u8 {
    list.split(',')
        .filter_map(|n| STEPS.iter().position(|s| *s == n))
        .fold(0, |m, i| m | 1 << i)
}

impl Scale {
    /// CI's scale: seconds per boot.
    pub const QUICK: Scale = Scale {
        seed_iters: 200,
        seed_old_iters: 20,
        loops: 20,
        busy: 100,
        full_fit: 64,
        stress_loops: 4,
        stress_busy: 16,
        stress_full_fit: 8,
        buddy_pairs: 6400,
        cycles: 100_000,
        stale_cycles: 0,
        tests_only: false,
        sample: 0,
        profile: false,
        no_old: false,
        steps: u8::MAX,
    };

    /// The main job's scale (`mmkit experiments`): its boots fit its
    /// budget of minutes on a 2-core machine.
    pub const DEFAULT: Scale = Scale {
        seed_iters: 1000,
        seed_old_iters: 50,
        loops: 50,
        busy: 500,
        full_fit: 128,
        stress_loops: 16,
        stress_busy: 32,
        stress_full_fit: 8,
        buddy_pairs: 12_800,
        cycles: 100_000,
        stale_cycles: 0,
        tests_only: false,
        sample: 0,
        profile: false,
        no_old: false,
        steps: u8::MAX,
    };

    /// The full scale (`mmkit experiments --full`).
    pub const FULL: Scale = Scale {
        seed_iters: 2000,
        seed_old_iters: 100,
        loops: 100,
        busy: 1000,
        full_fit: 256,
        stress_loops: 50,
        stress_busy: 50,
        stress_full_fit: 16,
        buddy_pairs: 20_000,
        cycles: 100_000,
        stale_cycles: 0,
        tests_only: false,
        sample: 0,
        profile: false,
        no_old: false,
        steps: u8::MAX,
    };

    /// The stress mode's per-CPU sizes at `cpus` CPUs.
    pub fn stress(self, cpus: usize) -> Scale {
        let c = cpus.max(2) as u64;
        let f = |v: u64| (v * 4 / (c * c)).max(1);
        Scale {
            loops: f(self.stress_loops),
            busy: f(self.stress_busy),
            full_fit: f(self.stress_full_fit),
            ..self
        }
    }

    /// Whether the experiment `STEPS[i]` runs.
    pub fn runs_step(self, i: usize) -> bool {
        self.steps & 1 << i != 0
    }

    /// The detector's cycles at the CPUs online: `stale_cycles` when set,
    /// `cycles` scaled otherwise.
    pub fn detector_cycles(self) -> u64 {
        if self.stale_cycles > 0 {
            self.stale_cycles
        } else {
            per_cpu_share(self.cycles)
        }
    }

    /// The scale named `name`.
    pub fn named(name: &str) -> Option<Scale> {
        match name {
            "quick" => Some(Scale::QUICK),
            "default" => Some(Scale::DEFAULT),
            "full" => Some(Scale::FULL),
            _ => None,
        }
    }

    /// Reads the command line: `scale=NAME` picks the scale (the default
    /// when absent or unknown), `key=value` words set single sizes over
    /// it, `tests-only` skips the experiments.
    pub fn parse(cmdline: &str) -> Scale {
        let words = || cmdline.split_ascii_whitespace();
        let mut s = words()
            .find_map(|w| w.strip_prefix("scale="))
            .and_then(Scale::named)
            .unwrap_or(Scale::DEFAULT);
        for w in words() {
            if w == "tests-only" {
                s.tests_only = true;
            }
            if w == "profile" {
                s.profile = true;
            }
            if w == "no-old" {
                s.no_old = true;
            }
            if let Some(list) = w.strip_prefix("steps=") {
                s.steps = steps_mask(list);
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
                "sample" => s.sample = v,
                _ => {}
            }
        }
        s
    }
}

/// `n` scaled by 2 / CPUs above 2 CPUs (at least a tenth of `n`): each
/// cycle of a cross-CPU test waits for every other CPU.
pub fn per_cpu_share(n: u64) -> u64 {
    let cpus = crate::percpu::online().max(2) as u64;
    (n * 2 / cpus).max(n / 10).max(1)
}
