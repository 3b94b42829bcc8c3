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
use mmkit::range::RangeAllocator;
use mmkit::vmap::VmapAllocator;
use mmkit::{AllocError, CheckError, FreeError};

/// The range allocators a trace can be replayed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AllocatorKind {
    /// mmkit's augmented-tree allocator (seed 000).
    Vmap,
    /// The busy-list design seed 000 replaced.
    Baseline,
}

/// One trace command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// `space START END`: the managed space, `START < END`.
    Space(u64, u64),
    /// `lazymax BYTES`.
    LazyMax(u64),
    /// `alloc ID SIZE [align A] [range VSTART VEND]`; align defaults to 1,
    /// the range to the whole space.
    Alloc {
        /// The name later `free`/`lazy` lines use.
        id: String,
        /// Bytes.
        size: u64,
        /// Alignment (validated by the allocator, not the parser).
        align: u64,
        /// The window `[vstart, vend)`.
        range: Option<(u64, u64)>,
    },
    /// `free ID`.
    Free(String),
    /// `lazy ID`.
    Lazy(String),
    /// `freeat ADDR`.
    FreeAt(u64),
    /// `purge`.
    Purge,
}

impl Cmd {
    /// The command's first word in the trace.
    fn keyword(&self) -> &'static str {
        match self {
            Cmd::Space(..) => "space",
            Cmd::LazyMax(_) => "lazymax",
            Cmd::Alloc { .. } => "alloc",
            Cmd::Free(_) => "free",
            Cmd::Lazy(_) => "lazy",
            Cmd::FreeAt(_) => "freeat",
            Cmd::Purge => "purge",
        }
    }
}

/// A malformed trace: the line (1-based) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

const USAGE: &str = "`alloc ID SIZE [align A] [range VSTART VEND]`";

/// Parses a number: decimal, or hex with a `0x` prefix.
fn number(tok: &str) -> Result<u64, String> {
    let parsed = match tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16)
        }
        None if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_digit()) => tok.parse(),
        _ => return Err(format!("{tok:?} is not a number (decimal or 0x hex)")),
    };
    parsed.map_err(|_| format!("{tok:?} does not fit in 64 bits"))
}

/// Exactly `n` operands after the keyword.
fn operands<'a>(words: &[&'a str], n: usize, usage: &str) -> Result<Vec<&'a str>, String> {
    if words.len() != n + 1 {
        return Err(format!(
            "expected {usage}, got {} operand(s)",
            words.len() - 1
        ));
    }
    Ok(words[1..].to_vec())
}

fn parse_alloc(words: &[&str]) -> Result<Cmd, String> {
    let (id, size) = match words {
        [_, id, size, ..] => (id.to_string(), number(size)?),
        _ => return Err(format!("expected {USAGE}")),
    };
    let (mut align, mut range) = (None, None);
    let mut rest = &words[3..];
    while let Some((&key, tail)) = rest.split_first() {
        match (key, tail) {
            ("align", [a, ..]) if align.is_none() => {
                align = Some(number(a)?);
                rest = &tail[1..];
            }
            ("range", [s, e, ..]) if range.is_none() => {
                range = Some((number(s)?, number(e)?));
                rest = &tail[2..];
            }
            _ => return Err(format!("unexpected {key:?}; expected {USAGE}")),
        }
    }
    let align = align.unwrap_or(1);
    Ok(Cmd::Alloc {
        id,
        size,
        align,
        range,
    })
}

/// One non-empty line, comment stripped, split into words.
fn parse_line(words: &[&str]) -> Result<Cmd, String> {
    match words[0] {
        "space" => {
            let ops = operands(words, 2, "`space START END`")?;
            let (s, e) = (number(ops[0])?, number(ops[1])?);
            if s >= e {
                return Err(format!("space [{s:#x}, {e:#x}) is empty"));
            }
            Ok(Cmd::Space(s, e))
        }
        "lazymax" => Ok(Cmd::LazyMax(number(
            operands(words, 1, "`lazymax BYTES`")?[0],
        )?)),
        "alloc" => parse_alloc(words),
        "free" => Ok(Cmd::Free(operands(words, 1, "`free ID`")?[0].to_string())),
        "lazy" => Ok(Cmd::Lazy(operands(words, 1, "`lazy ID`")?[0].to_string())),
        "freeat" => Ok(Cmd::FreeAt(number(
            operands(words, 1, "`freeat ADDR`")?[0],
        )?)),
        "purge" => operands(words, 0, "`purge`").map(|_| Cmd::Purge),
        other => Err(format!("unknown command {other:?}")),
    }
}

/// A trace read line by line: each item is a command with its 1-based line
/// number, or the first malformed (or unreadable) line, after which the
/// iterator ends. `space` must come before every command but `lazymax`,
/// exactly once.
pub struct Commands<R> {
    src: R,
    buf: Vec<u8>,
    line: usize,
    space: Option<(u64, u64)>,
    failed: bool,
}

impl<R: BufRead> Commands<R> {
    /// Reads commands from `src`.
    pub fn new(src: R) -> Self {
        Commands {
            src,
            buf: Vec::new(),
            line: 0,
            space: None,
            failed: false,
        }
    }

    /// The next command, `None` at the end, or the first bad line.
    fn next_cmd(&mut self) -> Result<Option<(usize, Cmd)>, ParseError> {
        loop {
            self.buf.clear();
            let read = self.src.read_until(b'\n', &mut self.buf);
            let n = read.map_err(|e| self.error(self.line + 1, format!("reading: {e}")))?;
            if n == 0 {
                return match self.space {
                    Some(_) => Ok(None),
                    None => Err(self.error(self.line.max(1), "the trace has no `space` command")),
                };
            }
            self.line += 1;
            let text = std::str::from_utf8(&self.buf)
                .map_err(|_| self.error(self.line, "not valid UTF-8"))?;
            let words: Vec<&str> = text
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            if words.is_empty() {
                continue;
            }
            let cmd = self.check_order(parse_line(&words))?;
            return Ok(Some((self.line, cmd)));
        }
    }

    /// Keeps the `space` rules: once, before every command but `lazymax`.
    fn check_order(&mut self, cmd: Result<Cmd, String>) -> Result<Cmd, ParseError> {
        let cmd = cmd.map_err(|msg| self.error(self.line, msg))?;
        match cmd {
            Cmd::Space(..) if self.space.is_some() => {
                Err(self.error(self.line, "a second `space` command"))
            }
            Cmd::Space(s, e) => {
                self.space = Some((s, e));
                Ok(cmd)
            }
            Cmd::LazyMax(_) => Ok(cmd),
            _ if self.space.is_none() => Err(self.error(
                self.line,
                format!("`{}` before the `space` command", cmd.keyword()),
            )),
            _ => Ok(cmd),
        }
    }

    fn error(&self, line: usize, msg: impl Into<String>) -> ParseError {
        ParseError {
            line,
            msg: msg.into(),
        }
    }
}

impl<R: BufRead> Iterator for Commands<R> {
    type Item = Result<(usize, Cmd), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_cmd().transpose();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

/// Reads the whole trace once, checking every line; returns its space.
///
/// # Errors
/// The first malformed or unreadable line, with its number.
pub fn check_trace(src: impl BufRead) -> Result<(u64, u64), ParseError> {
    let mut cmds = Commands::new(src);
    let mut space = None;
    for item in &mut cmds {
        if let (_, Cmd::Space(s, e)) = item? {
            space = Some((s, e));
        }
    }
    // A trace without a space ends in an error above, so this is set.
    space.ok_or_else(|| cmds.error(1, "the trace has no `space` command"))
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
pub fn run<R: RangeAllocator>(
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
            // The allocator was built over it.
            Cmd::Space(..) => continue,
            Cmd::LazyMax(b) => a.set_lazy_max(b),
            Cmd::Purge => {
                a.purge(&mut |_, _| {});
            }
            Cmd::Alloc {
                id,
                size,
                align,
                range,
            } => {
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
fn replay_on<R: RangeAllocator>(
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
    let (s, e) = match check_trace(first) {
        Ok(space) => space,
        Err(e) => return refuse(&e),
    };
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

    fn err_line(text: &str) -> usize {
        parse(text).expect_err("must be malformed").line
    }

    #[test]
    fn parses_every_command() {
        let t = parse(
            "# a comment\nlazymax 0x2000\n\nspace 0x1000 65536  # trailing\n\
             alloc a 4096\nalloc b 0X10 align 8 range 0 0x8000\nalloc c 1 range 1 2 align 2\n\
             free a\nlazy b\nfreeat 0xdead\npurge\n",
        )
        .unwrap();
        let alloc = |id: &str, size, align, range| Cmd::Alloc {
            id: id.into(),
            size,
            align,
            range,
        };
        assert_eq!(
            t,
            vec![
                (2, Cmd::LazyMax(0x2000)),
                (4, Cmd::Space(0x1000, 65536)),
                (5, alloc("a", 4096, 1, None)),
                (6, alloc("b", 16, 8, Some((0, 0x8000)))),
                (7, alloc("c", 1, 2, Some((1, 2)))),
                (8, Cmd::Free("a".into())),
                (9, Cmd::Lazy("b".into())),
                (10, Cmd::FreeAt(0xdead)),
                (11, Cmd::Purge),
            ]
        );
    }

    #[test]
    fn numbers_at_the_limits() {
        assert_eq!(number("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(number("0xffffffffffffffff"), Ok(u64::MAX));
        for bad in [
            "18446744073709551616",
            "0x10000000000000000",
            "0x",
            "-1",
            "1e3",
            "0b1",
            "12a",
            "",
        ] {
            assert!(number(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn malformed_lines_name_their_line() {
        assert_eq!(err_line("space 0 10\nalloc a\n"), 2);
        assert_eq!(err_line("space 0 10\n\n# c\nalloc a x\n"), 4);
        assert_eq!(err_line("space 0 10\nalloc a 1 align\n"), 2);
        assert_eq!(err_line("space 0 10\nalloc a 1 align 2 align 4\n"), 2);
        assert_eq!(err_line("space 0 10\nalloc a 1 range 5\n"), 2);
        assert_eq!(err_line("space 0 10\nalloc a 1 bogus\n"), 2);
        assert_eq!(err_line("space 0 10\nfree\n"), 2);
        assert_eq!(err_line("space 0 10\nfree a b\n"), 2);
        assert_eq!(err_line("space 0 10\npurge now\n"), 2);
        assert_eq!(err_line("space 0 10\nfreeat -3\n"), 2);
        assert_eq!(err_line("space 0 10\nmalloc a 1\n"), 2);
        assert_eq!(err_line("space 0 10\nspace 0 20\n"), 2);
        assert_eq!(err_line("space 10 10\n"), 1);
        assert_eq!(err_line("space 0x10\n"), 1);
        assert_eq!(err_line("alloc a 1\nspace 0 10\n"), 1);
        assert_eq!(err_line("lazymax 5\n\n"), 2);
        assert_eq!(err_line(""), 1);
        assert_eq!(err_line("space 0 10\nlazymax 99999999999999999999\n"), 2);
    }

    /// Issue 12, defect 6: bytes that are not UTF-8 name their line too.
    #[test]
    fn non_utf8_lines_name_their_line() {
        let mut cmds = Commands::new(&b"space 0 10\n\nalloc a \xff\nalloc b 1\n"[..]);
        assert!(matches!(cmds.next(), Some(Ok((1, Cmd::Space(0, 10))))));
        let err = cmds.next().unwrap().unwrap_err();
        assert_eq!((err.line, err.msg.as_str()), (3, "not valid UTF-8"));
        assert!(cmds.next().is_none(), "nothing after the first bad line");
        assert_eq!(check_trace(&b"space 0 1\n\xc3\n"[..]).unwrap_err().line, 2);
    }

    /// Issue 12: the replay pass runs each command as it is read, so its
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
                _ => Err(CheckError::new("planted")),
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
                assert_eq!((line, err.0.as_str()), (4, "planted"))
            }
            other => panic!("expected a check failure, got {other:?}"),
        }
        assert_eq!(String::from_utf8(out).unwrap(), "a invalid\nb 0x0\n");
        // Without --check the same trace runs to the end.
        let mut a = Broken(LinearVmap::new(0, 0x100).unwrap());
        assert!(run(&mut a, t.into_iter().map(Ok), false, &mut Vec::new()).is_ok());
    }
}
