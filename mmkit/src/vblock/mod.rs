//! Per-CPU vmap blocks: the kernel's `vm_map_ram` / `vm_unmap_ram` front end
//! for small ranges (seeds 001 and 002).
//!
//! Small requests (1 to [`Config::max_alloc`] pages) are carved out of
//! *blocks* of [`Config::bits`] pages that each CPU takes from the shared range
//! allocator one at a time. A map takes only its CPU's queue; the range
//! allocator (and its lock, in [`ConcurrentVblock`]) is touched only to create
//! or release a whole block, or for a request larger than `max_alloc`.
//!
//! ```text
//!  CPU 0 queue               CPU 1 queue
//!  list: HEAD -> vb -> vb    list: HEAD -> vb
//!          |                          |
//!          v                          v
//!  vb = one block of BITS pages, aligned to its size, carved from the range
//!  allocator:  |LLdd LLLd dd.. ....|   L live, d dirty (unmapped, maybe
//!               <-- BITS - free --> <free>  not flushed), . never handed out
//!
//!  index: block number (addr / block size) -> (CPU, slot)   finds the block
//!  of an unmap, whichever CPU runs it (the kernel's xarray)
//! ```
//!
//! A request of `n` pages consumes `2^order` pages, `order = ceil(log2 n)`,
//! as the kernel does. Freed pages are never reused inside a block: they are
//! *dirty* until the whole block is dirty, and then the block's range goes
//! back to the range allocator with [`free_lazy`]: its TLB entries are
//! flushed by the next purge, together with everything else lazily freed.
//! [`unmap_aliases`](VblockAllocator::unmap_aliases) flushes everything at
//! once (seed 002).
//!
//! # Two policies, one code path
//! [`Policy`] selects the block management of 2008 or of 2015 onwards, so
//! the experiments compare them through the same calls and counters:
//!
//! | | [`Policy::Legacy`] (2008) | [`Policy::Current`] (2015+) |
//! |---|---|---|
//! | new block | empty, list HEAD, search again | occupied by the request, list TAIL |
//! | allocation | lowest aligned `2^order` run in an alloc bitmap | bump at `BITS - free` |
//! | freed pages | dirty bitmap | `dirty` count + `[dirty_min, dirty_max)` |
//! | fragmented purge | when an aligned search fails in a block with nothing live | when creating a block fails (all CPUs), and in `unmap_aliases` when `free < BITS/4` |
//!
//! A fragmented block has nothing live and is not entirely dirty. When a
//! new block cannot be created, Current purges every such block on every CPU
//! (the kernel's forced purge) and retries once; `unmap_aliases` purges only
//! those with less than a quarter of their pages free (the kernel's
//! `VMAP_PURGE_THRESHOLD`).
//!
//! Unlike the kernel, which trusts its callers, an unmap is validated: the
//! address must start a live mapping of exactly that many pages, or the
//! call fails with a typed error and changes nothing.
//!
//! The single-threaded [`VblockAllocator`] takes the CPU as an argument (for
//! deterministic tests and the seed 001 scenarios); [`ConcurrentVblock`]
//! (feature `std`) locks one queue per CPU.
//!
//! [`free_lazy`]: crate::range::RangeAllocator::free_lazy

mod block;
mod front;
mod queue;
#[cfg(feature = "std")]
mod shared;
mod single;

use core::ops::AddAssign;

use crate::error::AllocError;

#[cfg(feature = "std")]
pub use shared::{current_slot, ConcurrentVblock};
pub use single::VblockAllocator;

/// Block geometry, as the kernel's constants (all configurable).
///
/// ```
/// use mmkit::vblock::Config;
/// let c = Config::KERNEL;
/// assert_eq!(c.block_size(), 4 << 20); // 1024 pages of 4 KiB
/// assert_eq!(c.order_of(3), Some(2)); // 3 pages use 4
/// assert!(c.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Bytes per page (a power of two); `PAGE_SIZE`, 4096.
    pub page_size: u64,
    /// Largest request served from blocks, in pages; `VMAP_MAX_ALLOC`, 64
    /// (`BITS_PER_LONG`). Larger requests go to the range allocator.
    pub max_alloc: u64,
    /// Pages per block (a power of two, at least twice the rounded-up
    /// `max_alloc`); `VMAP_BBMAP_BITS`, 1024 on a 64-bit kernel.
    pub bits: u64,
}

/// Largest supported [`Config::bits`] (the per-block page index is `u32`).
pub const MAX_BITS: u64 = 1 << 20;

/// Most CPU queues a front end accepts: the kernel's largest `NR_CPUS`
/// (x86-64 `MAXSMP`). Queues are allocated up front, so an absurd count is
/// refused before allocating rather than aborting on the allocation.
pub const MAX_CPUS: usize = 8192;

impl Config {
    /// The 64-bit kernel's values: 4 KiB pages, 64-page requests, 1024-page
    /// (4 MiB) blocks.
    pub const KERNEL: Config = Config {
        page_size: 4096,
        max_alloc: 64,
        bits: 1024,
    };

    /// Checks the geometry.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `page_size` or `bits` is not a power of
    /// two, `max_alloc` is 0, `bits` is below twice `max_alloc` rounded up
    /// to a power of two or above [`MAX_BITS`], or a block's size overflows.
    ///
    /// # Complexity
    /// O(1).
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::Config;
    /// assert!(Config::KERNEL.validate().is_ok());
    /// assert!(Config { bits: 1000, ..Config::KERNEL }.validate().is_err()); // not a power of two
    /// ```
    pub fn validate(&self) -> Result<(), AllocError> {
        let ok = self.page_size.is_power_of_two()
            && self.bits.is_power_of_two()
            && self.bits <= MAX_BITS
            && self.max_alloc >= 1
            // Checked: above 2^63 the power of two does not exist (an
            // unchecked one wraps to 0 and would pass).
            && self
                .max_alloc
                .checked_next_power_of_two()
                .and_then(|p| p.checked_mul(2))
                .is_some_and(|twice| twice <= self.bits)
            && self
                .bits
                .checked_mul(self.page_size)
                .is_some_and(|s| s <= 1 << 62);
        ok.then_some(()).ok_or(AllocError::Invalid)
    }

    /// Bytes per block: `bits * page_size`; blocks are aligned to it.
    /// Saturates at `u64::MAX` for a geometry [`validate`](Self::validate)
    /// refuses.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::Config;
    /// assert_eq!(Config::KERNEL.block_size(), 1024 * 4096);
    /// ```
    #[inline]
    pub fn block_size(&self) -> u64 {
        self.bits.saturating_mul(self.page_size)
    }

    /// The order a request of `pages` uses (`2^order >= pages`), or `None`
    /// for 0 pages, more than `max_alloc`, or no such power of two.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::Config;
    /// assert_eq!(Config::KERNEL.order_of(1), Some(0));
    /// assert_eq!(Config::KERNEL.order_of(5), Some(3)); // 5 pages use 8
    /// assert_eq!(Config::KERNEL.order_of(0), None);
    /// ```
    #[inline]
    pub fn order_of(&self, pages: u64) -> Option<u32> {
        if !(1..=self.max_alloc).contains(&pages) {
            return None;
        }
        pages.checked_next_power_of_two().map(u64::trailing_zeros)
    }

    /// `Some(pages)` when a block serves the request (1..=max_alloc pages),
    /// `None` when it goes to the range allocator.
    #[inline]
    fn small(&self, pages: u64) -> Option<u32> {
        // validate() bounds max_alloc by MAX_BITS / 2: the conversion never
        // fails for a valid geometry, and is checked anyway.
        self.order_of(pages).and(u32::try_from(pages).ok())
    }

    /// The block number of `addr`: `addr / block_size`, as a shift.
    #[inline]
    fn block_no(&self, addr: u64) -> u64 {
        addr >> self.block_size().trailing_zeros()
    }

    /// The page index of byte offset `d` inside a block, or `None` when
    /// `d` is not page aligned. Shifts, not divisions: the page size is a
    /// power of two, which the compiler cannot know.
    #[inline]
    fn page_index(&self, d: u64) -> Option<u32> {
        let ok = d & (self.page_size - 1) == 0;
        // d < block size <= bits * page, so the index fits in u32.
        ok.then(|| (d >> self.page_size.trailing_zeros()) as u32)
    }

    fn bits32(&self) -> u32 {
        // validate() bounds bits by MAX_BITS, so this never truncates.
        self.bits as u32
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::KERNEL
    }
}

/// Which generation of the kernel's block management to run (see the
/// [module docs](self)).
///
/// ```
/// use mmkit::vblock::Policy;
/// assert_ne!(Policy::Legacy, Policy::Current);
/// assert_eq!(Policy::Current.name(), "current");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// 2008 (Nick Piggin): a new block starts empty at the HEAD of its CPU's
    /// list; aligned `2^order` search in an allocation bitmap; a dirty bitmap.
    Legacy,
    /// 2015 onwards (Roman Pen): a new block is occupied by its first
    /// request and goes to the TAIL; bump allocation; a dirty count and a
    /// `[dirty_min, dirty_max)` range.
    Current,
}

impl Policy {
    /// Short lowercase name for tables.
    ///
    /// # Examples
    /// ```
    /// use mmkit::vblock::Policy;
    /// assert_eq!(Policy::Current.name(), "current");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Policy::Legacy => "legacy",
            Policy::Current => "current",
        }
    }
}

/// Event counters, kept per CPU queue and summed by `counters()`.
///
/// Names follow the functions the seed 001 profile counted: a block created
/// is an `alloc_vmap_area`, a block released a `free_vmap_block`. Times are
/// nanoseconds from the clock installed with `set_clock` (0 without one).
///
/// ```
/// use mmkit::vblock::Counters;
/// let mut a = Counters { map_calls: 2, ..Counters::default() };
/// a += Counters { map_calls: 3, ..Counters::default() };
/// assert_eq!(a.map_calls, 5);
/// ```
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful maps (block and large).
    pub map_calls: u64,
    /// Successful unmaps (block and large).
    pub unmap_calls: u64,
    /// Maps larger than `max_alloc`, served by the range allocator.
    pub large_maps: u64,
    /// Unmaps of such large maps.
    pub large_unmaps: u64,
    /// Blocks taken from the range allocator (`alloc_vmap_area`).
    pub blocks_created: u64,
    /// Blocks given back to it, lazily (`free_vmap_block`).
    pub blocks_released: u64,
    /// Blocks released by a fragmented-block purge (counted in
    /// `blocks_released` too).
    pub fragmented_purges: u64,
    /// Flushes issued by `unmap_aliases`.
    pub flushes: u64,
    /// Time in successful maps (including block creation).
    pub map_ns: u64,
    /// Time in successful unmaps (including block release).
    pub unmap_ns: u64,
    /// Time creating blocks.
    pub create_ns: u64,
    /// Time releasing blocks.
    pub release_ns: u64,
}

impl AddAssign for Counters {
    fn add_assign(&mut self, o: Counters) {
        self.map_calls += o.map_calls;
        self.unmap_calls += o.unmap_calls;
        self.large_maps += o.large_maps;
        self.large_unmaps += o.large_unmaps;
        self.blocks_created += o.blocks_created;
        self.blocks_released += o.blocks_released;
        self.fragmented_purges += o.fragmented_purges;
        self.flushes += o.flushes;
        self.map_ns += o.map_ns;
        self.unmap_ns += o.unmap_ns;
        self.create_ns += o.create_ns;
        self.release_ns += o.release_ns;
    }
}

/// A monotonic clock in nanoseconds, for the time counters. `no_std` users
/// supply their own; under `std`, [`monotonic_ns`] is one.
pub type Clock = fn() -> u64;

/// Nanoseconds since the first call in this process ([`Instant`] based).
///
/// [`Instant`]: std::time::Instant
#[cfg(feature = "std")]
pub fn monotonic_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let d = EPOCH.get_or_init(Instant::now).elapsed();
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Reads `clock`, or 0 without one.
#[inline]
fn now(clock: Option<Clock>) -> u64 {
    clock.map_or(0, |c| c())
}

/// Nanoseconds since `t0` on `clock` (0 without one).
#[inline]
fn since(clock: Option<Clock>, t0: u64) -> u64 {
    now(clock).saturating_sub(t0)
}

/// Geometry, policy and counters; not the blocks (see
/// [`VblockAllocator::check`] for those).
impl<R: crate::range::RangeAllocator> core::fmt::Debug for VblockAllocator<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VblockAllocator")
            .field("config", &self.config())
            .field("policy", &self.policy())
            .field("cpus", &self.cpus())
            .field("blocks", &self.blocks())
            .field("live_pages", &self.live_pages())
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

/// Geometry, policy and counters (takes each queue's lock in turn, as
/// [`ConcurrentVblock::counters`] does).
#[cfg(feature = "std")]
impl<R: crate::range::RangeAllocator> core::fmt::Debug for ConcurrentVblock<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConcurrentVblock")
            .field("config", &self.config())
            .field("policy", &self.policy())
            .field("cpus", &self.cpus())
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}
