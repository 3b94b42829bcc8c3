//! The experiment registry: one module per seed, each a fixed workload with
//! fixed parameters that prints the seed's published figures beside what it
//! measures here, baseline against mmkit.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::report::Report;

pub mod buddy;
pub mod percpu;
pub mod vm_map_ram;
pub mod vmalloc;
pub mod vmap_scaling;

#[cfg(target_os = "linux")]
mod real;

/// Declares an experiment on real memory: its module on Linux; elsewhere
/// (mmkit-vm is Linux-only) a stand-in that says it is unsupported.
macro_rules! real_memory {
    ($module:ident, $name:literal) => {
        #[cfg(target_os = "linux")]
        pub mod $module;
        #[cfg(not(target_os = "linux"))]
        pub mod $module {
            /// The registry entry: unsupported here.
            pub const EXPERIMENT: super::Experiment = super::Experiment {
                name: $name,
                about: "on real memory: Linux only, unsupported on this system",
                run: |_| super::unsupported($name),
            };
        }
    };
}

real_memory!(vmalloc_real, "vmalloc-real");
real_memory!(vmap_scaling_real, "vmap_scaling_real");
real_memory!(vm_buffers, "vm_buffers");

/// The report of an experiment that cannot run on this system.
#[cfg_attr(target_os = "linux", allow(dead_code))]
fn unsupported(name: &str) -> Report {
    Report {
        name: name.into(),
        notes: vec![format!(
            "{name}: unsupported on this system (mmkit-vm runs on Linux only)"
        )],
        ..Report::default()
    }
}

/// `mmkit experiments` options, shared by every experiment.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Options {
    /// Experiments to run (`mmkit list` names them); none runs them all.
    pub names: Vec<String>,
    /// A tiny scale for CI smoke runs: seconds, not minutes.
    #[arg(long)]
    pub quick: bool,
    /// Scale the main loop count, 1 to 10^9 (each experiment documents its
    /// default).
    #[arg(long, value_parser = count())]
    pub loops: Option<u64>,
    /// Number of random seeds for experiments that average over seeds, 1 to
    /// 10^9.
    #[arg(long, value_parser = count())]
    pub seeds: Option<u64>,
    /// Write every report's machine-readable rows to this JSON file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a Markdown report (and SVG plots) into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Parses `--loops` and `--seeds`: 0 would average over nothing (a table
/// of NaN) and the bound keeps every derived count from overflowing; clap
/// refuses anything outside with exit 2.
fn count() -> clap::builder::RangedU64ValueParser<u64> {
    clap::builder::RangedU64ValueParser::new().range(1..=1_000_000_000)
}

/// One registered experiment.
pub struct Experiment {
    /// Short name used on the command line.
    pub name: &'static str,
    /// One line: what it stresses and which seed it reproduces.
    pub about: &'static str,
    /// Runs it and returns its tables.
    pub run: fn(&Options) -> Report,
}

/// Every experiment, in the order `mmkit experiments` runs them.
pub const ALL: &[Experiment] = &[
    vmalloc::EXPERIMENT,
    vm_map_ram::EXPERIMENT,
    vmap_scaling::EXPERIMENT,
    vmalloc_real::EXPERIMENT,
    vmap_scaling_real::EXPERIMENT,
    vm_buffers::EXPERIMENT,
    percpu::EXPERIMENT,
    buddy::EXPERIMENT,
];

/// Runs the experiments named in `opts` (all when none) and prints them.
///
/// # Errors
/// Writing to `out` failed.
pub fn run(opts: &Options, out: &mut dyn Write) -> io::Result<ExitCode> {
    let chosen: Vec<&Experiment> = if opts.names.is_empty() {
        ALL.iter().collect()
    } else {
        let mut v = Vec::new();
        for n in &opts.names {
            match ALL.iter().find(|e| e.name == n) {
                Some(e) => v.push(e),
                None => {
                    let known: Vec<_> = ALL.iter().map(|e| e.name).collect();
                    eprintln!(
                        "mmkit: unknown experiment {n:?}; known: {}",
                        known.join(", ")
                    );
                    return Ok(ExitCode::from(2));
                }
            }
        }
        v
    };
    writeln!(out, "# machine: {}", machine())?;
    let mut reports = Vec::new();
    for e in chosen {
        let report = (e.run)(opts);
        writeln!(out, "\n== {} ({}) ==", e.name, e.about)?;
        for t in &report.tables {
            writeln!(out, "\n{t}")?;
        }
        for n in &report.notes {
            writeln!(out, "  * {n}")?;
        }
        reports.push(report);
    }
    if let Err(err) = write_outputs(opts, &reports) {
        eprintln!("mmkit: {err}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn write_outputs(opts: &Options, reports: &[Report]) -> std::io::Result<()> {
    if let Some(path) = &opts.json {
        let doc = serde_json::json!({ "machine": machine(), "reports": reports });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
    }
    if let Some(dir) = &opts.out {
        std::fs::create_dir_all(dir)?;
        let mut md = format!("# mmkit experiments\n\nMachine: {}\n\n", machine());
        for r in reports {
            md.push_str(&r.markdown());
            md.push('\n');
            for (file, svg) in &r.plots {
                std::fs::write(dir.join(file), svg)?;
            }
        }
        std::fs::write(dir.join("REPORT.md"), md)?;
    }
    Ok(())
}

/// A one-line description of this machine, recorded beside every result.
pub fn machine() -> String {
    let cpus = cpus();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    format!("{cpus} CPUs, {model}")
}

/// Number of CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Milliseconds of a duration, as f64.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
