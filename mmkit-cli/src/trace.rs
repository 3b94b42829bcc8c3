//! The trace format `mmkit replay` reads (see `docs/trace-format.md`):
//! parsing only, streamed line by line, with the line number of the first
//! malformed line. The library target exposes it for the fuzz target.
//!
//! ```text
//! lazymax BYTES                 optional, before or after space
//! space START END               the managed space [START, END); first command
//! cpus N                        optional: the CPUs of a Linux trace
//! vmalloc VSTART VEND           optional: the window Linux's node pools serve
//! alloc ID SIZE [align A] [range VSTART VEND] [cpu C]
//! free ID                       free what ID's last successful alloc returned
//! lazy ID                       the same, lazily
//! freeat ADDR                   free a raw address
//! purge [full]
//! ```

use mmkit::nodes::PurgeStep;
use std::fmt;
use std::io::BufRead;

/// One trace command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// `space START END`: the managed space, `START < END`.
    Space(u64, u64),
    /// `lazymax BYTES`.
    LazyMax(u64),
    /// `cpus N`: the CPUs of the machine a Linux trace comes from (`N >=
    /// 1`; Linux 6.12 has one vmap node a CPU).
    Cpus(u32),
    /// `vmalloc VSTART VEND`: Linux's `[VMALLOC_START, VMALLOC_END)`, the
    /// window whose requests its vmap nodes serve.
    Vmalloc(u64, u64),
    /// `alloc ID SIZE [align A] [range VSTART VEND] [cpu C]`; align
    /// defaults to 1, the range to the whole space.
    Alloc {
        /// The name later `free`/`lazy` lines use.
        id: String,
        /// Bytes.
        size: u64,
        /// Alignment (validated by the allocator, not the parser).
        align: u64,
        /// The window `[vstart, vend)`.
        range: Option<(u64, u64)>,
        /// The CPU that asked (a Linux trace: it picks the vmap node).
        cpu: Option<u32>,
    },
    /// `free ID`.
    Free(String),
    /// `lazy ID`.
    Lazy(String),
    /// `freeat ADDR`.
    FreeAt(u64),
    /// `purge`.
    Purge,
    /// `purge full`: a purge that also empties every node pool and pools
    /// nothing (Linux's purge when an allocation fails).
    PurgeFull,
    /// `purge begin` (`false`) or `purge full begin` (`true`): where a
    /// Linux purge began (its pools decay and it takes the lazy lists);
    /// the next `purge` or `purge full` ends it. Only Linux's node pools
    /// act on it.
    PurgeBegin(bool),
    /// `purge node N`: where the purge that began has pooled or freed node
    /// `N`'s lazy areas (Linux walks the nodes one by one before its
    /// event). Only Linux's node pools act on it.
    PurgeNode(usize),
    /// `purge window` (`false`) or `purge full window` (`true`): the
    /// Linux purge whose `purge begin` follows began here at the
    /// earliest, and before the next `lazy` or `purge` at the latest (the
    /// `purge begin` itself is the importer's best single guess). A judge
    /// on Linux's answers places the begin inside the window; a replay
    /// ignores it.
    PurgeWindow(bool),
    /// One step of a Linux purge's decay and take, where a capture's
    /// kprobe events put it: `purge start`, `purge full start`, `purge
    /// detach N PAGES`, `purge attach N PAGES`, `purge reclaim N`, `purge
    /// take N` ([`PurgeStep`]). Only Linux's node pools act on it.
    PurgeStep(PurgeStep),
}

impl Cmd {
    /// The command's first word in the trace.
    fn keyword(&self) -> &'static str {
        match self {
            Cmd::Space(..) => "space",
            Cmd::LazyMax(_) => "lazymax",
            Cmd::Cpus(_) => "cpus",
            Cmd::Vmalloc(..) => "vmalloc",
            Cmd::Alloc { .. } => "alloc",
            Cmd::Free(_) => "free",
            Cmd::Lazy(_) => "lazy",
            Cmd::FreeAt(_) => "freeat",
            Cmd::Purge
            | Cmd::PurgeFull
            | Cmd::PurgeBegin(_)
            | Cmd::PurgeNode(_)
            | Cmd::PurgeWindow(_)
            | Cmd::PurgeStep(_) => "purge",
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

const USAGE: &str = "`alloc ID SIZE [align A] [range VSTART VEND] [cpu C]`";

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
    let (mut align, mut range, mut cpu) = (None, None, None);
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
            ("cpu", [c, ..]) if cpu.is_none() => {
                cpu = Some(cpu_number(c)?);
                rest = &tail[1..];
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
        cpu,
    })
}

/// A CPU number: a number that fits in 32 bits.
fn cpu_number(tok: &str) -> Result<u32, String> {
    u32::try_from(number(tok)?).map_err(|_| format!("CPU {tok:?} does not fit in 32 bits"))
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
        "cpus" => match cpu_number(operands(words, 1, "`cpus N`")?[0])? {
            0 => Err("`cpus 0`: a machine has at least one CPU".into()),
            n => Ok(Cmd::Cpus(n)),
        },
        "vmalloc" => {
            let ops = operands(words, 2, "`vmalloc VSTART VEND`")?;
            Ok(Cmd::Vmalloc(number(ops[0])?, number(ops[1])?))
        }
        "alloc" => parse_alloc(words),
        "free" => Ok(Cmd::Free(operands(words, 1, "`free ID`")?[0].to_string())),
        "lazy" => Ok(Cmd::Lazy(operands(words, 1, "`lazy ID`")?[0].to_string())),
        "freeat" => Ok(Cmd::FreeAt(number(
            operands(words, 1, "`freeat ADDR`")?[0],
        )?)),
        "purge" => match words {
            [_] => Ok(Cmd::Purge),
            [_, "full"] => Ok(Cmd::PurgeFull),
            [_, "begin"] => Ok(Cmd::PurgeBegin(false)),
            [_, "full", "begin"] => Ok(Cmd::PurgeBegin(true)),
            [_, "window"] => Ok(Cmd::PurgeWindow(false)),
            [_, "full", "window"] => Ok(Cmd::PurgeWindow(true)),
            [_, "node", n] => node_number(n, "node").map(Cmd::PurgeNode),
            [_, "start"] => Ok(Cmd::PurgeStep(PurgeStep::Start { full: false })),
            [_, "full", "start"] => Ok(Cmd::PurgeStep(PurgeStep::Start { full: true })),
            [_, "reclaim", n] => {
                node_number(n, "reclaim").map(|node| Cmd::PurgeStep(PurgeStep::Reclaim { node }))
            }
            [_, "take", n] => {
                node_number(n, "take").map(|node| Cmd::PurgeStep(PurgeStep::Take { node }))
            }
            [_, step @ ("detach" | "attach"), n, p] => {
                let node = node_number(n, step)?;
                let pages = number(p)?;
                Ok(Cmd::PurgeStep(match *step {
                    "detach" => PurgeStep::Detach { node, pages },
                    _ => PurgeStep::Attach { node, pages },
                }))
            }
            _ => Err(
                "expected `purge`, `purge full`, `purge begin`, `purge full begin`, \
                 `purge window`, `purge full window`, `purge node N`, `purge [full] start`, \
                 `purge detach N PAGES`, `purge attach N PAGES`, `purge reclaim N` or \
                 `purge take N`"
                    .into(),
            ),
        },
        other => Err(format!("unknown command {other:?}")),
    }
}

/// The trace line of a purge step, as [`Cmd::PurgeStep`] reads it back.
///
/// ```
/// use mmkit::nodes::PurgeStep;
/// use mmkit_cli::trace::purge_step_line;
/// assert_eq!(purge_step_line(PurgeStep::Detach { node: 1, pages: 2 }), "purge detach 1 2");
/// assert_eq!(purge_step_line(PurgeStep::Start { full: true }), "purge full start");
/// ```
pub fn purge_step_line(step: PurgeStep) -> String {
    match step {
        PurgeStep::Start { full: false } => "purge start".into(),
        PurgeStep::Start { full: true } => "purge full start".into(),
        PurgeStep::Detach { node, pages } => format!("purge detach {node} {pages}"),
        PurgeStep::Attach { node, pages } => format!("purge attach {node} {pages}"),
        PurgeStep::Reclaim { node } => format!("purge reclaim {node}"),
        PurgeStep::Take { node } => format!("purge take {node}"),
    }
}

/// The node operand of `purge WORD N`.
fn node_number(n: &str, word: &str) -> Result<usize, String> {
    n.parse()
        .map_err(|_| format!("`purge {word} N`: {n:?} is not a node number"))
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
            Cmd::LazyMax(_) | Cmd::Cpus(_) | Cmd::Vmalloc(..) => Ok(cmd),
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
    check_header(src).map(|h| h.space)
}

/// What a trace says about its machine, read by the checking pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `space`.
    pub space: (u64, u64),
    /// The last `cpus`, if any.
    pub cpus: Option<u32>,
    /// The last `vmalloc`, if any.
    pub vmalloc: Option<(u64, u64)>,
}

/// [`check_trace`], returning the whole [`Header`].
///
/// # Errors
/// The first malformed or unreadable line, with its number.
pub fn check_header(src: impl BufRead) -> Result<Header, ParseError> {
    let mut cmds = Commands::new(src);
    let (mut space, mut cpus, mut vmalloc) = (None, None, None);
    for item in &mut cmds {
        match item?.1 {
            Cmd::Space(s, e) => space = Some((s, e)),
            Cmd::Cpus(n) => cpus = Some(n),
            Cmd::Vmalloc(s, e) => vmalloc = Some((s, e)),
            _ => {}
        }
    }
    // A trace without a space ends in an error above, so this is set.
    let space = space.ok_or_else(|| cmds.error(1, "the trace has no `space` command"))?;
    Ok(Header {
        space,
        cpus,
        vmalloc,
    })
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
            cpu: None,
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
        assert_eq!(err_line("space 0 10\npurge full now\n"), 2);
        assert_eq!(err_line("space 0 10\ncpus 0\n"), 2);
        assert_eq!(err_line("space 0 10\ncpus 0x100000000\n"), 2);
        assert_eq!(err_line("space 0 10\nalloc a 1 cpu 1 cpu 2\n"), 2);
        assert_eq!(err_line("space 0 10\nalloc a 1 cpu\n"), 2);
        assert_eq!(err_line("space 0 10\nfreeat -3\n"), 2);
        assert_eq!(err_line("space 0 10\nmalloc a 1\n"), 2);
        assert_eq!(err_line("space 0 10\nspace 0 20\n"), 2);
        assert_eq!(err_line("space 10 10\n"), 1);
        assert_eq!(err_line("space 0x10\n"), 1);
        assert_eq!(err_line("alloc a 1\nspace 0 10\n"), 1);
        assert_eq!(err_line("lazymax 5\n\n"), 2);
        assert_eq!(err_line(""), 1);
        assert_eq!(err_line("space 0 10\nlazymax 99999999999999999999\n"), 2);
        assert_eq!(err_line("space 0 10\npurge node -1\n"), 2);
        assert_eq!(err_line("space 0 10\npurge detach 1\n"), 2);
        assert_eq!(err_line("space 0 10\npurge attach x 2\n"), 2);
        assert_eq!(err_line("space 0 10\npurge take\n"), 2);
        assert_eq!(err_line("space 0 10\npurge reclaim 0 1\n"), 2);
    }

    /// Every purge step reads back from the line `purge_step_line` writes.
    #[test]
    fn purge_steps_round_trip() {
        let steps = [
            PurgeStep::Start { full: false },
            PurgeStep::Start { full: true },
            PurgeStep::Detach {
                node: 1,
                pages: 256,
            },
            PurgeStep::Attach { node: 0, pages: 3 },
            PurgeStep::Reclaim { node: 7 },
            PurgeStep::Take { node: 2 },
        ];
        let text: String = steps.iter().map(|&s| purge_step_line(s) + "\n").collect();
        let cmds: Vec<Cmd> = Commands::new(format!("space 0 10\n{text}").as_bytes())
            .map(|r| r.unwrap().1)
            .skip(1)
            .collect();
        assert_eq!(cmds, steps.map(Cmd::PurgeStep));
    }

    /// The commands of an imported Linux trace: `cpus`, `alloc ... cpu`,
    /// `purge full`, `purge begin`, `purge full begin`, `purge node N`.
    #[test]
    fn parses_the_linux_commands() {
        let text = "cpus 2\nspace 1 0x10000\nvmalloc 0x100 0x200\n\
                    alloc a 0x1000 cpu 1 align 0x1000\npurge full\n\
                    purge begin\npurge full begin\npurge node 1\npurge window\npurge full window\n";
        let t = parse(text).unwrap();
        assert_eq!(
            t,
            vec![
                (1, Cmd::Cpus(2)),
                (2, Cmd::Space(1, 0x10000)),
                (3, Cmd::Vmalloc(0x100, 0x200)),
                (
                    4,
                    Cmd::Alloc {
                        id: "a".into(),
                        size: 0x1000,
                        align: 0x1000,
                        range: None,
                        cpu: Some(1),
                    }
                ),
                (5, Cmd::PurgeFull),
                (6, Cmd::PurgeBegin(false)),
                (7, Cmd::PurgeBegin(true)),
                (8, Cmd::PurgeNode(1)),
                (9, Cmd::PurgeWindow(false)),
                (10, Cmd::PurgeWindow(true)),
            ]
        );
        let h = check_header(text.as_bytes()).unwrap();
        assert_eq!(
            (h.space, h.cpus, h.vmalloc),
            ((1, 0x10000), Some(2), Some((0x100, 0x200)))
        );
    }

    /// Bytes that are not UTF-8 name their line too.
    #[test]
    fn non_utf8_lines_name_their_line() {
        let mut cmds = Commands::new(&b"space 0 10\n\nalloc a \xff\nalloc b 1\n"[..]);
        assert!(matches!(cmds.next(), Some(Ok((1, Cmd::Space(0, 10))))));
        let err = cmds.next().unwrap().unwrap_err();
        assert_eq!((err.line, err.msg.as_str()), (3, "not valid UTF-8"));
        assert!(cmds.next().is_none(), "nothing after the first bad line");
        assert_eq!(check_trace(&b"space 0 1\n\xc3\n"[..]).unwrap_err().line, 2);
    }
}
