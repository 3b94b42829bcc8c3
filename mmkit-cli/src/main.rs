//! `mmkit`: reruns the experiments that justified the kernel's allocator
//! designs, old against new, and replays allocation traces.

mod experiments;
mod peers;
mod replay;
mod report;
mod soak;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

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
    /// Compare mmkit's range allocator with peer crates on the same workloads.
    Bench(peers::BenchOptions),
    /// List the experiments and what each reproduces.
    List,
    /// Long mixed run over every allocator, checked against ownership records.
    Soak(soak::SoakOptions),
}

/// The range allocators a trace can be replayed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AllocatorKind {
    /// mmkit's augmented-tree allocator (seed 000).
    Vmap,
    /// The busy-list design seed 000 replaced.
    Baseline,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Experiments(opts) => experiments::run(&opts),
        Command::Replay {
            trace,
            check,
            allocator,
        } => replay::main(&trace, check, allocator),
        Command::Bench(opts) => peers::main(&opts),
        Command::Soak(opts) => soak::main(&opts),
        Command::List => {
            for e in experiments::ALL {
                println!("{:<14} {}", e.name, e.about);
            }
            ExitCode::SUCCESS
        }
    }
}
