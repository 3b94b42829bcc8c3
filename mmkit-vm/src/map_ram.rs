//! What `vm_map_ram` mapped where: one record per per-CPU block, so a block
//! can be unmapped once, whole, when it is released (seed 002's saving),
//! and the frames it showed get their map counts back.
//!
//! ```text
//!  block (1024 pages)  |L L L L|S S|L|. . . . . . . . .|
//!  record.slots        pfn per page: L live, S stale (unmapped by
//!                      vm_unmap_ram, still mapped until the purge), . none
//!  record.lens         the page count at each live mapping's first page
//! ```
//!
//! `vm_unmap_ram` only marks its pages stale: the mapping stays until the
//! block, entirely dirty, is released and purged (one system call for the
//! block and its lazily freed neighbours), or until `vm_unmap_aliases`
//! unmaps every stale run at once. A stale run whose unmapping the kernel
//! refuses stays stale (mapped, its frames counted as mapped) and is tried
//! again by the next `vm_unmap_aliases` or the purge of its block. This is the kernel's lazy TLB flush in
//! user space: reading a stale page after `vm_unmap_ram` is the caller's
//! bug, as it is in the kernel, and its frames are not reused until the
//! mapping is gone.
//!
//! Records are keyed and sharded by block number, counted from the start
//! of the reservation, each shard behind its own lock, so CPUs mapping in
//! their own blocks do not contend. Numbers rather than addresses make the
//! layout the same wherever the system put the reservation (a loom model,
//! replayed over fresh reservations, needs that).

use std::sync::atomic::Ordering;

use crate::error::VmError;
use crate::phys::Phys;
use crate::sync::{lock, AtomicU64, HashMap, Mutex, MutexGuard};

/// Marks a stale slot (the pfn is kept: the page is still mapped).
const STALE: u32 = 1 << 31;
/// Slots hold `pfn + 1`; 0 is "nothing mapped".
const NONE: u32 = 0;
/// Shards of the record map.
const SHARDS: usize = 64;

#[derive(Debug)]
struct Record {
    slots: Box<[u32]>,
    lens: Box<[u8]>,
    runs: Box<[u8]>,
    /// Stale runs whose unmapping failed in the latest attempt.
    stuck: u64,
}

impl Record {
    fn new(bits: usize) -> Self {
        Record {
            slots: vec![NONE; bits].into_boxed_slice(),
            lens: vec![0; bits].into_boxed_slice(),
            runs: vec![0; bits].into_boxed_slice(),
            stuck: 0,
        }
    }
}

/// What [`Records::unmap_stale`] did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StaleUnmapped {
    /// Mapping runs removed (to credit to the budget).
    pub(crate) runs: u64,
    /// Unmapping calls made.
    pub(crate) calls: u64,
    /// Calls the kernel refused (their runs stay stale).
    pub(crate) failed: u64,
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<HashMap<u64, Record>>);

/// The records of every block in use (see the module docs).
#[derive(Debug)]
pub(crate) struct Records {
    shards: Box<[Shard]>,
    /// The block number (address / block size) of the first whole block of
    /// the reservation: blocks are aligned to their size, so the first one
    /// starts at the reservation's start rounded up. Rounding up makes the
    /// numbering the same wherever the reservation lands (loom replays a
    /// model over fresh reservations, and shards must not change with it).
    first_block: u64,
    block_size: u64,
    page: u64,
    /// Stale runs whose unmapping failed and waits for a retry.
    stuck: AtomicU64,
}

impl Records {
    /// Records for blocks of `block_size` bytes of `page`-byte pages in a
    /// reservation that starts at `base`.
    pub(crate) fn new(base: u64, block_size: u64, page: u64) -> Self {
        Records {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            first_block: base.div_ceil(block_size),
            block_size,
            page,
            stuck: AtomicU64::new(0),
        }
    }

    /// The block number of `addr` and the page index inside its block.
    fn locate(&self, addr: u64) -> (u64, usize) {
        let start = addr & !(self.block_size - 1);
        // An address below the first block (not one of ours) wraps to a
        // number no record has.
        let block = (start / self.block_size).wrapping_sub(self.first_block);
        (block, ((addr - start) / self.page) as usize)
    }

    /// The address where block number `block` starts.
    fn start_of(&self, block: u64) -> u64 {
        (self.first_block + block) * self.block_size
    }

    fn shard(&self, block: u64) -> MutexGuard<'_, HashMap<u64, Record>> {
        lock(&self.shards[block as usize % SHARDS].0)
    }

    /// Records a fresh mapping of `pfns` at `addr` (a slot just handed out
    /// by the front end), made with `runs` `mmap` calls.
    pub(crate) fn insert(&self, addr: u64, pfns: &[u64], runs: u64) {
        self.put(addr, pfns, runs, false);
    }

    /// Records a mapping of `pfns` at `addr` that is stale from the start:
    /// the first pages of a `vm_map_ram` whose other pages could not be
    /// mapped, and whose unmapping the kernel refused. It goes the way of
    /// pages unmapped by `vm_unmap_ram`.
    pub(crate) fn insert_stale(&self, addr: u64, pfns: &[u64], runs: u64) {
        self.put(addr, pfns, runs, true);
    }

    fn put(&self, addr: u64, pfns: &[u64], runs: u64, stale: bool) {
        let (block, off) = self.locate(addr);
        let bits = (self.block_size / self.page) as usize;
        let mut shard = self.shard(block);
        let rec = shard.entry(block).or_insert_with(|| Record::new(bits));
        let mark = if stale { STALE } else { 0 };
        for (i, &pfn) in pfns.iter().enumerate() {
            debug_assert_eq!(rec.slots[off + i], NONE, "slot reused before purge");
            rec.slots[off + i] = (pfn as u32 + 1) | mark;
        }
        rec.lens[off] = if stale { 0 } else { pfns.len() as u8 };
        rec.runs[off] = runs as u8;
    }

    /// Marks the live mapping of exactly `pages` pages at `addr` stale.
    ///
    /// # Errors
    /// [`VmError::NotAllocated`] when no live mapping of that many pages
    /// starts at `addr`; nothing changes then.
    pub(crate) fn mark_stale(&self, addr: u64, pages: u64) -> Result<(), VmError> {
        let (block, off) = self.locate(addr);
        let mut shard = self.shard(block);
        let live = |r: &Record| {
            addr % self.page == 0
                && u64::from(r.lens[off]) == pages
                && r.slots[off] != NONE
                && r.slots[off] & STALE == 0
        };
        match shard.get_mut(&block) {
            Some(r) if live(r) => {
                r.lens[off] = 0;
                for s in &mut r.slots[off..off + pages as usize] {
                    *s |= STALE;
                }
                Ok(())
            }
            _ => Err(VmError::NotAllocated { addr }),
        }
    }

    /// Forgets the block at `start` after its range was unmapped: one
    /// mapping fewer for every frame it showed. Returns the runs it held.
    pub(crate) fn drop_block(&self, start: u64, phys: &Phys) -> u64 {
        let (block, _) = self.locate(start);
        let Some(rec) = self.shard(block).remove(&block) else {
            return 0;
        };
        for &s in rec.slots.iter() {
            if s != NONE {
                phys.unmapped(u64::from((s & !STALE) - 1), 1);
            }
        }
        self.stuck.fetch_sub(rec.stuck, Ordering::Relaxed);
        rec.runs.iter().map(|&r| u64::from(r)).sum()
    }

    /// Unmaps every stale run of every block with `unmap(addr, len)` (one
    /// call per stretch of adjacent stale pages) and forgets those pages.
    /// A stretch whose `unmap` fails stays stale, to be tried again.
    pub(crate) fn unmap_stale(
        &self,
        phys: &Phys,
        mut unmap: impl FnMut(u64, u64) -> bool,
    ) -> StaleUnmapped {
        let mut done = StaleUnmapped::default();
        for shard in self.shards.iter() {
            let mut map = lock(&shard.0);
            for (&block, rec) in map.iter_mut() {
                let start = self.start_of(block);
                let stuck_before = rec.stuck;
                rec.stuck = 0;
                let mut i = 0;
                while i < rec.slots.len() {
                    if rec.slots[i] & STALE == 0 {
                        i += 1;
                        continue;
                    }
                    let first = i;
                    while i < rec.slots.len() && rec.slots[i] & STALE != 0 {
                        i += 1;
                    }
                    let at = start + first as u64 * self.page;
                    done.calls += 1;
                    if !unmap(at, (i - first) as u64 * self.page) {
                        done.failed += 1;
                        rec.stuck += 1;
                        continue;
                    }
                    for j in first..i {
                        phys.unmapped(u64::from((rec.slots[j] & !STALE) - 1), 1);
                        rec.slots[j] = NONE;
                        done.runs += u64::from(rec.runs[j]);
                        rec.runs[j] = 0;
                    }
                }
                self.stuck.fetch_add(rec.stuck, Ordering::Relaxed);
                self.stuck.fetch_sub(stuck_before, Ordering::Relaxed);
            }
        }
        done
    }

    /// Stale runs whose unmapping failed and waits for a retry.
    pub(crate) fn stuck(&self) -> u64 {
        self.stuck.load(Ordering::Relaxed)
    }

    /// Calls `f(addr, pfn)` for every page mapped through a record (live
    /// and stale), for the checker.
    pub(crate) fn each_mapped(&self, mut f: impl FnMut(u64, u64)) {
        for shard in self.shards.iter() {
            for (&block, rec) in lock(&shard.0).iter() {
                let start = self.start_of(block);
                for (i, &s) in rec.slots.iter().enumerate() {
                    if s != NONE {
                        f(start + i as u64 * self.page, u64::from((s & !STALE) - 1));
                    }
                }
            }
        }
    }

    /// Runs held by records, for the checker.
    pub(crate) fn runs(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                lock(&s.0)
                    .values()
                    .map(|r| r.runs.iter().map(|&n| u64::from(n)).sum::<u64>())
                    .sum::<u64>()
            })
            .sum()
    }

    /// Pages mapped through records (live and stale), for the checker.
    pub(crate) fn mapped_pages(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                lock(&s.0)
                    .values()
                    .map(|r| r.slots.iter().filter(|&&s| s != NONE).count() as u64)
                    .sum::<u64>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first whole block is number 0 wherever the reservation starts,
    /// so the shard a block's record lives in does not depend on it (loom
    /// saw a different lock taken when a reservation landed unaligned).
    #[test]
    fn block_numbers_do_not_depend_on_where_the_reservation_lands() {
        let (bs, page) = (1u64 << 22, 4096);
        let at = 0x7f00_0000_0000u64;
        for base in [at, at + page, at + bs - page] {
            let r = Records::new(base, bs, page);
            let first = base.next_multiple_of(bs);
            assert_eq!(r.locate(first), (0, 0));
            assert_eq!(r.locate(first + bs + 3 * page), (1, 3));
            assert_eq!(r.start_of(1), first + bs);
        }
    }
}
