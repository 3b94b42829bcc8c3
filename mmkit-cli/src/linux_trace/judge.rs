//! Linux's answers against [`LinuxNodes`]'s on an imported trace: judged
//! one allocation at a time on Linux's state (each answer compared, then
//! Linux's address taken), and in a free-running replay (the model's own
//! answers taken).

use std::collections::HashMap;

use mmkit::nodes::{LinuxNodes, PurgeStep};
use mmkit::range::RangeAllocator;

use crate::trace::{check_header, Cmd, Commands};

/// How many of Linux's answers the model gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Allocations judged.
    pub allocs: u64,
    /// Answers equal to Linux's.
    pub same: u64,
    /// The first few that differ: (ID, Linux's answer, the model's).
    pub differ: Vec<(String, Option<u64>, Option<u64>)>,
    /// Allocations a node pool served.
    pub pool_hits: u64,
    /// Purges run ahead of their event (judged only): Linux records a
    /// purge when it ends, so another CPU can take purged space first.
    pub early_purges: u64,
    /// Shrinker runs inferred (judged only): see
    /// [`LinuxNodes::alloc_judged`].
    pub shrinks: u64,
    /// Pools inferred detached by a purge's decay (judged only): see
    /// [`LinuxNodes::alloc_judged`].
    pub detaches: u64,
    /// Purges begun inside their window (judged only) at Linux's first
    /// answer that the state before the begin does not give: see
    /// [`Cmd::PurgeWindow`].
    pub window_begins: u64,
    /// Allocations run ahead of their event (judged only): another CPU's
    /// request took the block this model would give, and wrote its event
    /// later (an event is written after the tree's lock is released, and
    /// a vCPU can stall in between).
    pub early_allocs: u64,
    /// Allocations run ahead of a purge step (judged only): the state
    /// after the purge steps traced just before a request's event does
    /// not give Linux's answer, the state before one of them does. The
    /// request checked its pool and took the tree's lock before that
    /// step acted (a reclaim's probe fires before it takes the lock, a
    /// decay's detach may come after a pool check) and wrote its event
    /// later.
    pub step_allocs: u64,
    /// Judged: each allocation run ahead of its event or of a purge step,
    /// as (its line, the line of the command it ran ahead of) in the
    /// trace.
    pub ahead: Vec<(usize, usize)>,
}

impl Verdict {
    fn count(&mut self, id: &str, linux: Option<u64>, ours: Option<u64>) {
        self.allocs += 1;
        if linux == ours {
            self.same += 1;
        } else if self.differ.len() < 8 {
            self.differ.push((id.to_string(), linux, ours));
        }
    }
}

/// Linux's answers of `expected` (`ID 0xaddr` or `ID nospace` a line).
///
/// # Errors
/// A line of another form, with its number.
pub fn answers(expected: &str) -> Result<HashMap<String, Option<u64>>, String> {
    let mut map = HashMap::new();
    for (i, line) in expected.lines().enumerate() {
        let bad = || format!("expected output line {}: {line:?}", i + 1);
        let (id, ans) = line.split_once(' ').ok_or_else(bad)?;
        let addr = match ans {
            "nospace" => None,
            hex => Some(
                hex.strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or_else(bad)?,
            ),
        };
        map.insert(id.to_string(), addr);
    }
    Ok(map)
}

/// Replays `trace` on a fresh [`LinuxNodes`] (its `cpus` nodes, its
/// `vmalloc` window); with `judged`, each allocation with an answer in
/// `linux` is compared and then given Linux's address.
///
/// # Errors
/// A malformed trace, or (judged) a Linux address this state cannot
/// give: the states differ.
pub fn replay(
    trace: &str,
    linux: &HashMap<String, Option<u64>>,
    judged: bool,
) -> Result<Verdict, String> {
    let h = check_header(trace.as_bytes()).map_err(|e| e.to_string())?;
    let cpus = h.cpus.unwrap_or(1).min(128) as usize;
    let (s, e) = h.space;
    let mut n =
        LinuxNodes::new(s, e, cpus, h.vmalloc.unwrap_or((s, e))).map_err(|e| e.to_string())?;
    let mut ids: HashMap<String, u64> = HashMap::new();
    let mut v = Verdict::default();
    // Purges run ahead of their event.
    let mut early = 0u64;
    // Judged: a purge window open (its begin not run yet), and whether
    // its `purge begin` line has been passed.
    let mut pending: Option<(bool, bool)> = None;
    // Judged: the window's begin ran before its `purge begin` line.
    let mut skip_begin = false;
    let cmds: Vec<(usize, Cmd)> = Commands::new(trace.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    // The CPUs the allocations name, for the look ahead's end.
    let traced_cpus = cmds
        .iter()
        .filter_map(|(_, c)| alloc_of(c))
        .map(|(_, c, _)| c as usize + 1)
        .max()
        .unwrap_or(0);
    // Judged: the allocations run ahead of their event, by index.
    let mut ran_ahead = std::collections::HashSet::new();
    let after_steps = allocs_after_steps(&cmds);
    // Judged: before each purge step of the run just replayed, the answer
    // the allocation after the run (its index) would have got there.
    let mut step_answers: Vec<(usize, Option<u64>)> = Vec::new();
    let mut answers_for = None;
    for (i, (line, cmd)) in cmds.iter().cloned().enumerate() {
        if ran_ahead.remove(&i) {
            continue;
        }
        if let (Some((j, c, (size, align, window))), true) = (after_steps[i], judged) {
            if answers_for != Some(j) {
                (step_answers, answers_for) = (Vec::new(), Some(j));
            }
            n.set_cpu(c as usize);
            step_answers.push((i, n.peek(size, align, window)));
        }
        let ends_window = matches!(
            cmd,
            Cmd::Lazy(_)
                | Cmd::Free(_)
                | Cmd::FreeAt(_)
                | Cmd::Purge
                | Cmd::PurgeFull
                | Cmd::PurgeNode(_)
                | Cmd::PurgeStep(PurgeStep::Start { .. })
        );
        if let (true, Some((full, seen))) = (ends_window, pending) {
            // The latest point of the window: the begin runs here.
            n.purge_begin(full);
            (pending, skip_begin) = (None, !seen);
        }
        match cmd {
            Cmd::LazyMax(b) => n.set_lazy_max(b),
            Cmd::Alloc {
                id,
                size,
                align,
                range,
                cpu,
            } => {
                n.set_cpu(cpu.unwrap_or(0) as usize);
                let window = range.unwrap_or((s, e));
                let want = linux.get(&id).copied();
                if let (Some((full, seen)), Some(Some(addr))) = (pending, want) {
                    // The begin is due when Linux's answer is not the one
                    // the state before it gives.
                    if n.peek(size, align, window) != Some(addr) {
                        n.purge_begin(full);
                        (pending, skip_begin) = (None, !seen);
                        v.window_begins += 1;
                    }
                }
                if let (true, Some(Some(addr))) = (judged, want) {
                    let ours = n.peek(size, align, window);
                    if let Some(j) = ours
                        .filter(|&a| a != addr)
                        .and_then(|a| delayed(&cmds, (i, cpu.unwrap_or(0)), traced_cpus, a, linux))
                    {
                        let (own_id, own_cpu, req) = alloc_of(&cmds[j].1).expect("an alloc");
                        let got = linux[own_id].expect("Linux's address");
                        n.set_cpu(own_cpu as usize);
                        let r = (req.0, req.1, req.2, got);
                        let theirs = judge_one(&mut n, r, &mut early, &mut v)
                            .map_err(|e| format!("line {}: {own_id}: {e}", cmds[j].0))?;
                        v.count(own_id, Some(got), theirs);
                        ids.insert(own_id.clone(), got);
                        ran_ahead.insert(j);
                        v.early_allocs += 1;
                        v.ahead.push((cmds[j].0, line));
                        n.set_cpu(cpu.unwrap_or(0) as usize);
                    }
                }
                if let (true, Some(Some(addr))) = (judged, want) {
                    // The latest purge step before which the model gives
                    // Linux's answer: the request took its pool and the
                    // tree's lock before that step, its event came later.
                    let steps = if answers_for == Some(i) {
                        &step_answers[..]
                    } else {
                        &[]
                    };
                    let before = (n.peek(size, align, window) != Some(addr))
                        .then(|| steps.iter().rev().find(|&&(_, a)| a == Some(addr)))
                        .flatten();
                    if let Some(&(k, _)) = before {
                        n.alloc_at(size, align, window, addr)
                            .map_err(|e| format!("line {line}: Linux's {addr:#x} for {id}: {e}"))?;
                        v.count(&id, Some(addr), Some(addr));
                        v.step_allocs += 1;
                        v.ahead.push((line, cmds[k].0));
                        ids.insert(id, addr);
                        continue;
                    }
                }
                let ours = match want {
                    Some(Some(addr)) if judged => {
                        judge_one(&mut n, (size, align, window, addr), &mut early, &mut v)
                            .map_err(|e| format!("line {line}: Linux's {addr:#x} for {id}: {e}"))?
                    }
                    // Linux failed: on Linux's state nothing is taken, and
                    // a take undone would still reshape the tree.
                    Some(None) if judged => n.peek(size, align, window),
                    // The trace carries the purge of a failed try: one try.
                    _ => n.alloc_once(size, align, window.0, window.1).ok(),
                };
                if let Some(w) = want {
                    v.count(&id, w, ours);
                }
                let now = if judged { want.flatten() } else { ours };
                if let Some(a) = now {
                    ids.insert(id, a);
                }
            }
            Cmd::Lazy(id) | Cmd::Free(id) => {
                if let Some(a) = ids.remove(&id) {
                    let _ = n.free_lazy(a);
                }
            }
            Cmd::FreeAt(a) => {
                let _ = n.free(a);
            }
            Cmd::Purge | Cmd::PurgeFull if early > 0 => early -= 1,
            Cmd::Purge => {
                n.purge(&mut |_, _| {});
            }
            Cmd::PurgeFull if n.purge_pending() => {
                n.purge_end();
            }
            Cmd::PurgeFull => {
                n.purge_nodes(true);
            }
            Cmd::PurgeWindow(full) if judged => pending = Some((full, false)),
            Cmd::PurgeWindow(_) => {}
            // The window decides where its begin runs.
            Cmd::PurgeBegin(_) if pending.is_some() => pending = pending.map(|(f, _)| (f, true)),
            Cmd::PurgeBegin(_) if skip_begin => skip_begin = false,
            Cmd::PurgeBegin(full) => n.purge_begin(full),
            Cmd::PurgeNode(node) => {
                n.purge_node(node);
            }
            Cmd::PurgeStep(step) => {
                n.purge_step(step);
            }
            Cmd::Space(..) | Cmd::Cpus(_) | Cmd::Vmalloc(..) => {}
        }
    }
    v.pool_hits = n.pool_hits();
    v.shrinks = n.inferred_shrinks();
    v.detaches = n.inferred_detaches();
    Ok(v)
}

/// For each purge step (`purge node N` or a [`PurgeStep`]), the
/// allocation that ends the run of steps it is in, if one does: its
/// index, CPU and request.
fn allocs_after_steps(cmds: &[(usize, Cmd)]) -> Vec<Option<(usize, u32, Request)>> {
    let mut out = vec![None; cmds.len()];
    let mut next = None;
    for (i, (_, cmd)) in cmds.iter().enumerate().rev() {
        match cmd {
            Cmd::PurgeStep(_) | Cmd::PurgeNode(_) => out[i] = next,
            cmd => next = alloc_of(cmd).map(|(_, cpu, req)| (i, cpu, req)),
        }
    }
    out
}

/// The longest look ahead for a request whose event came late.
const LOOK_AHEAD: usize = 4096;

/// The index of a later allocation on another CPU that Linux gave `addr`,
/// with no allocation of that CPU between `at` and it: its event came
/// late, and its request took `addr` before the one at `at` (which
/// `addr` would otherwise serve).
fn delayed(
    cmds: &[(usize, Cmd)],
    (at, cpu): (usize, u32),
    traced_cpus: usize,
    addr: u64,
    linux: &HashMap<String, Option<u64>>,
) -> Option<usize> {
    // The CPUs that allocated since `at`: none of their later requests
    // can have come first. The search ends when every other CPU has.
    let mut silent: Vec<u32> = Vec::new();
    for (j, (_, cmd)) in cmds.iter().enumerate().skip(at + 1).take(LOOK_AHEAD) {
        if silent.len() + 1 >= traced_cpus {
            break;
        }
        let Some((id, c, _)) = alloc_of(cmd) else {
            continue;
        };
        if c == cpu || silent.contains(&c) {
            continue;
        }
        if linux.get(id) == Some(&Some(addr)) {
            return Some(j);
        }
        silent.push(c);
    }
    None
}

/// A request: size, alignment, window.
type Request = (u64, u64, (u64, u64));

/// An `alloc`'s ID, CPU and request.
fn alloc_of(cmd: &Cmd) -> Option<(&String, u32, Request)> {
    match cmd {
        Cmd::Alloc {
            id,
            size,
            align,
            range: Some(range),
            cpu,
        } => Some((id, cpu.unwrap_or(0), (*size, *align, *range))),
        _ => None,
    }
}

/// One allocation judged: if Linux's address is still lazily freed here,
/// the purge that freed it ran before its event was recorded, so it runs
/// now and its event is skipped.
fn judge_one(
    n: &mut LinuxNodes,
    (size, align, window, addr): (u64, u64, (u64, u64), u64),
    early: &mut u64,
    v: &mut Verdict,
) -> Result<Option<u64>, mmkit::AllocError> {
    match n.alloc_judged(size, align, window, addr) {
        Err(_) if n.lazy_overlap(addr, addr + size) => {
            n.purge(&mut |_, _| {});
            *early += 1;
            v.early_purges += 1;
            n.alloc_judged(size, align, window, addr)
        }
        r => r,
    }
}
