//! `mmkit replay TRACE`: drives a range allocator from a text trace (the
//! format of `docs/trace-format.md`).
//!
//! ```text
//! lazymax BYTES                 optional, before or after space
//! space START END               the managed space [START, END); first command
//! alloc ID SIZE [align A] [range VSTART VEND]
//! free ID                       free what ID's last successful alloc returned
//! lazy ID                       the same, lazily
//! freeat ADDR                   free a raw address
//! purge
//! ```
//!
//! `#` starts a comment; numbers are decimal or `0x` hex. Stdout gets one
//! line per `alloc` (`ID 0xaddr`, `ID invalid`, `ID nospace`) and one per
//! failed free (`ID notallocated`, `0xADDR notallocated`), nothing else; the
//! summary goes to stderr.
//!
//! The trace is streamed, never held: a first pass reads it line by line
//! and checks every line, so a malformed one (exit status 2) produces no
//! partial output; a second pass reads it again and replays each command as
//! it is read. Standard input cannot be read twice, so it alone is held in
//! memory (once, as bytes).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Cursor, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::rc::Rc;

use mmkit::baseline::linear_vmap::LinearVmap;
use mmkit::nodes::{LinuxNodes, PurgeStep};
use mmkit::range::RangeAllocator;
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, CheckError, FreeError};
use mmkit_cli::trace::{check_header, Cmd, Commands, ParseError};

/// The range allocators a trace can be replayed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AllocatorKind {
    /// mmkit's augmented-tree allocator (seed 000).
    Vmap,
    /// The busy-list design seed 000 replaced.
    Baseline,
    /// Linux 6.12's choices: its free tree in Linux's shape behind its
    /// vmap node pools (one node a CPU of the trace's `cpus`).
    Linux,
}

/// What a replay asks of an allocator beyond [`RangeAllocator`]: the
/// CPU of a Linux trace's request and Linux's full purge. One range
/// allocator ignores the CPU and purges as usual.
pub trait Replayed: RangeAllocator {
    /// The CPU that makes the next request.
    fn set_cpu(&mut self, _cpu: u32) {}
    /// `purge full`: Linux's purge when an allocation fails.
    fn purge_full(&mut self) {
        self.purge(&mut |_, _| {});
    }
    /// `purge begin`: where a Linux purge began; one range allocator
    /// purges at its end alone.
    fn purge_begin(&mut self, _full: bool) {}
    /// `purge node N`: only Linux's node pools act on it.
    fn purge_node(&mut self, _node: usize) {}
    /// A step of a Linux purge's decay and take: only Linux's node pools
    /// act on it.
    fn purge_step(&mut self, _step: PurgeStep) {}
}

impl Replayed for VmapAllocator {}
impl Replayed for LinearVmap {}

impl Replayed for LinuxNodes {
    fn set_cpu(&mut self, cpu: u32) {
        LinuxNodes::set_cpu(self, cpu as usize);
    }
    fn purge_full(&mut self) {
        if self.purge_pending() {
            self.purge_end();
        } else {
            self.purge_nodes(true);
        }
    }
    fn purge_begin(&mut self, full: bool) {
        LinuxNodes::purge_begin(self, full);
    }
    fn purge_node(&mut self, node: usize) {
        LinuxNodes::purge_node(self, node);
    }
    fn purge_step(&mut self, step: PurgeStep) {
        LinuxNodes::purge_step(self, step);
    }
}

/// Totals printed to stderr after a replay.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Commands replayed (every line but `space`, comments and blanks).
    pub commands: u64,
    /// Successful allocations.
    pub allocs: u64,
    /// `invalid` answers.
    pub invalid: u64,
    /// `nospace` answers.
    pub nospace: u64,
    /// Successful frees (eager and lazy).
    pub frees: u64,
    /// `notallocated` answers.
    pub notallocated: u64,
}

/// Why a replay stopped early.
#[derive(Debug)]
pub enum RunError {
    /// `--check` found a violated invariant after the command on `line`.
    Check {
        /// 1-based line of the command after which the check failed.
        line: usize,
        /// The violation.
        err: CheckError,
    },
    /// Writing the output failed.
    Io(io::Error),
    /// A line read in the replay pass is malformed (the trace changed
    /// since the checking pass).
    Parse(ParseError),
}

impl From<io::Error> for RunError {
    fn from(e: io::Error) -> Self {
        RunError::Io(e)
    }
}

/// Replays `cmds` on `a` (built over the trace's space) as they are read,
/// writing the answer lines to `out`. With `check`, runs `a.check()` after
/// every command.
///
/// # Errors
/// The first invariant violation (with `check`), an output error, or a
/// malformed line.
pub fn run<R: Replayed>(
    a: &mut R,
    cmds: impl Iterator<Item = Result<(usize, Cmd), ParseError>>,
    check: bool,
    out: &mut dyn Write,
) -> Result<Summary, RunError> {
    let verify = |a: &R, line| match check {
        true => a.check().map_err(|err| RunError::Check { line, err }),
        false => Ok(()),
    };
    verify(a, 0)?;
    let mut sum = Summary::default();
    let mut ids: HashMap<String, u64> = HashMap::new();
    for item in cmds {
        let (line, cmd) = item.map_err(RunError::Parse)?;
        match cmd {
            // The allocator was built over it; one range allocator has no
            // vmap nodes.
            Cmd::Space(..) | Cmd::Cpus(_) | Cmd::Vmalloc(..) => continue,
            Cmd::LazyMax(b) => a.set_lazy_max(b),
            Cmd::Purge => {
                a.purge(&mut |_, _| {});
            }
            Cmd::PurgeFull => a.purge_full(),
            Cmd::PurgeBegin(full) => a.purge_begin(full),
            Cmd::PurgeNode(node) => a.purge_node(node),
            Cmd::PurgeStep(step) => a.purge_step(step),
            // Where a begin may lie: for a judge of Linux's answers.
            Cmd::PurgeWindow(_) => {}
            Cmd::Alloc {
                id,
                size,
                align,
                range,
                cpu,
            } => {
                a.set_cpu(cpu.unwrap_or(0));
                alloc(a, &mut sum, &mut ids, (id, size, align, range), out)?
            }
            Cmd::Free(ref id) | Cmd::Lazy(ref id) => {
                let lazy = matches!(cmd, Cmd::Lazy(_));
                let r = match ids.get(id) {
                    Some(&addr) if lazy => a.free_lazy(addr),
                    Some(&addr) => a.free(addr),
                    None => Err(FreeError::NotAllocated),
                };
                count_free(&mut sum, r.is_ok());
                if r.is_err() {
                    writeln!(out, "{id} notallocated")?;
                }
            }
            Cmd::FreeAt(addr) => {
                let ok = a.free(addr).is_ok();
                count_free(&mut sum, ok);
                if !ok {
                    writeln!(out, "{addr:#x} notallocated")?;
                }
            }
        }
        sum.commands += 1;
        verify(a, line)?;
    }
    Ok(sum)
}

/// An `alloc` command: (id, size, align, range).
type AllocCmd = (String, u64, u64, Option<(u64, u64)>);

/// Replays one `alloc`, printing its answer line.
fn alloc<R: Replayed>(
    a: &mut R,
    sum: &mut Summary,
    ids: &mut HashMap<String, u64>,
    (id, size, align, range): AllocCmd,
    out: &mut dyn Write,
) -> io::Result<()> {
    let (lo, hi) = range.unwrap_or(a.space());
    match a.alloc_in(size, align, lo, hi) {
        Ok(addr) => {
            sum.allocs += 1;
            writeln!(out, "{id} {addr:#x}")?;
            ids.insert(id, addr);
        }
        Err(AllocError::Invalid) => {
            sum.invalid += 1;
            writeln!(out, "{id} invalid")?;
        }
        Err(_) => {
            sum.nospace += 1;
            writeln!(out, "{id} nospace")?;
        }
    }
    Ok(())
}

fn count_free(sum: &mut Summary, ok: bool) {
    match ok {
        true => sum.frees += 1,
        false => sum.notallocated += 1,
    }
}

/// The trace, readable twice: a file is opened twice and streamed;
/// standard input cannot be read again, so it is held once in memory.
fn open_twice(path: &Path) -> io::Result<[Box<dyn BufRead>; 2]> {
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        io::stdin().read_to_end(&mut bytes)?;
        let bytes: Rc<[u8]> = bytes.into();
        return Ok([
            Box::new(Cursor::new(Rc::clone(&bytes))),
            Box::new(Cursor::new(bytes)),
        ]);
    }
    let open = || File::open(path).map(BufReader::new);
    Ok([Box::new(open()?), Box::new(open()?)])
}

/// Replays `cmds` on `a` as they are read; prints the summary.
fn replay_on<R: Replayed>(
    mut a: R,
    name: &str,
    cmds: Commands<impl BufRead>,
    check: bool,
    out: &mut dyn Write,
) -> io::Result<ExitCode> {
    let mut out = BufWriter::new(out);
    let result = run(&mut a, cmds, check, &mut out);
    out.flush()?;
    match result {
        Ok(sum) => {
            let s = a.stats();
            eprintln!(
                "mmkit replay: {} commands on {name}{}: {} allocs ({} invalid, {} nospace), \
                 {} frees ({} notallocated); {} purges, {} flushes; now {} live areas ({} bytes), \
                 {} lazy ({} bytes), {} free blocks, largest {:#x}",
                sum.commands,
                if check { " (checked)" } else { "" },
                sum.allocs,
                sum.invalid,
                sum.nospace,
                sum.frees,
                sum.notallocated,
                s.purges,
                s.flushes,
                s.live_areas,
                s.live_bytes,
                s.lazy_areas,
                s.lazy_bytes,
                s.free_blocks,
                s.largest_free,
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(RunError::Check { line, err }) => {
            eprintln!("mmkit replay: CHECK FAILED on {name} after line {line}: {err}");
            Ok(ExitCode::from(1))
        }
        Err(RunError::Parse(e)) => {
            eprintln!("mmkit replay: {e}");
            Ok(ExitCode::from(2))
        }
        Err(RunError::Io(e)) => Err(e),
    }
}

/// Replays `trace` and prints one line per alloc and per failed free to
/// `out`. Exit status: 0 done, 1 check failure, 2 unreadable or malformed
/// trace.
///
/// # Errors
/// Writing to `out` failed.
pub fn main(
    trace: &Path,
    check: bool,
    allocator: AllocatorKind,
    out: &mut dyn Write,
) -> io::Result<ExitCode> {
    let refuse = |e: &dyn fmt::Display| {
        eprintln!("mmkit replay: {}: {e}", trace.display());
        Ok(ExitCode::from(2))
    };
    let [first, second] = match open_twice(trace) {
        Ok(readers) => readers,
        Err(e) => return refuse(&e),
    };
    let header = match check_header(first) {
        Ok(h) => h,
        Err(e) => return refuse(&e),
    };
    let (s, e) = header.space;
    let cmds = Commands::new(second);
    // The checking pass guarantees s < e, the only way `new` can fail.
    match allocator {
        AllocatorKind::Vmap => match VmapAllocator::new(s, e) {
            Ok(a) => replay_on(a, "vmap", cmds, check, out),
            Err(err) => Ok(bad_space(err)),
        },
        AllocatorKind::Baseline => match LinearVmap::new(s, e) {
            Ok(a) => replay_on(a, "baseline", cmds, check, out),
            Err(err) => Ok(bad_space(err)),
        },
        AllocatorKind::Linux => {
            let cpus = header.cpus.unwrap_or(1).min(128) as usize;
            match LinuxNodes::new(s, e, cpus, header.vmalloc.unwrap_or((s, e))) {
                Ok(a) => replay_on(a, "linux", cmds, check, out),
                Err(err) => Ok(bad_space(err)),
            }
        }
    }
}

fn bad_space(err: AllocError) -> ExitCode {
    eprintln!("mmkit replay: space refused: {err}");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<(usize, Cmd)>, ParseError> {
        Commands::new(text.as_bytes()).collect()
    }

    /// The replay pass runs each command as it is read, so its
    /// memory does not grow with the trace: the first answer is written
    /// when only the first line of a long trace has been read.
    #[test]
    fn run_streams_the_trace() {
        struct Counted<'a>(&'a [u8], Rc<std::cell::Cell<usize>>);
        impl Read for Counted<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                // One byte at a time: the count is exactly what was consumed.
                let n = self.0.len().min(buf.len()).min(1);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                self.1.set(self.1.get() + n);
                Ok(n)
            }
        }
        struct FirstLine(Rc<std::cell::Cell<usize>>, Option<usize>);
        impl Write for FirstLine {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.1.get_or_insert(self.0.get());
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let text = format!("space 0 0x100000\n{}", "alloc a 1\nfree a\n".repeat(10_000));
        let consumed = Rc::new(std::cell::Cell::new(0));
        let src = BufReader::with_capacity(1, Counted(text.as_bytes(), Rc::clone(&consumed)));
        let mut out = FirstLine(Rc::clone(&consumed), None);
        let mut a = VmapAllocator::new(0, 0x100000).unwrap();
        let sum = run(&mut a, Commands::new(src), false, &mut out).unwrap();
        assert_eq!(sum.commands, 20_000);
        assert_eq!(out.1, Some("space 0 0x100000\nalloc a 1\n".len()));
        assert_eq!(consumed.get(), text.len());
    }

    #[test]
    fn run_prints_one_line_per_alloc_and_failed_free() {
        let t = parse(
            "space 0x1000 0x3000\nalloc a 0x1000\nalloc b 0\nalloc c 0x2000\nfree a\n\
             free a\nlazy zz\nfreeat 0x1001\nalloc d 0x800 align 0x800 range 0 0x1800\n",
        )
        .unwrap();
        let mut out = Vec::new();
        let mut a = LinearVmap::new(0x1000, 0x3000).unwrap();
        let sum = run(&mut a, t.into_iter().map(Ok), true, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a 0x1000\nb invalid\nc nospace\na notallocated\nzz notallocated\n\
             0x1001 notallocated\nd 0x1000\n"
        );
        assert_eq!(sum.commands, 8);
        assert_eq!(
            (
                sum.allocs,
                sum.invalid,
                sum.nospace,
                sum.frees,
                sum.notallocated
            ),
            (2, 1, 1, 1, 3)
        );
    }

    /// A LinearVmap whose checker reports a violation once anything is
    /// allocated: `run` must stop at that command and name its line.
    struct Broken(LinearVmap);

    impl Replayed for Broken {}

    impl RangeAllocator for Broken {
        fn space(&self) -> (u64, u64) {
            self.0.space()
        }
        fn alloc_in(&mut self, s: u64, a: u64, lo: u64, hi: u64) -> Result<u64, AllocError> {
            self.0.alloc_in(s, a, lo, hi)
        }
        fn free(&mut self, addr: u64) -> Result<u64, FreeError> {
            self.0.free(addr)
        }
        fn free_lazy(&mut self, addr: u64) -> Result<u64, FreeError> {
            self.0.free_lazy(addr)
        }
        fn purge(&mut self, f: &mut dyn FnMut(u64, u64)) -> bool {
            self.0.purge(f)
        }
        fn set_lazy_max(&mut self, b: u64) {
            self.0.set_lazy_max(b)
        }
        fn set_flush_hook(&mut self, h: Option<mmkit::range::FlushHook>) {
            self.0.set_flush_hook(h)
        }
        fn stats(&self) -> mmkit::range::RangeStats {
            self.0.stats()
        }
        fn check(&self) -> Result<(), CheckError> {
            match self.0.stats().live_areas {
                0 => Ok(()),
                _ => Err(CheckError::new(
                    "test",
                    mmkit::error::Invariant::Accounting,
                    None,
                    "planted",
                )),
            }
        }
    }

    #[test]
    fn check_failure_stops_at_the_command() {
        let t = parse(
            "space 0 0x100
alloc a 1 align 0
\nalloc b 1
alloc c 1
",
        )
        .unwrap();
        let mut out = Vec::new();
        let mut a = Broken(LinearVmap::new(0, 0x100).unwrap());
        match run(&mut a, t.clone().into_iter().map(Ok), true, &mut out) {
            Err(RunError::Check { line, err }) => {
                assert_eq!((line, err.detail()), (4, "planted"))
            }
            other => panic!("expected a check failure, got {other:?}"),
        }
        assert_eq!(String::from_utf8(out).unwrap(), "a invalid\nb 0x0\n");
        // Without --check the same trace runs to the end.
        let mut a = Broken(LinearVmap::new(0, 0x100).unwrap());
        assert!(run(&mut a, t.into_iter().map(Ok), false, &mut Vec::new()).is_ok());
    }
}
