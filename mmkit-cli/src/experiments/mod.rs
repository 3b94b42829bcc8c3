//! The experiment registry: one module per seed, each a fixed workload with
//! fixed parameters that prints the seed's published figures beside what it
//! measures here, baseline against mmkit.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::render::Report;
use crate::report::{Outputs, Page};
use crate::run::{lookup, Machine};

pub mod buddy;
pub mod exactness;
pub mod kernel;
pub mod percpu;
pub mod vm_map_ram;
pub mod vmalloc;
mod vmalloc_nodes;
pub mod vmap_nodes;
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
    let mut r = Report::new(name);
    r.notes.push(format!(
        "{name}: unsupported on this system (mmkit-vm runs on Linux only)"
    ));
    r
}

/// `mmkit experiments` options, shared by every experiment.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Options {
    /// Experiments to run (`mmkit list` names them); none runs them all.
    pub names: Vec<String>,
    /// A tiny scale for CI smoke runs: seconds, not minutes.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// The full scale: the seeds' sizes and every vCPU count (tens of
    /// minutes); the default is a smaller scale that answers in minutes.
    #[arg(long)]
    pub full: bool,
    /// Scale the main loop count, 1 to 10^9 (each experiment documents its
    /// default).
    #[arg(long, value_parser = count())]
    pub loops: Option<u64>,
    /// Number of random seeds for experiments that average over seeds, 1 to
    /// 10^9.
    #[arg(long, value_parser = count())]
    pub seeds: Option<u64>,
    /// Write every report's rows, targets and notes to this JSON file
    /// (opened before the run).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a report into this directory: index.md, index.html and SVG
    /// plots (created before the run).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Exit with status 1 when a target is NOT met.
    #[arg(long)]
    pub strict: bool,
}

impl Options {
    /// The value for this run's scale: `--quick`, the default (the main
    /// job's minutes on a 2-core machine) or `--full` (the seeds' sizes).
    pub fn pick<T>(&self, quick: T, default: T, full: T) -> T {
        if self.quick {
            quick
        } else if self.full {
            full
        } else {
            default
        }
    }
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
    /// Runs it and returns its tables, targets, notes and plots.
    pub run: fn(&Options) -> Report,
}

/// Every experiment, in the order `mmkit experiments` runs them.
pub const ALL: &[Experiment] = &[
    vmalloc::EXPERIMENT,
    vm_map_ram::EXPERIMENT,
    vmap_scaling::EXPERIMENT,
    vmap_nodes::EXPERIMENT,
    exactness::EXPERIMENT,
    vmalloc_real::EXPERIMENT,
    vmap_scaling_real::EXPERIMENT,
    vm_buffers::EXPERIMENT,
    percpu::EXPERIMENT,
    buddy::EXPERIMENT,
    kernel::EXPERIMENT,
];

/// The experiments named in `opts`, all when none.
fn chosen(opts: &Options) -> Result<Vec<&'static Experiment>, String> {
    if opts.names.is_empty() {
        return Ok(ALL.iter().collect());
    }
    opts.names
        .iter()
        .map(|n| lookup("experiment", n, ALL, |e| e.name))
        .collect()
}

/// The command line, as the report records it.
fn command(opts: &Options) -> String {
    let mut c = vec!["mmkit experiments".to_string()];
    c.extend(opts.names.iter().cloned());
    c.extend(opts.quick.then(|| "--quick".to_string()));
    c.extend(opts.full.then(|| "--full".to_string()));
    c.extend(opts.loops.map(|l| format!("--loops {l}")));
    c.extend(opts.seeds.map(|s| format!("--seeds {s}")));
    c.extend(opts.out.as_ref().map(|d| format!("--out {}", d.display())));
    c.join(" ")
}

/// Runs the experiments named in `opts` (all when none), prints them and
/// writes the JSON and the report directory. Exit status: 2 for an
/// unknown name or an output path that cannot be written (before anything
/// runs), 1 when writing fails at the end or, with `--strict`, when a
/// target is NOT met.
///
/// # Errors
/// Writing to `out` failed.
pub fn run(opts: &Options, out: &mut dyn Write) -> io::Result<ExitCode> {
    let opened = chosen(opts)
        .and_then(|c| Ok((c, Outputs::open(opts.json.as_deref(), opts.out.as_deref())?)));
    let (chosen, mut outputs) = match opened {
        Ok(x) => x,
        Err(e) => {
            eprintln!("mmkit: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let machine = Machine::here();
    writeln!(out, "# machine: {machine}")?;
    let mut reports = Vec::new();
    // Progress on stderr: on a terminal each experiment's bar under a line
    // naming it; elsewhere (a log, CI) one line per finished experiment.
    let terminal = io::stderr().is_terminal();
    let n = chosen.len();
    for (i, e) in chosen.into_iter().enumerate() {
        if terminal {
            eprintln!("[{}/{n}] {} ...", i + 1, e.name);
        }
        let t0 = Instant::now();
        let report = (e.run)(opts);
        let verdicts = report.targets.iter().filter(|t| t.met.is_some()).count();
        eprintln!(
            "[{}/{n}] {} done in {:.1} s, {verdicts} verdicts",
            i + 1,
            e.name,
            t0.elapsed().as_secs_f64()
        );
        let head = format!("== {} ({}) ==", e.name, e.about);
        match head.chars().count() <= crate::render::MAX_WIDTH {
            true => writeln!(out, "\n{head}")?,
            false => writeln!(out, "\n== {} ==\n{}", e.name, e.about)?,
        }
        write!(out, "{}", report.terminal())?;
        out.flush()?;
        reports.push((report, e.about));
    }
    let targets: Vec<_> = reports.iter().flat_map(|(r, _)| &r.targets).collect();
    let missed = targets.iter().filter(|t| t.met == Some(false)).count();
    let met = targets.iter().filter(|t| t.met == Some(true)).count();
    writeln!(
        out,
        "\n# targets: {met} met, {missed} NOT met, {} not evaluated",
        targets.len() - met - missed
    )?;
    let page = Page {
        machine: &machine,
        command: command(opts),
        reports: reports.iter().map(|(r, a)| (r, *a)).collect(),
        provenance: opts.out.as_deref().and_then(crate::report::provenance_link),
    };
    let doc = serde_json::json!({ "machine": machine, "command": page.command, "reports": page.reports.iter().map(|p| p.0).collect::<Vec<_>>() });
    if let Err(e) = outputs
        .write_json(&doc)
        .and_then(|()| outputs.write_dir(&page))
    {
        eprintln!("mmkit: {e}");
        return Ok(ExitCode::from(1));
    }
    if opts.strict && missed > 0 {
        eprintln!("mmkit: {missed} target(s) NOT met (--strict)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
