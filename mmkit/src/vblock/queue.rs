//! One CPU's queue: the blocks it created and its list of blocks with free
//! pages.
//!
//! ```text
//!  slab:  [vb0][vb1 spare][vb2][vb3]     blocks, by slot; spare slots are
//!                                        reused (no allocation per block)
//!  list:  HEAD -> 2 -> 0 -> TAIL         slots with free > 0, searched
//!                                        from HEAD (first fit)
//!  by_va: va_start -> slot               this CPU's blocks, so an unmap on
//!                                        the mapping CPU needs no global index
//! ```
//!
//! Invariants: a slot is in `spare` iff its block is not in use; a block is
//! on `list` iff it is in use and `free > 0`, and appears there once;
//! `by_va` maps exactly the blocks in use to their slots.
//! The queue knows nothing of the range allocator or the index: it reports
//! the blocks it released, and its owner gives their ranges back.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use super::block::Block;
use super::{Config, Counters, Policy};
use crate::ensure;
use crate::error::CheckError;

/// One CPU's blocks (see the module docs).
#[derive(Debug)]
pub(crate) struct Queue {
    policy: Policy,
    bits: u32,
    slab: Vec<Block>,
    spare: Vec<u32>,
    list: VecDeque<u32>,
    by_va: BTreeMap<u64, u32>,
    /// Pages asked for by the live mappings in this queue's blocks (a
    /// block's `live` counts whole `2^order` slots, so it cannot say).
    live_pages: u64,
    /// This CPU's counters.
    pub counters: Counters,
}

impl Queue {
    pub fn new(cfg: &Config, policy: Policy) -> Queue {
        Queue {
            policy,
            bits: cfg.bits32(),
            slab: Vec::new(),
            spare: Vec::new(),
            list: VecDeque::new(),
            by_va: BTreeMap::new(),
            live_pages: 0,
            counters: Counters::default(),
        }
    }

    /// First fit over the list: the address of `pages` pages (using
    /// `2^order`), or `None` when no listed block can serve it. Legacy purges this CPU's
    /// fragmented blocks when a search failed in one with nothing live;
    /// their starts are pushed on `released`.
    #[inline]
    pub fn alloc(&mut self, pages: u32, page: u64, released: &mut Vec<u64>) -> Option<u64> {
        // Fast path: the head block serves nearly every request. A failure
        // changes nothing, and the full walk below looks at it again.
        if let Some(&slot) = self.list.front() {
            let vb = &mut self.slab[slot as usize];
            if let Some(off) = vb.alloc(self.policy, pages) {
                let addr = vb.va_start + u64::from(off) * page;
                if vb.free == 0 {
                    vb.on_list = false;
                    self.list.pop_front();
                }
                self.live_pages += u64::from(pages);
                return Some(addr);
            }
        }
        let mut purge = false;
        let mut found = None;
        for (pos, &slot) in self.list.iter().enumerate() {
            let vb = &mut self.slab[slot as usize];
            match vb.alloc(self.policy, pages) {
                Some(off) => {
                    found = Some((pos, slot, vb.va_start + u64::from(off) * page));
                    break;
                }
                // Only Legacy's aligned search fails with free >= 2^order.
                None => purge |= vb.free >= pages.next_power_of_two() && vb.live == 0,
            }
        }
        if let Some((pos, slot, _)) = found {
            if self.slab[slot as usize].free == 0 {
                self.slab[slot as usize].on_list = false;
                self.list.remove(pos);
            }
        }
        if purge {
            self.purge_fragmented(true, released);
        }
        let (_, _, addr) = found?;
        self.live_pages += u64::from(pages);
        Some(addr)
    }

    /// Installs a new block at `va_start`. Current occupies its first
    /// `2^order` pages for the `pages` asked at once and appends it to the
    /// TAIL, returning their
    /// address; Legacy puts it empty at the HEAD and returns `None` (the
    /// caller searches again). Returns the slot too.
    pub fn add_block(&mut self, va_start: u64, pages: u32) -> (u32, Option<u64>) {
        let slot = match self.spare.pop() {
            Some(s) => s,
            None => {
                self.slab.push(Block::new(self.bits, self.policy));
                (self.slab.len() - 1) as u32
            }
        };
        let vb = &mut self.slab[slot as usize];
        vb.reset(va_start);
        self.by_va.insert(va_start, slot);
        vb.on_list = true;
        self.counters.blocks_created += 1;
        match self.policy {
            Policy::Current => {
                let off = vb.alloc(Policy::Current, pages);
                debug_assert_eq!(off, Some(0));
                vb.on_list = vb.free > 0;
                if vb.on_list {
                    self.list.push_back(slot);
                }
                self.live_pages += u64::from(pages);
                (slot, Some(va_start))
            }
            Policy::Legacy => {
                self.list.push_front(slot);
                (slot, None)
            }
        }
    }

    /// Unmaps the mapping of `pages` pages at page `off` of the block in
    /// `slot`, which the caller found live ([`is_live`](Self::is_live)).
    /// Returns the block's start if it was released.
    #[inline]
    pub fn free_live(&mut self, slot: u32, off: u32, pages: u32) -> Option<u64> {
        let vb = &mut self.slab[slot as usize];
        debug_assert!(vb.in_use);
        let released = vb.free_live(self.policy, off, pages);
        self.live_pages -= u64::from(pages);
        if !released {
            return None;
        }
        let va_start = vb.va_start;
        self.release(slot);
        Some(va_start)
    }

    /// Whether the block in `slot`, starting at `va_start`, has a live
    /// mapping of exactly `pages` pages at page `off`.
    #[inline]
    pub fn is_live(&self, slot: u32, va_start: u64, off: u32, pages: u32) -> bool {
        self.slab
            .get(slot as usize)
            .is_some_and(|vb| vb.in_use && vb.va_start == va_start && vb.is_live(off, pages))
    }

    /// Drops an entirely dirty block: off the list, slot to `spare`.
    fn release(&mut self, slot: u32) {
        let vb = &mut self.slab[slot as usize];
        debug_assert_eq!(vb.dirty, self.bits);
        vb.in_use = false;
        self.by_va.remove(&vb.va_start);
        if vb.on_list {
            vb.on_list = false;
            if let Some(pos) = self.list.iter().position(|&s| s == slot) {
                self.list.remove(pos);
            }
        }
        self.spare.push(slot);
        self.counters.blocks_released += 1;
    }

    /// Releases every listed block with nothing live that is fragmented
    /// (see `Block::is_fragmented`); pushes their starts on `released`.
    pub fn purge_fragmented(&mut self, force: bool, released: &mut Vec<u64>) {
        let mut i = 0;
        while i < self.list.len() {
            let slot = self.list[i];
            let vb = &mut self.slab[slot as usize];
            if !vb.is_fragmented(force) {
                i += 1;
                continue;
            }
            vb.make_all_dirty();
            released.push(vb.va_start);
            self.release(slot);
            self.counters.fragmented_purges += 1;
        }
    }

    /// Widens `[lo, hi)` by every in-use block's unflushed dirty range
    /// (full blocks included, as the kernel does since 2023) and forgets
    /// those ranges.
    pub fn take_dirty(&mut self, page: u64, lo: &mut u64, hi: &mut u64) {
        for vb in self.slab.iter_mut().filter(|vb| vb.in_use) {
            if let Some((a, b)) = vb.take_flush_range(self.policy) {
                *lo = (*lo).min(vb.va_start + u64::from(a) * page);
                *hi = (*hi).max(vb.va_start + u64::from(b) * page);
            }
        }
    }

    /// The slot of this CPU's block starting at `va_start`, if any.
    #[inline]
    pub fn find(&self, va_start: u64) -> Option<u32> {
        // Most unmaps hit the block maps are coming from: the list head.
        if let Some(&s) = self.list.front() {
            if self.slab[s as usize].va_start == va_start {
                return Some(s);
            }
        }
        self.by_va.get(&va_start).copied()
    }

    /// `(slot, va_start)` of every block in use.
    pub fn blocks(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.slab
            .iter()
            .enumerate()
            .filter(|(_, vb)| vb.in_use)
            .map(|(s, vb)| (s as u32, vb.va_start))
    }

    /// Pages asked for by the live mappings in this queue's blocks.
    pub fn live_pages(&self) -> u64 {
        self.live_pages
    }

    /// Listed blocks (those with free pages).
    pub fn listed(&self) -> usize {
        self.list.len()
    }

    /// Every block's invariants, plus list and spare membership.
    pub fn check(&self) -> Result<(), CheckError> {
        let mut seen = alloc::vec![0u8; self.slab.len()];
        for &s in &self.list {
            let vb = self.slab.get(s as usize);
            ensure!(
                vb.is_some_and(|vb| vb.in_use && vb.on_list),
                Structure @ s,
                "listed slot {s} not an on-list block"
            );
            seen[s as usize] += 1;
        }
        for &s in &self.spare {
            ensure!(
                self.slab.get(s as usize).is_some_and(|vb| !vb.in_use),
                Structure @ s,
                "spare slot {s} in use"
            );
        }
        ensure!(
            self.spare.len() + self.slab.iter().filter(|vb| vb.in_use).count() == self.slab.len(),
            Structure,
            "spare slots do not match unused blocks"
        );
        ensure!(
            self.spare.len() + self.by_va.len() == self.slab.len(),
            Structure,
            "by_va holds unused blocks"
        );
        for (s, vb) in self.slab.iter().enumerate().filter(|(_, vb)| vb.in_use) {
            ensure!(
                self.find(vb.va_start) == Some(s as u32),
                Structure @ vb.va_start,
                "block {:#x} not in by_va",
                vb.va_start
            );
            ensure!(
                seen[s] == u8::from(vb.on_list),
                Structure @ s,
                "slot {s} listed {} times, on_list {}",
                seen[s],
                vb.on_list
            );
            vb.check(self.policy)?;
        }
        Ok(())
    }
}
