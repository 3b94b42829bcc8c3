//! `mmkit`: reruns the experiments that justified the kernel's allocator
//! designs, old against new, and replays allocation traces.

mod bench;
mod experiments;
mod import;
mod plot;
mod render;
mod replay;
mod report;
mod run;
mod soak;
mod stats;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use replay::AllocatorKind;

#[derive(Parser)]
#[command(name = "mmkit", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rerun the seeds' experiments (all of them when no name is given).
    Experiments(experiments::Options),
    /// Replay a trace on a range allocator (`-` reads stdin).
    Replay {
        /// Trace file, or `-` for standard input.
        trace: PathBuf,
        /// Run the invariant checker after every command.
        #[arg(long)]
        check: bool,
        /// Which range allocator replays the trace.
        #[arg(long, value_enum, default_value_t = AllocatorKind::Vmap)]
        allocator: AllocatorKind,
    },
    /// Make traces for `mmkit replay` from other sources.
    #[command(subcommand)]
    Trace(import::TraceCommand),
    /// Compare mmkit's range allocator with peer crates on the same workloads.
    Bench(bench::BenchOptions),
    /// List the experiments and what each reproduces.
    List,
    /// Long mixed run over every allocator, checked against ownership records.
    Soak(soak::SoakOptions),
    /// Build mmkit-kernel and boot it in QEMU (its tests, then its experiments).
    Kernel(experiments::kernel::BootOptions),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::stdout().lock();
    match run(cli.command, &mut out).and_then(|code| out.flush().map(|()| code)) {
        Ok(code) => code,
        // The reader has gone (`mmkit list | head -1`): stop quietly, as a
        // program killed by SIGPIPE would. Handled here, once, for every
        // command.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mmkit: writing the output: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs one command, writing its results to `out`.
fn run(command: Command, out: &mut dyn Write) -> io::Result<ExitCode> {
    match command {
        Command::Experiments(opts) => experiments::run(&opts, out),
        Command::Replay {
            trace,
            check,
            allocator,
        } => replay::main(&trace, check, allocator, out),
        Command::Trace(cmd) => import::main(&cmd, out),
        Command::Bench(opts) => bench::main(&opts, out),
        Command::Soak(opts) => soak::main(&opts, out),
        Command::Kernel(opts) => experiments::kernel::main(&opts, out),
        Command::List => {
            for e in experiments::ALL.iter().chain(experiments::OPT_IN) {
                writeln!(out, "{:<14} {}", e.name, e.about)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
