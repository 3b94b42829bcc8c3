//! The stale-TLB detector: every CPU reads through addresses that were
//! unmapped and remapped to new frames, and must see the new frames' words
//! once the flush the design promises has returned.
//!
//! [`rounds`] is the harness. In each round CPU 0 changes mappings (what
//! changes and what is flushed is up to the code under test) and publishes
//! the pages to read with the word each must hold ([`tag`]: the round and
//! the page's address); then every online CPU, whose TLB still holds the
//! translations of its reads in the round before, reads every page. Each
//! CPU counts its own reads and its stale ones (a word that is not the
//! tag); the next round starts once every CPU has read. A stale
//! translation reads a frame that either holds an older round's tag or
//! another page's, never this page's tag of the current round.
//!
//! [`run`] drives the shootdown directly: a *cycle* is one page of a
//! [`PAGES`]-page area unmapped (its PTE cleared), flushed, remapped to a
//! different frame and read by every CPU. Rounds take turns at the two
//! ways a flush works ([`tlb`]): most remap the whole area under one
//! flush (past the ceiling: a CR3 reload on every CPU); every fourth
//! remaps one chunk of [`tlb::CEILING`] pages (an `invlpg` per page on
//! every CPU). Each round costs two hand-offs between CPUs (the shootdown
//! and the readers' acknowledgement), which under emulation dominate a
//! round: the rounds are large so that 10^6 cycles take seconds. The run
//! with a flush skipped skips it after 20 rounds, when every CPU's TLB has
//! held the area's translations in steady use (an emulated TLB that was
//! just flushed starts small). The vmalloc layer's own decisions are
//! judged through the same harness in `stale_vmalloc`.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use spin::Mutex;

use crate::paging::{self, VMALLOC_START};
use crate::phys::DataFrame;
use crate::{arch, fault, mm, percpu, smp, time, tlb};
use mmkit_vmalloc::PAGE;

/// Pages remapped per round of [`run`] (cycles per round).
pub const PAGES: u64 = 1024;

/// A page every CPU reads in a round, and the word it must find there.
pub type Expect = (u64, u64);

/// One CPU's reads in the rounds counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTally {
    /// Reads made.
    pub reads: u64,
    /// Reads that did not return the round's tag.
    pub stale: u64,
}

/// What a run of rounds saw.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Per CPU, in CPU order.
    pub per_cpu: Vec<CpuTally>,
    /// Range flushes issued during the rounds.
    pub flushes: u64,
    /// Nanoseconds the rounds took.
    pub ns: u64,
}

impl Seen {
    /// Reads over every CPU.
    pub fn reads(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.reads).sum()
    }

    /// Stale reads over every CPU.
    pub fn stale(&self) -> u64 {
        self.per_cpu.iter().map(|c| c.stale).sum()
    }

    /// `stale/reads` of each CPU, separated by commas.
    pub fn by_cpu(&self) -> String {
        let each: Vec<String> = self
            .per_cpu
            .iter()
            .map(|c| format!("{}/{}", c.stale, c.reads))
            .collect();
        each.join(",")
    }

    /// `Err` naming every CPU that read a stale word.
    pub fn none_stale(&self, what: &str) -> Result<(), String> {
        if self.per_cpu.iter().all(|c| c.stale == 0) {
            Ok(())
        } else {
            Err(format!("{what}: stale/reads by CPU {}", self.by_cpu()))
        }
    }
}

/// The word page `va` holds in round `g`.
pub fn tag(g: u64, va: u64) -> u64 {
    g << 32 | (((va - VMALLOC_START) / PAGE) & 0xffff_ffff)
}

/// Writes `tag(g, va)` into each of `frames`, mapped in turn at the pages
/// from `va0`, through their tokens (not through `va`, whose translation
/// is what the readers judge), and appends the pages to `expect`.
pub fn tag_frames(g: u64, va0: u64, frames: &mut [DataFrame], expect: &mut Vec<Expect>) {
    for (p, f) in (0..).zip(frames.iter_mut()) {
        let va = va0 + p * PAGE;
        f.write(tag(g, va));
        expect.push((va, tag(g, va)));
    }
}

/// Runs rounds `0..=last`: in round `g`, CPU 0 calls `remap(g)`, which
/// changes mappings as the code under test decides and returns the pages
/// to read; then every online CPU reads them all. Rounds before `count_from`
/// warm the TLBs and are not counted. An `Err` from `remap` ends the run.
pub fn rounds<F>(last: u64, count_from: u64, remap: F) -> Result<Seen, String>
where
    F: FnMut(u64) -> Result<Vec<Expect>, String> + Send,
{
    let cpus = percpu::online();
    let others = cpus as u64 - 1;
    // Round g is published as g + 1; 0 is "nothing yet".
    let published = AtomicU64::new(0);
    let acks = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let pages: Mutex<Vec<Expect>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let remap = Mutex::new(remap);
    let (_, flushes0, _) = tlb::counters();
    let t0 = arch::rdtsc();
    let read = |g: u64, tally: &mut CpuTally| {
        let list = pages.lock();
        let stale = list
            .iter()
            .filter(|&&(va, want)| fault::probe_read(va) != Some(want))
            .count() as u64;
        if g >= count_from {
            tally.reads += list.len() as u64;
            tally.stale += stale;
        }
    };
    let per_cpu = smp::run_on(cpus, |cpu| {
        let mut tally = CpuTally::default();
        if cpu != 0 {
            let mut seen = 0;
            loop {
                let now = published.load(Ordering::Acquire);
                if now == seen {
                    arch::pause();
                    continue;
                }
                if stop.load(Ordering::Acquire) {
                    return tally;
                }
                read(now - 1, &mut tally);
                seen = now;
                acks.fetch_add(1, Ordering::AcqRel);
                if now > last {
                    return tally;
                }
            }
        }
        let mut remap = remap.lock();
        for g in 0..=last {
            match remap(g) {
                Ok(list) => *pages.lock() = list,
                Err(e) => {
                    *failure.lock() = Some(format!("round {g}: {e}"));
                    stop.store(true, Ordering::Release);
                    published.fetch_add(1, Ordering::AcqRel);
                    return tally;
                }
            }
            published.store(g + 1, Ordering::Release);
            read(g, &mut tally);
            while acks.load(Ordering::Acquire) < (g + 1) * others {
                arch::pause();
            }
        }
        tally
    });
    let ns = time::ns(arch::rdtsc() - t0);
    let (_, flushes1, _) = tlb::counters();
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    Ok(Seen {
        per_cpu,
        flushes: flushes1 - flushes0,
        ns,
    })
}

/// What a run of [`run`] saw, and its cycles.
#[derive(Debug, Clone)]
pub struct Run {
    /// Cycles of the rounds counted: pages remapped and read by every CPU.
    pub cycles: u64,
    /// The reads.
    pub seen: Seen,
}

/// Runs `rounds` rounds of the page-level detector after round 0; with
/// `skip_at = Some(g)`, round `g` remaps without a flush and only rounds
/// from `g` on are counted.
pub fn run(rounds_after_0: u64, skip_at: Option<u64>) -> Result<Run, String> {
    let cpu0 = arch::cpu_id();
    let n = PAGES as usize;
    let mut pools: Vec<DataFrame> = (0..2 * n).filter_map(|_| DataFrame::alloc(cpu0)).collect();
    if pools.len() != 2 * n {
        pools.into_iter().for_each(|f| f.free(cpu0));
        return Err("no frames for the detector's pools".into());
    }
    let va = mm::vmalloc(mm::tree(), PAGES, PAGE).map_err(|e| format!("vmalloc: {e}"))?;
    // The area's own frames are kept aside; the detector maps its pools.
    let own: Vec<u64> = (0..PAGES)
        .filter_map(|p| paging::translate(va + p * PAGE))
        .collect();
    // Which pool each page's frame comes from next.
    let mut next = alloc::vec![0u8; n];
    let count_from = skip_at.unwrap_or(1);
    let mut cycles = 0;
    let seen = rounds(rounds_after_0, count_from, |g| {
        let chosen = round_pages(g);
        for p in chosen.clone() {
            paging::clear(va + p * PAGE);
        }
        // The test with a flush skipped leaves the current round's out: no hook
        // in the shootdown itself.
        if skip_at != Some(g) {
            tlb::flush_range(va + chosen.start * PAGE, va + chosen.end * PAGE);
        }
        let mut expect = Vec::with_capacity(n);
        for p in chosen.clone() {
            let k = &mut next[p as usize];
            let f = &mut pools[usize::from(*k) * n + p as usize];
            *k ^= 1;
            // The area's tables exist: a remap needs no new page.
            if !paging::map(va + p * PAGE, f.pfn()) {
                return Err(format!("remapping page {p} failed"));
            }
            // Every CPU reads the pages remapped in the current round.
            tag_frames(g, va + p * PAGE, core::slice::from_mut(f), &mut expect);
        }
        if g >= count_from {
            cycles += chosen.end - chosen.start;
        }
        Ok(expect)
    });
    let restored = (0..PAGES).all(|p| {
        paging::clear(va + p * PAGE);
        paging::map(va + p * PAGE, own[p as usize])
    });
    tlb::flush_range(va, va + PAGES * PAGE);
    mm::vfree(mm::tree(), va).map_err(|e| format!("vfree: {e}"))?;
    pools.into_iter().for_each(|f| f.free(cpu0));
    if !restored {
        return Err("restoring the area's own frames failed".into());
    }
    Ok(Run {
        cycles,
        seen: seen?,
    })
}

/// Every this many rounds, one flushes a chunk; the others flush the
/// whole area.
const CHUNK_EVERY: u64 = 4;

/// The pages round `g` remaps: one chunk of [`tlb::CEILING`] pages in
/// every [`CHUNK_EVERY`]th round (the chunks in turn), all of them in the
/// others and in round 0.
fn round_pages(g: u64) -> core::ops::Range<u64> {
    if g == 0 || g % CHUNK_EVERY != 0 {
        0..PAGES
    } else {
        let c = (g / CHUNK_EVERY - 1) % (PAGES / tlb::CEILING);
        c * tlb::CEILING..(c + 1) * tlb::CEILING
    }
}

/// Cycles of rounds `1..=rounds`.
pub fn cycles_of(rounds: u64) -> u64 {
    let chunks = rounds / CHUNK_EVERY;
    (rounds - chunks) * PAGES + chunks * tlb::CEILING
}

/// The fewest rounds with at least `cycles` cycles.
pub fn rounds_for(cycles: u64) -> u64 {
    let group = (CHUNK_EVERY - 1) * PAGES + tlb::CEILING;
    let mut r = (CHUNK_EVERY * (cycles / group)).max(1);
    while cycles_of(r) < cycles {
        r += 1;
    }
    r
}
