//! The stale-TLB detector: every CPU reads through addresses that were
//! unmapped and remapped to new frames, and must see the new frames' bytes
//! once the flush the design promises has returned.
//!
//! A *cycle* is one page of the detector's area unmapped (its PTE
//! cleared), flushed, remapped to a different frame that holds a new tag,
//! and read back by every online CPU. Cycles run in rounds of [`PAGES`]
//! pages: CPU 0 clears the round's PTEs, flushes them, writes the round's
//! tag into each page's new frame through the identity map, maps the new
//! frames and publishes the round; every CPU (CPU 0 too), whose TLB holds
//! the old translations from its reads of the previous round, reads every
//! page and counts the words that are not the new tag. The next round
//! starts once every CPU has read. The frames alternate between two pools,
//! so a stale translation reads the previous round's tag.
//!
//! Rounds take turns at the two ways a flush works ([`tlb`]): most remap
//! the whole area under one flush (past the ceiling: a CR3 reload on every
//! CPU); every fourth remaps one chunk of [`tlb::CEILING`] pages (an
//! `invlpg` per page on every CPU). Each round costs two hand-offs between
//! CPUs (the shootdown and the readers' acknowledgement), which under
//! emulation dominate a round: the rounds are large so that 10^6 cycles
//! take seconds, not hours.
//!
//! The run with a flush skipped skips it after 20 rounds, when every CPU's
//! TLB has held the area's translations in steady use (an emulated TLB
//! that was just flushed starts small).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::paging;
use crate::{arch, fault, mm, percpu, phys, smp, time, tlb};
use mmkit_vmalloc::PAGE;

/// Pages remapped per round (cycles per round).
pub const PAGES: u64 = 1024;

/// What a run of the detector saw.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Cycles run: rounds times [`PAGES`].
    pub cycles: u64,
    /// Reads made (every CPU reads every page of every round).
    pub reads: u64,
    /// Reads that did not return the current round's tag.
    pub stale: u64,
    /// Flushes (range shootdowns) issued.
    pub flushes: u64,
    /// Nanoseconds the rounds took.
    pub ns: u64,
}

/// The tag of page `p` in round `g`.
fn tag(g: u64, p: u64) -> u64 {
    g << 32 | p
}

/// Runs `rounds` rounds; with `skip_at = Some(g)`, the first flush of
/// round `g` is skipped (the test-only switch of [`tlb`]).
pub fn run(rounds: u64, skip_at: Option<u64>) -> Result<Run, String> {
    static GEN: AtomicU64 = AtomicU64::new(0);
    static ACKS: AtomicU64 = AtomicU64::new(0);
    static STALE: AtomicU64 = AtomicU64::new(0);
    static UNWRITTEN: AtomicU64 = AtomicU64::new(0);
    let cpus = percpu::online();
    let cpu0 = arch::cpu_id();
    let n = PAGES as usize;
    let pools: Vec<u64> = (0..2 * n)
        .filter_map(|_| phys::alloc(cpu0, 0, true))
        .collect();
    if pools.len() != 2 * n {
        for &f in &pools {
            phys::free(cpu0, f, 0);
        }
        return Err("no frames for the detector's pools".into());
    }
    let va = mm::vmalloc(mm::tree(), PAGES, PAGE).map_err(|e| format!("vmalloc: {e}"))?;
    // The area's own frames are kept aside; the detector maps its pools.
    let own: Vec<u64> = (0..PAGES)
        .filter_map(|p| paging::translate(va + p * PAGE))
        .collect();
    GEN.store(0, Ordering::SeqCst);
    ACKS.store(0, Ordering::SeqCst);
    STALE.store(0, Ordering::SeqCst);
    UNWRITTEN.store(0, Ordering::SeqCst);
    for p in 0..PAGES {
        let f = pools[p as usize];
        // Round 0's tags; the area's tables exist, so the remap needs no
        // new page.
        if !mm::write_frame(f, tag(0, p)) {
            UNWRITTEN.fetch_add(1, Ordering::SeqCst);
        }
        paging::clear(va + p * PAGE);
        if !paging::map(va + p * PAGE, f) {
            UNWRITTEN.fetch_add(1, Ordering::SeqCst);
        }
    }
    tlb::flush_range(va, va + PAGES * PAGE);
    let (_, flushes0, _) = tlb::counters();
    let t0 = arch::rdtsc();
    let pools2 = pools.clone();
    smp::run_on(cpus, move |cpu| {
        let read = |g: u64| {
            let stale = round_pages(g)
                .filter(|&p| fault::probe_read(va + p * PAGE) != Some(tag(g, p)))
                .count() as u64;
            if stale != 0 {
                STALE.fetch_add(stale, Ordering::SeqCst);
            }
        };
        if cpu != 0 {
            read(0);
            ACKS.fetch_add(1, Ordering::AcqRel);
            let mut seen = 0;
            while seen < rounds {
                let g = GEN.load(Ordering::Acquire);
                if g == seen {
                    arch::pause();
                    continue;
                }
                read(g);
                seen = g;
                ACKS.fetch_add(1, Ordering::AcqRel);
            }
            return;
        }
        read(0);
        let others = cpus as u64 - 1;
        while ACKS.load(Ordering::Acquire) < others {
            arch::pause();
        }
        // Which pool each page's frame comes from next.
        let mut next = [1u8; PAGES as usize];
        for g in 1..=rounds {
            let pages = round_pages(g);
            for p in pages.clone() {
                paging::clear(va + p * PAGE);
            }
            if skip_at == Some(g) {
                tlb::skip_next_flush();
            }
            tlb::flush_range(va + pages.start * PAGE, va + pages.end * PAGE);
            for p in pages {
                let k = &mut next[p as usize];
                let f = pools2[usize::from(*k) * n + p as usize];
                *k ^= 1;
                if !mm::write_frame(f, tag(g, p)) || !paging::map(va + p * PAGE, f) {
                    UNWRITTEN.fetch_add(1, Ordering::SeqCst);
                }
            }
            GEN.store(g, Ordering::Release);
            read(g);
            while ACKS.load(Ordering::Acquire) < (g + 1) * others {
                arch::pause();
            }
        }
    });
    let ns = time::ns(arch::rdtsc() - t0);
    let (_, flushes1, _) = tlb::counters();
    for p in 0..PAGES {
        paging::clear(va + p * PAGE);
        if !paging::map(va + p * PAGE, own[p as usize]) {
            return Err("restoring the area's own frames failed".into());
        }
    }
    tlb::flush_range(va, va + PAGES * PAGE);
    mm::vfree(mm::tree(), va).map_err(|e| format!("vfree: {e}"))?;
    for f in pools {
        phys::free(cpu0, f, 0);
    }
    let unwritten = UNWRITTEN.load(Ordering::SeqCst);
    if unwritten != 0 {
        return Err(format!("{unwritten} frame writes or maps refused"));
    }
    Ok(Run {
        cycles: cycles_of(rounds),
        reads: (cycles_of(rounds) + PAGES) * cpus as u64,
        stale: STALE.load(Ordering::SeqCst),
        flushes: flushes1 - flushes0,
        ns,
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
