//! The stale-TLB detector through the vmalloc layer: the layer, not the
//! test, decides what to flush and when, and every CPU reads each page the
//! layer hands out again ([`stale::rounds`]).
//!
//! - [`vfree_reuse`]: each round vfrees the last round's areas (an eager
//!   layer flushes each; a lazy one puts it on its lazy list and purges
//!   when the list passes its threshold, set low here so that purges come
//!   in batches of a few areas or of all of them) and vmallocs new ones,
//!   which take the addresses the purges released.
//! - [`map_ram_reuse`]: each round `vm_unmap_ram`s the last round's ranges
//!   (newest first, as a map-touch-unmap loop frees them) and
//!   `vm_map_ram`s new ones on one CPU's front end, the CPUs in turn;
//!   whole blocks go back to the tree layer and come out again after a
//!   purge.
//!
//! Both run with the single-page flush ceiling raised so that every flush
//! is an `invlpg` per page: a CR3 reload would hide a flush that names too
//! few pages.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mmkit::range::RangeAllocator;
use mmkit_vmalloc::{Flush, Vmalloc, PAGE};

use crate::mm::{self, KernelMmu, Lock};
use crate::phys::DataFrame;
use crate::stale::{self, Expect, Seen};
use crate::{arch, percpu, tlb};

/// `vm_map_ram` ranges per round.
const RANGES: u64 = 24;

/// A deterministic spread of sizes: splitmix64 of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Raises the flush ceiling for the life of the guard.
struct PerPageFlushes(u64);

impl PerPageFlushes {
    fn new() -> Self {
        PerPageFlushes(tlb::set_ceiling(u64::MAX))
    }
}

impl Drop for PerPageFlushes {
    fn drop(&mut self) {
        tlb::set_ceiling(self.0);
    }
}

/// `rounds` rounds of vfree and vmalloc of `areas` areas of 1 to 16 pages
/// on `layer` (after a warm-up round), every page of every area read by
/// every CPU.
pub fn vfree_reuse<R: RangeAllocator + Send>(
    layer: &'static Lock<Vmalloc<R>>,
    rounds: u64,
    areas: u64,
) -> Result<Seen, String> {
    let _ceiling = PerPageFlushes::new();
    let cpu0 = arch::cpu_id();
    let policy = mm::locked(layer).flush_policy();
    // Each live area and its frames, whose tokens the test keeps: the
    // layer maps their numbers.
    let mut live: Vec<(u64, Vec<DataFrame>)> = Vec::new();
    let vfree_all = |live: &mut Vec<(u64, Vec<DataFrame>)>| -> Result<(), String> {
        for (va, frames) in live.drain(..) {
            mm::locked(layer)
                .vunmap(&mut KernelMmu, va)
                .map_err(|e| format!("vfree {va:#x}: {e}"))?;
            frames.into_iter().for_each(|f| f.free(cpu0));
        }
        Ok(())
    };
    let seen = stale::rounds(rounds, 1, |g| {
        if let Flush::Lazy { .. } = policy {
            // Batches of about 32 pages and of a whole round in turn.
            let max_bytes = PAGE << (5 + 3 * (g % 2));
            mm::locked(layer).set_flush_policy(Flush::Lazy { max_bytes });
        }
        vfree_all(&mut live)?;
        let mut expect: Vec<Expect> = Vec::new();
        for i in 0..areas {
            let pages = 1 + mix(g << 16 | i) % 16;
            let mut frames = frames(cpu0, pages)?;
            let pfns = frames.iter().map(DataFrame::pfn).collect();
            let va = match mm::locked(layer).vmap(&mut KernelMmu, pfns, PAGE) {
                Ok(va) => va,
                Err(e) => {
                    frames.into_iter().for_each(|f| f.free(cpu0));
                    return Err(format!("vmalloc: {e}"));
                }
            };
            stale::tag_frames(g, va, &mut frames, &mut expect);
            live.push((va, frames));
        }
        Ok(expect)
    });
    let left = vfree_all(&mut live);
    let mut l = mm::locked(layer);
    l.set_flush_policy(policy);
    l.purge(&mut KernelMmu);
    drop(l);
    left?;
    seen
}

/// `n` data frames from `cpu`'s lists, or none.
fn frames(cpu: usize, n: u64) -> Result<Vec<DataFrame>, String> {
    let frames: Vec<DataFrame> = (0..n).filter_map(|_| DataFrame::alloc(cpu)).collect();
    if frames.len() as u64 == n {
        Ok(frames)
    } else {
        frames.into_iter().for_each(|f| f.free(cpu));
        Err("no frames".into())
    }
}

/// `rounds` rounds of `vm_unmap_ram` and `vm_map_ram` (after a warm-up
/// round), every page read by every CPU; the tree layer purges past one
/// block of released blocks meanwhile.
pub fn map_ram_reuse(rounds: u64) -> Result<Seen, String> {
    let _ceiling = PerPageFlushes::new();
    let cpus = percpu::online();
    let cpu0 = arch::cpu_id();
    let policy = mm::locked(mm::tree()).flush_policy();
    mm::locked(mm::tree()).set_flush_policy(Flush::Lazy { max_bytes: 4 << 20 });
    // (front end, address, frames), newest last.
    let mut live: Vec<(usize, u64, Vec<DataFrame>)> = Vec::new();
    let unmap_all = |live: &mut Vec<(usize, u64, Vec<DataFrame>)>| -> Result<(), String> {
        while let Some((cpu, va, frames)) = live.pop() {
            mm::map_ram(cpu)
                .lock()
                .unmap(&mut KernelMmu, va, frames.len())
                .map_err(|e| format!("vm_unmap_ram {va:#x}: {e}"))?;
            frames.into_iter().for_each(|f| f.free(cpu0));
        }
        Ok(())
    };
    let seen = stale::rounds(rounds, 1, |g| {
        unmap_all(&mut live)?;
        let cpu = g as usize % cpus;
        let mut expect: Vec<Expect> = Vec::new();
        for i in 0..RANGES {
            let pages = 1 + mix(g << 16 | i) % 64;
            let mut frames = frames(cpu0, pages)?;
            let pfns: Vec<u64> = frames.iter().map(DataFrame::pfn).collect();
            let va = match mm::map_ram(cpu).lock().map(&mut KernelMmu, 0, &pfns) {
                Ok(va) => va,
                Err(e) => {
                    frames.into_iter().for_each(|f| f.free(cpu0));
                    return Err(format!("vm_map_ram: {e}"));
                }
            };
            stale::tag_frames(g, va, &mut frames, &mut expect);
            live.push((cpu, va, frames));
        }
        Ok(expect)
    });
    let left = unmap_all(&mut live);
    mm::locked(mm::tree()).set_flush_policy(policy);
    for cpu in 0..cpus {
        mm::map_ram(cpu).lock().unmap_aliases(&mut KernelMmu);
    }
    left?;
    seen
}
