//! Physical memory: the page frames of a memfd, managed by
//! [`mmkit::buddy::BuddyAllocator`] (pfn = file offset / page size).
//!
//! ```text
//!  memfd  |pageblock|pageblock|pageblock| . . . . . . . . . |
//!         0         grown_pages (file length)               limit_pages
//!  buddy  spans [0, limit_pages); frames are added a pageblock at a time
//!         as the file grows, never beyond the limit
//! ```
//!
//! Each frame has a *map count* (the mappings of it that exist right now,
//! lazily freed ones included) and an *owner* (free, a caller of
//! `alloc_pages`, an area of the crate, or freed-while-mapped), packed in
//! one atomic word so that taking a reference and freeing are one step
//! each: a caller's frame is *pinned* (its count raised) only while its
//! owner is still the caller, and a free first takes the frame from the
//! caller, then reads the count. Whichever comes first wins, as if the two
//! calls ran one after the other. A frame goes back to the buddy only when
//! its map count is 0: a block freed while some mapping still shows it
//! waits on the `deferred` list for the purge that removes the mapping.

use std::sync::atomic::Ordering;

use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};

use crate::error::VmError;
use crate::sync::{lock, AtomicU64, Mutex};
use crate::sys::{Grow, Memfd};

/// Bytes of buddy metadata per frame (about), for the error that says it
/// could not be allocated.
const BUDDY_BYTES_PER_FRAME: u64 = 9;

/// A block of `2^order` frames starting at `pfn`, as the buddy hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) pfn: u64,
    pub(crate) order: u8,
}

impl Block {
    pub(crate) fn pages(self) -> u64 {
        1 << self.order
    }
}

/// Who holds a frame.
pub(crate) mod owner {
    /// In the buddy (or not yet added).
    pub(crate) const FREE: u8 = 0;
    /// Allocated by `Vm::alloc_pages`: the caller frees it.
    pub(crate) const USER: u8 = 1;
    /// Belongs to an area (vmalloc, mirror ring): freed with the area.
    pub(crate) const AREA: u8 = 2;
    /// Freed while still mapped: waits for the purge that unmaps it.
    pub(crate) const DEFERRED: u8 = 3;
}

/// A frame's word: the owner in the top byte, the map count below.
const OWNER_SHIFT: u32 = 56;
const COUNT: u64 = (1 << OWNER_SHIFT) - 1;

fn owner_in(w: u64) -> u8 {
    (w >> OWNER_SHIFT) as u8
}

fn with_owner(w: u64, who: u8) -> u64 {
    (u64::from(who) << OWNER_SHIFT) | (w & COUNT)
}

/// Counters of the physical layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhysStats {
    /// Bytes of the memfd (grown so far).
    pub grown_bytes: u64,
    /// Frames free in the buddy.
    pub free_pages: u64,
    /// Frame blocks freed while mapped, waiting for a purge.
    pub deferred_blocks: u64,
    /// `ftruncate` calls that grew the memfd.
    pub grow_calls: u64,
}

struct Zone {
    buddy: BuddyAllocator,
    grown_pages: u64,
    deferred: Vec<Block>,
    grow_calls: u64,
}

/// The memfd and its frame allocator (see the module docs).
pub(crate) struct Phys {
    pub(crate) mem: Memfd,
    page: u64,
    limit_pages: u64,
    zone: Mutex<Zone>,
    /// Per frame: owner and map count (see the module docs).
    frames: Box<[AtomicU64]>,
}

/// A table of `n` zeroed words, or the error that names it.
fn table(n: usize) -> Result<Box<[AtomicU64]>, VmError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| VmError::NoMemory {
        what: "the per-frame owners and map counts",
        bytes: n as u64 * 8,
    })?;
    v.extend((0..n).map(|_| AtomicU64::new(0)));
    Ok(v.into_boxed_slice())
}

impl Phys {
    /// An empty memfd that may grow to `limit` bytes (rounded down to whole
    /// pageblocks).
    pub(crate) fn new(limit: u64, page: u64) -> Result<Self, VmError> {
        let cfg = BuddyConfig::default();
        let pageblock = 1u64 << cfg.pageblock_order;
        let limit_pages = limit / page / pageblock * pageblock;
        if limit_pages == 0 {
            return Err(VmError::Invalid("phys_limit is below one pageblock"));
        }
        let buddy = BuddyAllocator::new(0, limit_pages, cfg).map_err(|e| match e {
            mmkit::AllocError::NoSpace => VmError::NoMemory {
                what: "the buddy's frame table",
                bytes: limit_pages.saturating_mul(BUDDY_BYTES_PER_FRAME),
            },
            _ => VmError::Invalid("phys_limit is too large for the buddy"),
        })?;
        let frames = table(limit_pages as usize)?;
        let mem = Memfd::new("mmkit-vm").map_err(|e| VmError::os("memfd_create", e))?;
        Ok(Phys {
            mem,
            page,
            limit_pages,
            zone: Mutex::new(Zone {
                buddy,
                grown_pages: 0,
                deferred: Vec::new(),
                grow_calls: 0,
            }),
            frames,
        })
    }

    /// The memfd offset of frame `pfn`.
    pub(crate) fn offset(&self, pfn: u64) -> u64 {
        pfn * self.page
    }

    /// The limit in bytes.
    pub(crate) fn limit(&self) -> u64 {
        self.limit_pages * self.page
    }

    /// The largest block order the buddy hands out.
    pub(crate) fn max_order(&self) -> u8 {
        BuddyConfig::default().max_order
    }

    /// Grows the memfd by one pageblock and gives its frames to the buddy.
    fn grow(&self, z: &mut Zone) -> Result<(), VmError> {
        let step = 1u64 << z.buddy.config().pageblock_order;
        if z.grown_pages + step > self.limit_pages {
            return Err(VmError::LimitReached {
                limit: self.limit(),
            });
        }
        self.mem
            .set_len((z.grown_pages + step) * self.page)
            .map_err(|e| match e {
                Grow::FileSizeLimit(limit) => VmError::FileSizeLimit { limit },
                Grow::Os(e) => VmError::os("ftruncate", e),
            })?;
        let added = z.buddy.add_free_range(z.grown_pages, step);
        debug_assert!(added.is_ok(), "fresh frames inside the span");
        z.grown_pages += step;
        z.grow_calls += 1;
        Ok(())
    }

    /// Allocates one block of `2^order` frames for `who`, growing the memfd
    /// when the buddy has none.
    pub(crate) fn alloc(&self, order: u8, who: u8) -> Result<u64, VmError> {
        if order > self.max_order() {
            return Err(VmError::Invalid("order above the buddy's max_order"));
        }
        let mut z = lock(&self.zone);
        let pfn = loop {
            match z.buddy.alloc(order, MigrateType::Movable) {
                Ok(pfn) => break pfn,
                Err(_) => self.grow(&mut z)?,
            }
        };
        drop(z);
        self.set_owner(Block { pfn, order }, who);
        Ok(pfn)
    }

    /// Appends blocks covering `pages` frames to `out`, largest orders
    /// first (high orders while the buddy has them, then lower ones; the
    /// memfd grows only when not even one frame is free). On failure
    /// nothing is taken.
    pub(crate) fn alloc_pages(&self, pages: u64, out: &mut Vec<Block>) -> Result<(), VmError> {
        let first = out.len();
        let mut z = lock(&self.zone);
        let mut left = pages;
        let top = |left: u64| (63 - left.leading_zeros() as u8).min(self.max_order());
        let mut order = top(left);
        while left > 0 {
            if let Ok(pfn) = z.buddy.alloc(order, MigrateType::Movable) {
                out.push(Block { pfn, order });
                left -= 1 << order;
                order = order.min(top(left.max(1)));
            } else if order > 0 {
                order -= 1;
            } else if let Err(e) = self.grow(&mut z) {
                for b in out.drain(first..) {
                    let freed = z.buddy.free(b.pfn, b.order);
                    debug_assert!(freed.is_ok(), "just allocated");
                }
                return Err(e);
            } else {
                order = top(left);
            }
        }
        drop(z);
        for &b in &out[first..] {
            self.set_owner(b, owner::AREA);
        }
        Ok(())
    }

    /// Allocates one block of 1 to `max` frames for an area (the largest
    /// order up to `max` the buddy has, growing the memfd only when it has
    /// not even one frame): the driver's frame source.
    ///
    /// # Errors
    /// [`VmError::LimitReached`], [`VmError::FileSizeLimit`] or
    /// [`VmError::Os`] when the memfd cannot grow; [`VmError::Invalid`]
    /// for 0 frames.
    pub(crate) fn alloc_run(&self, max: u64) -> Result<Block, VmError> {
        if max == 0 {
            return Err(VmError::Invalid("0 frames"));
        }
        let top = (63 - max.leading_zeros() as u8).min(self.max_order());
        let mut z = lock(&self.zone);
        let mut order = top;
        let pfn = loop {
            match z.buddy.alloc(order, MigrateType::Movable) {
                Ok(pfn) => break pfn,
                Err(_) if order > 0 => order -= 1,
                Err(_) => {
                    self.grow(&mut z)?;
                    order = top;
                }
            }
        };
        drop(z);
        let b = Block { pfn, order };
        self.set_owner(b, owner::AREA);
        Ok(b)
    }

    /// Gives back the area blocks in `[pfn, pfn + count)` (each block the
    /// buddy handed out, found by its order); those still mapped wait.
    /// Frames of no area (a caller's from `alloc_pages`, or already given
    /// back: a mirror shows each frame twice) are left alone.
    pub(crate) fn release_run(&self, pfn: u64, count: u64) {
        self.release_in(&mut lock(&self.zone), pfn, count);
    }

    /// [`release_run`](Self::release_run) of each run of consecutive
    /// frames in `frames`, under one lock of the zone.
    pub(crate) fn release_runs(&self, frames: &[u64]) {
        let mut z = lock(&self.zone);
        for (pfn, count) in mmkit_vmalloc::frame_runs(frames) {
            self.release_in(&mut z, pfn, count);
        }
    }

    fn release_in(&self, z: &mut Zone, pfn: u64, count: u64) {
        let end = pfn.saturating_add(count);
        let mut p = pfn;
        while p < end {
            let order = z.buddy.allocated_order(p);
            match order {
                Some(order) if self.owner_of(p) == Some(owner::AREA) => {
                    self.release_one(z, Block { pfn: p, order });
                    p += 1 << order;
                }
                _ => p += 1,
            }
        }
    }

    /// Zeroes `count` frames from `pfn` by punching them out of the memory
    /// file (they read as zero and hold no memory until written).
    ///
    /// # Errors
    /// [`VmError::Os`] when the kernel refuses.
    pub(crate) fn zero(&self, pfn: u64, count: u64) -> Result<(), VmError> {
        self.mem
            .punch(self.offset(pfn), count * self.page)
            .map_err(|e| VmError::os("fallocate", e))
    }

    fn set_owner(&self, b: Block, who: u8) {
        for pfn in b.pfn..b.pfn + b.pages() {
            let w = &self.frames[pfn as usize];
            let set = w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                Some(with_owner(w, who))
            });
            debug_assert!(set.is_ok(), "the update always succeeds");
        }
    }

    /// The owner of frame `pfn`, `None` outside the limit.
    pub(crate) fn owner_of(&self, pfn: u64) -> Option<u8> {
        let w = self.frames.get(usize::try_from(pfn).ok()?)?;
        Some(owner_in(w.load(Ordering::SeqCst)))
    }

    /// The map count of frame `pfn` (the frame must be inside the limit).
    fn count(&self, pfn: u64) -> u64 {
        self.frames[pfn as usize].load(Ordering::SeqCst) & COUNT
    }

    /// Pins a caller's frame for a mapping about to be made: raises its map
    /// count if, in the same atomic step, it is still allocated by
    /// `alloc_pages`. Returns whether it was (a frame outside the limit is
    /// not). A free that comes later sees the count and defers the frame.
    pub(crate) fn pin_user(&self, pfn: u64) -> bool {
        let Some(w) = usize::try_from(pfn).ok().and_then(|i| self.frames.get(i)) else {
            return false;
        };
        w.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
            (owner_in(w) == owner::USER).then_some(w + 1)
        })
        .is_ok()
    }

    /// Drops the pins of `pfns` (every one pinned by [`pin_user`]) and,
    /// when a free deferred one meanwhile and nothing maps it now, releases
    /// the deferred frames (the zone lock is taken only then).
    ///
    /// [`pin_user`]: Self::pin_user
    pub(crate) fn unpin_user(&self, pfns: &[u64]) {
        let mut freed_meanwhile = false;
        for &pfn in pfns {
            let before = self.frames[pfn as usize].fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before & COUNT > 0, "pin of frame {pfn} underflows");
            freed_meanwhile |= owner_in(before) == owner::DEFERRED && before & COUNT == 1;
        }
        if freed_meanwhile {
            self.retry_deferred();
        }
    }

    /// One more mapping of each frame in `[pfn, pfn + n)`.
    pub(crate) fn mapped(&self, pfn: u64, n: u64) {
        for p in pfn..pfn + n {
            self.frames[p as usize].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// One mapping fewer of each frame in `[pfn, pfn + n)`.
    pub(crate) fn unmapped(&self, pfn: u64, n: u64) {
        for p in pfn..pfn + n {
            let before = self.frames[p as usize].fetch_sub(1, Ordering::SeqCst);
            debug_assert!(before & COUNT > 0, "map count of frame {p} underflows");
        }
    }

    fn is_mapped(&self, b: Block) -> bool {
        (b.pfn..b.pfn + b.pages()).any(|p| self.count(p) > 0)
    }

    /// Gives area-owned blocks back; those still mapped somewhere wait.
    pub(crate) fn release(&self, blocks: &[Block]) {
        let mut z = lock(&self.zone);
        for &b in blocks {
            self.release_one(&mut z, b);
        }
    }

    fn release_one(&self, z: &mut Zone, b: Block) {
        if self.is_mapped(b) {
            self.set_owner(b, owner::DEFERRED);
            z.deferred.push(b);
        } else {
            self.set_owner(b, owner::FREE);
            let freed = z.buddy.free(b.pfn, b.order);
            debug_assert!(freed.is_ok(), "releasing an allocated block");
        }
    }

    /// Frees a block that `alloc(order, USER)` returned. Its frames leave
    /// the caller first (no pin succeeds after that), then the map counts
    /// decide: free now, or deferred until the last mapping goes.
    pub(crate) fn free_user(&self, pfn: u64, order: u8) -> Result<(), VmError> {
        let mut z = lock(&self.zone);
        let ours =
            self.owner_of(pfn) == Some(owner::USER) && z.buddy.allocated_order(pfn) == Some(order);
        if !ours {
            return Err(VmError::NotAllocated { addr: pfn });
        }
        let b = Block { pfn, order };
        self.set_owner(b, owner::DEFERRED);
        self.release_one(&mut z, b);
        Ok(())
    }

    /// Releases every deferred block whose mappings are all gone (after a
    /// purge). Allocates nothing.
    pub(crate) fn retry_deferred(&self) {
        let mut guard = lock(&self.zone);
        let z = &mut *guard;
        z.deferred.retain(|&b| {
            if self.is_mapped(b) {
                return true;
            }
            self.set_owner(b, owner::FREE);
            let freed = z.buddy.free(b.pfn, b.order);
            debug_assert!(freed.is_ok(), "releasing a deferred block");
            false
        });
    }

    /// Counters.
    pub(crate) fn stats(&self) -> PhysStats {
        let z = lock(&self.zone);
        PhysStats {
            grown_bytes: z.grown_pages * self.page,
            free_pages: z.buddy.free_pages(),
            deferred_blocks: z.deferred.len() as u64,
            grow_calls: z.grow_calls,
        }
    }

    /// The total of every frame's map count.
    pub(crate) fn total_mapcount(&self) -> u64 {
        self.frames
            .iter()
            .map(|w| w.load(Ordering::SeqCst) & COUNT)
            .sum()
    }

    /// Checks the buddy, the owners against it, and that no free frame is
    /// mapped.
    pub(crate) fn check(&self) -> Result<(), String> {
        let z = lock(&self.zone);
        z.buddy.check().map_err(|e| format!("buddy: {e}"))?;
        let mut owned = 0;
        for pfn in 0..z.grown_pages {
            let w = self.frames[pfn as usize].load(Ordering::SeqCst);
            let (o, m) = (owner_in(w), w & COUNT);
            if o == owner::FREE && m > 0 {
                return Err(format!("free frame {pfn} is mapped {m} times"));
            }
            owned += u64::from(o != owner::FREE);
        }
        let used = z.grown_pages - z.buddy.free_pages();
        if owned != used {
            return Err(format!(
                "{owned} frames have owners, the buddy has {used} in use"
            ));
        }
        for b in &z.deferred {
            if self.owner_of(b.pfn) != Some(owner::DEFERRED) {
                return Err(format!("deferred block at {} not marked deferred", b.pfn));
            }
        }
        Ok(())
    }
}
