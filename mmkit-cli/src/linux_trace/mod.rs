//! `mmkit trace import-linux`: Linux's vmalloc trace events (the text of
//! `/sys/kernel/tracing/trace`) made into an `mmkit replay` trace, and
//! Linux's own answers into the matching expected output.
//!
//! Three events of Linux 6.12 (`include/trace/events/vmalloc.h`) carry the
//! range allocator's whole history (vmalloc, vmap, vm_map_ram's blocks,
//! module space: every call of `alloc_vmap_area`):
//!
//! ```text
//! alloc_vmap_area: va_start: ADDR size=SIZE align=ALIGN vstart=0x.. vend=0x.. failed=0|1
//! free_vmap_area_noflush: va_start=0x.. nr_lazy=N nr_lazy_max=N
//! purge_vmap_area_lazy: start=0x.. end=0x.. num_purged=N
//! ```
//!
//! Each maps to one replay command:
//!
//! | event | command |
//! |---|---|
//! | `alloc_vmap_area failed=0` | `alloc L<line> SIZE align ALIGN range VSTART VEND cpu CPU` |
//! | `alloc_vmap_area failed=1` | nothing while a purge and a retry follow on that CPU; the final failure: the `alloc` above, expected `nospace` |
//! | `free_vmap_area_noflush` | `lazy L<line of the alloc>` |
//! | `purge_vmap_area_lazy` | `purge`, or `purge full` after a failed attempt on its CPU; earlier, `purge begin` and (from `nr_lazy`'s falls) `purge node N` |
//!
//! The trace opens with `lazymax` at `u64::MAX` (Linux's purges happen
//! where the events say, never by mmkit's threshold), `space 1
//! 0xffffffffffffffff` (Linux's initial free tree: every address but 0)
//! `cpus N` from the `#P:N` of the header and `vmalloc VSTART VEND`, the
//! window most requests ask for (vmalloc's). The size of an event
//! already includes the guard page. The expected output has one line per
//! `alloc`: Linux's address, or `nospace`.

use mmkit::nodes::{LinuxNodes, PurgeStep};
pub use probes::Probe;

use crate::trace::purge_step_line;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::BufRead;

/// A line of the ftrace text that has no replay command, with its 1-based
/// number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    /// 1-based line number in the ftrace text.
    pub line: usize,
    /// What is wrong with it.
    pub msg: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

/// One vmalloc event of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `alloc_vmap_area`.
    Alloc {
        /// Linux's address (`vend` when it failed).
        addr: u64,
        /// Bytes, guard page included.
        size: u64,
        /// Alignment.
        align: u64,
        /// The window `[vstart, vend)`.
        window: (u64, u64),
        /// Whether no free block held the request.
        failed: bool,
    },
    /// `free_vmap_area_noflush`: the area at this address is lazily freed,
    /// and the lazy pages after it (`nr_lazy`) when the event has them.
    FreeLazy(u64, Option<u64>),
    /// `purge_vmap_area_lazy`, with the number of areas purged.
    Purge(u64),
    /// A kprobe event on a step of a purge (`scripts/linux/trace.sh`).
    Probe(Probe),
}

/// An event with the CPU that recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The CPU column (`[001]`).
    pub cpu: u32,
    /// The task's pid (`comm-PID` before the CPU column), 0 if absent.
    pub pid: u32,
    /// The event.
    pub event: Event,
}

/// A number as ftrace prints it: `0x` hex or decimal.
fn number(tok: &str) -> Result<u64, String> {
    let parsed = match tok.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => tok.parse(),
    };
    parsed.map_err(|_| format!("{tok:?} is not a 64-bit number"))
}

/// The value of `key=` (or `key:` followed by a space) in `fields`.
fn field(fields: &str, key: &str) -> Result<u64, String> {
    let mut words = fields.split_whitespace();
    while let Some(w) = words.next() {
        if let Some(v) = w.strip_prefix(key).and_then(|v| v.strip_prefix('=')) {
            return number(v);
        }
        if w.strip_prefix(key) == Some(":") {
            return number(words.next().unwrap_or(""));
        }
    }
    Err(format!("no `{key}` field"))
}

/// The CPU column: the first `[digits]` word before the event.
fn cpu_of(prefix: &str) -> Option<u32> {
    prefix.split_whitespace().find_map(|w| {
        let d = w.strip_prefix('[')?.strip_suffix(']')?;
        (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .then(|| d.parse().ok())
            .flatten()
    })
}

/// The pid of `comm-PID`, the last word before the CPU column.
fn pid_of(prefix: &str) -> u32 {
    let task = prefix.split('[').next().unwrap_or("").trim_end();
    let pid = task.rsplit('-').next().unwrap_or("");
    pid.parse().unwrap_or(0)
}

/// Parses one line of the ftrace text: `None` for a comment or a blank
/// line, else the event.
///
/// # Errors
/// A line that is neither, with what is wrong: lost events, an event other
/// than the three, a missing or malformed field, no CPU column.
pub fn parse_line(text: &str) -> Result<Option<Record>, String> {
    let t = text.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    if t.contains("LOST") && t.contains("EVENTS") {
        return Err(format!(
            "the ring buffer lost events ({t:?}): a larger buffer_size_kb is needed"
        ));
    }
    const EVENTS: [&str; 3] = [
        " alloc_vmap_area: ",
        " free_vmap_area_noflush: ",
        " purge_vmap_area_lazy: ",
    ];
    let names = EVENTS.iter().chain(&probes::NAMES);
    let Some((which, at)) = names
        .enumerate()
        .find_map(|(i, e)| t.find(e).map(|at| (i, at)))
    else {
        return Err(format!(
            "not a vmalloc event (alloc_vmap_area, free_vmap_area_noflush, \
             purge_vmap_area_lazy) or a purge step's kprobe event: {t:?}"
        ));
    };
    let cpu = cpu_of(&t[..at]).ok_or("no CPU column ([NNN]) before the event")?;
    let pid = pid_of(&t[..at]);
    if let Some(probe) = which.checked_sub(EVENTS.len()) {
        let fields = &t[at + probes::NAMES[probe].len()..];
        let event = Event::Probe(probes::parse(probe, fields)?);
        return Ok(Some(Record { cpu, pid, event }));
    }
    let fields = &t[at + EVENTS[which].len()..];
    let event = match which {
        0 => {
            let align = field(fields, "align")?;
            let failed = match field(fields, "failed")? {
                0 => false,
                1 => true,
                f => return Err(format!("failed={f}: expected 0 or 1")),
            };
            Event::Alloc {
                addr: field(fields, "va_start")?,
                size: field(fields, "size")?,
                align,
                window: (field(fields, "vstart")?, field(fields, "vend")?),
                failed,
            }
        }
        1 => Event::FreeLazy(field(fields, "va_start")?, field(fields, "nr_lazy").ok()),
        _ => Event::Purge(field(fields, "num_purged")?),
    };
    Ok(Some(Record { cpu, pid, event }))
}

/// The CPU count of the header line `entries-in-buffer/... #P:N`.
fn header_cpus(text: &str) -> Option<u32> {
    let t = text.trim_start();
    if !t.starts_with('#') {
        return None;
    }
    t.split_whitespace()
        .find_map(|w| w.strip_prefix("#P:"))
        .and_then(|n| n.parse().ok())
}

/// A request that failed once on its CPU and is being retried.
#[derive(Debug, Clone, Copy)]
struct Failed {
    line: usize,
    request: (u64, u64, u64, u64),
    purged: bool,
}

/// A live area: the line of its `alloc`, its pages, the CPU that
/// allocated it and the window it asked for.
#[derive(Debug, Clone, Copy)]
struct Live {
    id: usize,
    pages: u64,
    cpu: u32,
    window: (u64, u64),
}

/// A lazy free: where its `lazy` line begins and ends in `body`, and the
/// area it freed.
#[derive(Debug, Clone, Copy)]
struct Freed {
    start: usize,
    end: usize,
    addr: u64,
    area: Live,
}

/// A lazy free whose `nr_lazy` fell: a running purge had just finished
/// one node (`purge_vmap_node` subtracts that node's pages).
#[derive(Debug, Clone)]
struct Fall {
    /// Where in `body` that free's line begins.
    at: usize,
    /// Where each CPU's events ended then.
    cpu_at: HashMap<u32, usize>,
    /// The index of that free in `Imported::frees`.
    free: usize,
    /// The pages the finished node purged.
    purged: u64,
    /// `nr_lazy` after that free: the pages freed since the purge took
    /// the lazy lists, this free's included.
    left: u64,
}

/// A purge event whose `purge begin` is not written yet: the free after
/// it can still show a fall of `nr_lazy` (the purge's last node is often
/// subtracted just before its event).
#[derive(Debug, Clone)]
struct Open {
    /// The CPU that recorded it.
    cpu: u32,
    /// `" full"` after a failed attempt on that CPU, else empty.
    full: &'static str,
    /// Its `num_purged`.
    purged: u64,
    /// Where in `body` its `purge` line begins.
    event_at: usize,
    /// Where in `body` the purge before it ended.
    after: usize,
    /// Where in `body` its CPU's previous event ended.
    cpu_at: usize,
    /// The falls of `nr_lazy` since the purge before it.
    drops: Vec<Fall>,
    /// Whether kprobe events showed its steps (then they place it).
    stepped: bool,
}

/// The replay trace and Linux's answers, built event by event.
#[derive(Debug, Default)]
pub struct Imported {
    /// The replay trace's command lines (after its header).
    body: String,
    /// One line per `alloc`: `ID 0xaddr` or `ID nospace`.
    pub expected: String,
    /// CPUs: `#P:N` of the header, else the highest CPU seen plus one.
    pub cpus: u32,
    /// Events read.
    pub events: u64,
    /// `alloc` commands written.
    pub allocs: u64,
    live: HashMap<u64, Live>,
    failed: HashMap<u32, Failed>,
    windows: HashMap<(u64, u64), u64>,
    /// Per CPU: where in `body` its last event ended.
    cpu_at: HashMap<u32, usize>,
    /// Where in `body` the last purge ended.
    purge_at: usize,
    /// Every lazy free, in order.
    frees: Vec<Freed>,
    /// The lazy frees that purges begun so far took.
    taken: usize,
    /// `nr_lazy` of the last lazy free that had it.
    nr_lazy: Option<u64>,
    /// The falls of `nr_lazy` since the last purge event.
    drops: Vec<Fall>,
    /// The last purge event, until the free after it (or the next purge).
    open: Option<Open>,
    /// The purge steps kprobe events show.
    steps: probes::Steps,
    /// The lazy frees before the last `purge take`.
    taken_by_steps: usize,
}

impl Imported {
    /// The window most requests ask for: vmalloc's own (`VMALLOC_START`,
    /// `VMALLOC_END`), which vmalloc, vmap and vm_map_ram's blocks all
    /// use; the lowest of equally frequent ones.
    pub fn vmalloc(&self) -> Option<(u64, u64)> {
        let best = self
            .windows
            .iter()
            .max_by_key(|&(&w, &n)| (n, core::cmp::Reverse(w)));
        best.map(|(&w, _)| w)
    }

    /// The whole replay trace: header, then the commands.
    pub fn trace(&self) -> String {
        let vmalloc = self
            .vmalloc()
            .map_or(String::new(), |(s, e)| format!("vmalloc {s:#x} {e:#x}\n"));
        format!(
            "# Linux vmalloc trace, imported by `mmkit trace import-linux`\n\
             lazymax {:#x}\nspace 0x1 {:#x}\ncpus {}\n{vmalloc}{}",
            u64::MAX,
            u64::MAX,
            self.cpus.max(1),
            self.body
        )
    }

    fn alloc_line(&mut self, id: usize, (size, align, vs, ve): (u64, u64, u64, u64), cpu: u32) {
        self.allocs += 1;
        *self.windows.entry((vs, ve)).or_insert(0) += 1;
        let _ = writeln!(
            self.body,
            "alloc L{id} {size:#x} align {align:#x} range {vs:#x} {ve:#x} cpu {cpu}"
        );
    }

    /// Adds one event, read on `line`, and notes where its CPU's events
    /// now end.
    fn add(&mut self, line: usize, r: Record) -> Result<(), String> {
        self.add_event(line, r)?;
        self.cpu_at.insert(r.cpu, self.body.len());
        Ok(())
    }

    /// Writes `purge begin` where the purge recorded now on `cpu`, which
    /// took `purged` lazy areas, began at the earliest: after that CPU's
    /// previous event (the purge runs on it from its start to its event),
    /// after the previous purge (one runs at a time), and after the
    /// `purged`-th lazy free since the previous purge began (it takes every
    /// lazy area freed before it began, and no other).
    ///
    /// `nr_lazy` falls only when a purge finishes a node
    /// (`purge_vmap_node` subtracts that node's pages after pooling them),
    /// so the falls since the previous purge say more. After the last one,
    /// `nr_lazy` counts exactly the pages freed since the purge took the
    /// lazy lists: the frees that add up to it, counted back from that
    /// fall, are the ones it did not take ([`take_cut`](Self::take_cut)).
    /// Then the purge began (its decay, then its take) between the last
    /// free it took and the first it did not; without such a cut, after
    /// the purging CPU's last event before the first fall. When there are
    /// as many falls as nodes, `purge node N` goes just before the fall of
    /// node `N`: its pools are filled there at the latest. A fall belongs
    /// to the node whose taken pages it subtracts (a helper can finish
    /// node 1 first); without a match, the `N`-th fall is node `N`.
    fn begin_purge(&mut self, open: Open) {
        let Open {
            cpu,
            full,
            purged,
            event_at,
            after,
            cpu_at,
            drops,
            stepped,
        } = open;
        if stepped {
            // Its steps are in the trace where Linux ran them.
            self.taken = self.taken_by_steps;
            return;
        }
        let taken = self.taken.saturating_add(purged as usize);
        let after_frees = match taken.min(self.frees.len()) {
            0 => 0,
            n => self.frees[n - 1].end,
        };
        let earliest = cpu_at.max(after);
        let drops: Vec<Fall> = drops.into_iter().filter(|d| d.at >= after).collect();
        let cut = self.take_cut(&drops);
        let (at, window) = match (drops.first(), cut) {
            (Some(first), Some(cut)) => {
                // Between the last free it took and the first it did not;
                // after the purging CPU's last event if that lies there.
                let lo = cut.checked_sub(1).map_or(0, |i| self.frees[i].end);
                let hi = self.frees[cut].start.min(event_at).max(after);
                let lo = lo.max(after).min(hi);
                let on_cpu = first.cpu_at.get(&cpu).copied().unwrap_or(0).min(cpu_at);
                (on_cpu.max(lo).min(hi), (lo < hi).then_some(lo))
            }
            // The purge ran on `cpu` from its last event before the fall.
            (Some(first), None) => (
                first.cpu_at.get(&cpu).copied().unwrap_or(0).max(after),
                None,
            ),
            (None, _) => (earliest.max(after_frees), None),
        };
        let nodes = match cut.and_then(|c| self.fall_nodes(&drops, c)) {
            Some(nodes) => Some(nodes),
            None if drops.iter().all(|d| d.at < event_at) => Some((0..drops.len()).collect()),
            None => None,
        };
        if let (true, Some(nodes)) = (self.cpus > 1 && drops.len() == self.cpus as usize, nodes) {
            // Falls after the event change nothing: the event ends the purge.
            let before = drops.iter().zip(&nodes).filter(|(d, _)| d.at < event_at);
            for (d, &node) in before.collect::<Vec<_>>().into_iter().rev() {
                self.insert_line(d.at, &format!("purge node {node}\n"));
            }
        }
        self.insert_line(at, &format!("purge{full} begin\n"));
        if let Some(lo) = window {
            self.insert_line(lo, &format!("purge{full} window\n"));
        }
        self.taken = cut.unwrap_or(taken).min(self.frees.len());
    }

    /// The index of the first lazy free the purge with these falls did not
    /// take: counted back from the last fall's free, the frees whose pages
    /// add up to `nr_lazy` after it. `None` when they do not add up
    /// exactly, or the cut lies before the previous purge's or after the
    /// first fall (the take comes before any node is purged).
    fn take_cut(&self, drops: &[Fall]) -> Option<usize> {
        let (first, last) = (drops.first()?, drops.last()?);
        let mut left = last.left;
        let mut cut = last.free + 1;
        while left > 0 {
            cut = cut.checked_sub(1).filter(|&c| c >= self.taken)?;
            left = left.checked_sub(self.frees[cut].area.pages)?;
        }
        (cut <= first.free).then_some(cut)
    }

    /// The node each fall finished: the one whose lazy pages taken (the
    /// frees from the previous cut to `cut`) the fall subtracts. `None`
    /// unless every fall matches a different node.
    fn fall_nodes(&self, drops: &[Fall], cut: usize) -> Option<Vec<usize>> {
        let nodes = self.cpus as usize;
        let vmalloc = self.vmalloc();
        let mut pages = vec![0u64; nodes];
        for f in self.frees.get(self.taken..cut)? {
            let a = f.area;
            let tag = (Some(a.window) == vmalloc).then_some(a.cpu as usize);
            let node = LinuxNodes::lazy_node(nodes, tag, f.addr);
            pages[node] = pages[node].saturating_add(a.pages);
        }
        let mut order = Vec::new();
        for d in drops {
            let node = (0..nodes).find(|&n| pages[n] == d.purged && !order.contains(&n))?;
            order.push(node);
        }
        Some(order)
    }

    /// Inserts `line` into `body` at `at`, moving the ends noted after it.
    fn insert_line(&mut self, at: usize, line: &str) {
        self.body.insert_str(at, line);
        let frees = self
            .frees
            .iter_mut()
            .flat_map(|f| [&mut f.start, &mut f.end]);
        let ends = (self.cpu_at.values_mut().chain(frees)).chain([&mut self.purge_at]);
        for end in ends.filter(|e| **e > at) {
            *end += line.len();
        }
    }

    /// [`add`](Self::add) without the bookkeeping of where events end.
    fn add_event(&mut self, line: usize, r: Record) -> Result<(), String> {
        self.events += 1;
        self.cpus = self.cpus.max(r.cpu + 1);
        match r.event {
            Event::Alloc {
                addr,
                size,
                align,
                window,
                failed,
            } => {
                let request = (size, align, window.0, window.1);
                let retry = match self.failed.remove(&r.cpu) {
                    Some(f) if f.request == request => Some(f),
                    Some(f) => {
                        self.gave_up(r.cpu, f);
                        None
                    }
                    None => None,
                };
                if failed {
                    match retry {
                        Some(f) if f.purged => self.gave_up(r.cpu, f),
                        Some(f) => {
                            self.failed.insert(r.cpu, f);
                        }
                        None => {
                            let f = Failed {
                                line,
                                request,
                                purged: false,
                            };
                            self.failed.insert(r.cpu, f);
                        }
                    }
                    return Ok(());
                }
                if let Some(old) = self.live.get(&addr) {
                    return Err(format!(
                        "alloc_vmap_area returned {addr:#x}, still live since line {}",
                        old.id
                    ));
                }
                let id = retry.map_or(line, |f| f.line);
                self.alloc_line(id, request, r.cpu);
                let _ = writeln!(self.expected, "L{id} {addr:#x}");
                let area = Live {
                    id,
                    pages: size / 4096,
                    cpu: r.cpu,
                    window,
                };
                self.live.insert(addr, area);
            }
            Event::FreeLazy(addr, nr_lazy) => {
                let area = self.live.remove(&addr).ok_or_else(|| {
                    format!(
                        "free_vmap_area_noflush of {addr:#x}, which no traced alloc_vmap_area \
                         returned (was tracing started after it was allocated? trace from \
                         boot with trace_event=vmalloc:*)"
                    )
                })?;
                let start = self.body.len();
                if let (Some(now), Some(before)) = (nr_lazy, self.nr_lazy) {
                    if now < before {
                        self.drops.push(Fall {
                            at: start,
                            cpu_at: self.cpu_at.clone(),
                            free: self.frees.len(),
                            purged: (before - now).saturating_add(area.pages),
                            left: now,
                        });
                    }
                }
                self.nr_lazy = nr_lazy.or(self.nr_lazy);
                let _ = writeln!(self.body, "lazy L{}", area.id);
                let end = self.body.len();
                self.frees.push(Freed {
                    start,
                    end,
                    addr,
                    area,
                });
                // A fall right after a purge event is that purge's.
                if let Some(mut open) = self.open.take() {
                    open.drops.append(&mut self.drops);
                    self.begin_purge(open);
                }
            }
            Event::Purge(purged) => {
                let full = match self.failed.get_mut(&r.cpu) {
                    Some(f) => {
                        f.purged = true;
                        " full"
                    }
                    None => "",
                };
                self.end_open();
                let open = Open {
                    cpu: r.cpu,
                    full,
                    purged,
                    event_at: self.body.len(),
                    after: self.purge_at,
                    cpu_at: self.cpu_at.get(&r.cpu).copied().unwrap_or(0),
                    drops: core::mem::take(&mut self.drops),
                    stepped: core::mem::take(&mut self.steps.seen),
                };
                let _ = writeln!(self.body, "purge{full}");
                self.purge_at = self.body.len();
                self.open = Some(open);
            }
            Event::Probe(p) => match self.steps.line(p, r.pid, self.cpus as usize)? {
                Some(probes::Line::Step(step)) => {
                    if let PurgeStep::Take { .. } = step {
                        self.taken_by_steps = self.frees.len();
                    }
                    let _ = writeln!(self.body, "{}", purge_step_line(step));
                }
                Some(probes::Line::Node(node)) => {
                    let _ = writeln!(self.body, "purge node {node}");
                }
                None => {}
            },
        }
        Ok(())
    }

    /// Writes the `purge begin` of the last purge event, if not yet.
    fn end_open(&mut self) {
        if let Some(open) = self.open.take() {
            self.begin_purge(open);
        }
    }

    /// A request Linux gave up on: an `alloc` expected to fail.
    fn gave_up(&mut self, cpu: u32, f: Failed) {
        self.alloc_line(f.line, f.request, cpu);
        let _ = writeln!(self.expected, "L{} nospace", f.line);
    }

    /// Moves each allocation whose event came late to where it took the
    /// free tree's lock, as the judge proves it on Linux's state
    /// ([`judge::Verdict::ahead`]): just before the request of another
    /// CPU that would otherwise get its block (that CPU allocated nothing
    /// in between), or just before the purge step it ran ahead of
    /// ([`judge::Verdict::step_allocs`]). Unchanged when the trace cannot
    /// be judged.
    fn lock_order(&mut self) {
        let Ok(linux) = judge::answers(&self.expected) else {
            return;
        };
        let trace = self.trace();
        let Ok(v) = judge::replay(&trace, &linux, true) else {
            return;
        };
        if v.ahead.is_empty() {
            return;
        }
        let head = trace.lines().count() - self.body.lines().count();
        let mut lines: Vec<Option<&str>> = trace.lines().map(Some).collect();
        // Before each line (1-based), the lines moved there.
        let mut before: HashMap<usize, Vec<&str>> = HashMap::new();
        for &(late, early) in &v.ahead {
            if let Some(l) = lines.get_mut(late - 1).and_then(Option::take) {
                before.entry(early).or_default().push(l);
            }
        }
        let mut body = String::with_capacity(self.body.len());
        for (i, l) in lines.iter().enumerate().skip(head) {
            for moved in before.get(&(i + 1)).into_iter().flatten() {
                body.push_str(moved);
                body.push('\n');
            }
            if let Some(l) = l {
                body.push_str(l);
                body.push('\n');
            }
        }
        self.body = body;
    }

    /// Requests still failing at the end of the trace: expected `nospace`.
    fn finish(&mut self) {
        self.end_open();
        let mut left: Vec<(u32, Failed)> = self.failed.drain().collect();
        left.sort_by_key(|(_, f)| f.line);
        for (cpu, f) in left {
            self.gave_up(cpu, f);
        }
    }
}

/// Reads the ftrace text and builds the replay trace and Linux's answers.
///
/// # Errors
/// The first line that has no replay command: unreadable, not UTF-8, lost
/// events, another event, a malformed field, a second allocation of a live
/// address, a free of an address no traced allocation returned.
pub fn import(src: impl BufRead) -> Result<Imported, ImportError> {
    let mut out = Imported::default();
    let mut header = None;
    let mut buf = Vec::new();
    let mut src = src;
    let mut line = 0;
    loop {
        buf.clear();
        let n = src.read_until(b'\n', &mut buf).map_err(|e| ImportError {
            line: line + 1,
            msg: format!("reading: {e}"),
        })?;
        if n == 0 {
            break;
        }
        line += 1;
        let fail = |msg: String| ImportError { line, msg };
        let text = std::str::from_utf8(&buf).map_err(|_| fail("not valid UTF-8".into()))?;
        header = header.or_else(|| header_cpus(text));
        // The probes' node numbers need the node count from the start.
        out.cpus = out.cpus.max(header.unwrap_or(0));
        if let Some(r) = parse_line(text).map_err(fail)? {
            out.add(line, r).map_err(fail)?;
        }
    }
    out.finish();
    if let Some(p) = header {
        out.cpus = out.cpus.max(p);
    }
    out.lock_order();
    Ok(out)
}

pub mod judge;
mod probes;
#[cfg(test)]
mod tests;
