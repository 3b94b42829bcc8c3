//! `mmkit trace import-linux`: the ftrace text of Linux's vmalloc events
//! made into a replay trace (see `mmkit_cli::linux_trace` and
//! `docs/linux-replay.md`).

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use mmkit_cli::linux_trace::judge::{answers, replay};
use mmkit_cli::linux_trace::{import, Imported};

/// The `trace` subcommands.
#[derive(Subcommand)]
pub enum TraceCommand {
    /// Linux's vmalloc events (the text of /sys/kernel/tracing/trace, `-`
    /// for stdin) to an `mmkit replay` trace on stdout.
    ImportLinux {
        /// The ftrace text, or `-` for standard input.
        input: PathBuf,
        /// Also write Linux's answers here, in `mmkit replay`'s output
        /// format, to diff against `mmkit replay --allocator linux`.
        #[arg(long)]
        expected: Option<PathBuf>,
    },
    /// Compare Linux's answers (an imported trace's expected output) with
    /// `--allocator linux`'s: judged one allocation at a time on Linux's
    /// state, and free-running.
    JudgeLinux {
        /// The imported trace.
        trace: PathBuf,
        /// Linux's answers (`import-linux --expected`).
        expected: PathBuf,
    },
}

/// Reads `path` (`-`: stdin) whole and imports it.
fn read(path: &Path) -> io::Result<Result<Imported, String>> {
    let text = if path.as_os_str() == "-" {
        let mut v = Vec::new();
        io::stdin().read_to_end(&mut v)?;
        v
    } else {
        let mut v = Vec::new();
        BufReader::new(File::open(path)?).read_to_end(&mut v)?;
        v
    };
    Ok(import(&text[..]).map_err(|e| e.to_string()))
}

/// Runs a `trace` subcommand. Exit status 2 for an unreadable input or a
/// line with no replay command.
///
/// # Errors
/// Writing to `out` failed.
pub fn main(cmd: &TraceCommand, out: &mut dyn Write) -> io::Result<ExitCode> {
    let (input, expected) = match cmd {
        TraceCommand::ImportLinux { input, expected } => (input, expected),
        TraceCommand::JudgeLinux { trace, expected } => return judge(trace, expected, out),
    };
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("mmkit trace import-linux: {}: {e}", input.display());
        Ok(ExitCode::from(2))
    };
    let t = match read(input) {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return fail(&e),
        Err(e) => return fail(&e),
    };
    if let Some(path) = expected {
        if let Err(e) = std::fs::write(path, &t.expected) {
            eprintln!("mmkit trace import-linux: {}: {e}", path.display());
            return Ok(ExitCode::from(2));
        }
    }
    out.write_all(t.trace().as_bytes())?;
    eprintln!(
        "mmkit trace import-linux: {} events, {} allocations, {} CPUs",
        t.events, t.allocs, t.cpus
    );
    Ok(ExitCode::SUCCESS)
}

/// `judge-linux`: one line for each way of judging, then the first
/// differences.
fn judge(trace: &Path, expected: &Path, out: &mut dyn Write) -> io::Result<ExitCode> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("mmkit trace judge-linux: {e}");
        Ok(ExitCode::from(2))
    };
    let (t, x) = match (
        std::fs::read_to_string(trace),
        std::fs::read_to_string(expected),
    ) {
        (Ok(t), Ok(x)) => (t, x),
        (Err(e), _) | (_, Err(e)) => return fail(&e),
    };
    let linux = match answers(&x) {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    for (judged, how) in [(true, "judged on Linux's state"), (false, "free-running")] {
        let v = match replay(&t, &linux, judged) {
            Ok(v) => v,
            Err(e) => return fail(&e),
        };
        let pct = 100.0 * v.same as f64 / v.allocs.max(1) as f64;
        writeln!(
            out,
            "{how}: {} of {} allocations at Linux's address ({pct:.2}%), {} pool hits, \
             {} shrinker runs inferred, {} pools inferred detached, {} purges run ahead \
             of their event, {} begun inside their window, {} allocations run ahead of \
             their event, {} ahead of a purge step",
            v.same,
            v.allocs,
            v.pool_hits,
            v.shrinks,
            v.detaches,
            v.early_purges,
            v.window_begins,
            v.early_allocs,
            v.step_allocs
        )?;
        for (id, l, o) in &v.differ {
            let show = |a: &Option<u64>| a.map_or("nospace".to_string(), |a| format!("{a:#x}"));
            writeln!(out, "  {id}: Linux {}, model {}", show(l), show(o))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
