//! One vmap block: `bits` pages carved into power-of-two mappings.
//!
//! ```text
//!  Current (bump):     |LLLL dddd LL.. ....|    L live, d dirty, . free
//!                       0       ^ BITS - free   (bump offset)
//!                       dirty range [dirty_min, dirty_max) covers every d
//!                       not flushed since the last unmap_aliases
//!
//!  Legacy (bitmaps):   alloc_map |1111 1111 11.. 1.11|  handed out, ever
//!                      dirty_map |0000 1111 0000 0100|  unmapped
//!                      a 2^order request takes the lowest aligned run of
//!                      zeros in alloc_map, so holes are filled by smaller
//!                      orders; dirty pages are never handed out again
//! ```
//!
//! Invariants (checked by [`Block::check`]):
//! - `free + dirty + live == bits`;
//! - no two live mappings overlap; each lies in handed-out pages (below the
//!   bump for Current, set in `alloc_map` for Legacy, aligned there);
//! - Legacy: `alloc_map == live | dirty_map`, popcounts match `free`, `dirty`;
//! - every page unmapped since the last flush (`unflushed`) is dirty and lies
//!   in the policy's flush range.

use alloc::vec;
use alloc::vec::Vec;

use super::Policy;
use crate::ensure;
use crate::error::CheckError;

/// One block. Page offsets are `u32` (bits <= `MAX_BITS`).
#[derive(Debug, Clone)]
pub(crate) struct Block {
    /// First address of the block's range.
    pub va_start: u64,
    /// Pages never handed out.
    pub free: u32,
    /// Pages unmapped (never reused until the block is released).
    pub dirty: u32,
    /// Current: unflushed dirty range, empty as `[bits, 0)`.
    pub dirty_min: u32,
    /// Current: end of the unflushed dirty range.
    pub dirty_max: u32,
    /// Pages in live mappings.
    pub live: u32,
    /// Whether the block is on its CPU's list (`free > 0`).
    pub on_list: bool,
    /// Whether the slot holds a block (slots are reused).
    pub in_use: bool,
    bits: u32,
    /// The page count asked for at the first page of each live mapping,
    /// else 0. Lets an unmap be validated in O(1), page count included
    /// (the kernel trusts its caller).
    heads: Vec<u32>,
    /// Pages unmapped since the last flush: a shadow for `check`.
    unflushed: Vec<u64>,
    /// Legacy only: pages ever handed out (bits past `bits` set).
    alloc_map: Vec<u64>,
    /// Legacy only: pages unmapped.
    dirty_map: Vec<u64>,
}

fn words(bits: u32) -> usize {
    bits.div_ceil(64) as usize
}

/// Calls `f(word, mask)` for each word the run `[off, off + n)` touches.
#[inline]
fn for_each_word(off: u32, n: u32, mut f: impl FnMut(usize, u64)) {
    let (mut at, end) = (off, off + n);
    while at < end {
        let bit = at % 64;
        let len = (64 - bit).min(end - at);
        let mask = if len == 64 {
            u64::MAX
        } else {
            ((1u64 << len) - 1) << bit
        };
        f((at / 64) as usize, mask);
        at += len;
    }
}

#[inline]
fn set_run(map: &mut [u64], off: u32, n: u32) {
    // A run of at most 64 bits (every mapping's) spans one or two words:
    // one mask across both, no loop.
    if (1..=64).contains(&n) {
        let (w, bit) = ((off / 64) as usize, off % 64);
        let mask = (u128::MAX >> (128 - n)) << bit;
        map[w] |= mask as u64;
        let high = (mask >> 64) as u64;
        if high != 0 {
            map[w + 1] |= high;
        }
        return;
    }
    for_each_word(off, n, |w, m| map[w] |= m);
}

#[cfg(test)]
fn run_is_set(map: &[u64], off: u32, n: u32) -> bool {
    let mut all = true;
    for_each_word(off, n, |w, m| all &= map[w] & m == m);
    all
}

fn run_is_clear(map: &[u64], off: u32, n: u32) -> bool {
    let mut clear = true;
    for_each_word(off, n, |w, m| clear &= map[w] & m == 0);
    clear
}

/// The lowest offset of `n` (a power of two) clear bits aligned to `n`,
/// as the kernel's `bitmap_find_free_region`.
fn find_aligned_clear(map: &[u64], n: u32) -> Option<u32> {
    if n >= 64 {
        let step = (n / 64) as usize;
        return (0..map.len())
            .step_by(step)
            .find(|&w| map[w..w + step].iter().all(|&x| x == 0))
            .map(|w| w as u32 * 64);
    }
    // Within a word: bit i of `f` ends up set iff bits i..i+n are clear
    // (shifting right brings in zeros, so runs never wrap), then keep only
    // the starts aligned to n. Aligned runs below 64 never cross words.
    let starts = u64::MAX / ((1u64 << n) - 1);
    map.iter().enumerate().find_map(|(w, &word)| {
        let mut f = !word;
        let mut k = 1;
        while k < n {
            f &= f >> k;
            k <<= 1;
        }
        let hit = f & starts;
        (hit != 0).then(|| w as u32 * 64 + hit.trailing_zeros())
    })
}

/// First and one past the last set bit, if any.
fn span(map: &[u64]) -> Option<(u32, u32)> {
    let first = map.iter().position(|&w| w != 0)?;
    let last = map.iter().rposition(|&w| w != 0)?;
    let lo = first as u32 * 64 + map[first].trailing_zeros();
    let hi = last as u32 * 64 + 64 - map[last].leading_zeros();
    Some((lo, hi))
}

impl Block {
    /// An unused slot for blocks of `bits` pages.
    pub fn new(bits: u32, policy: Policy) -> Block {
        let legacy = if policy == Policy::Legacy {
            words(bits)
        } else {
            0
        };
        Block {
            va_start: 0,
            free: 0,
            dirty: 0,
            dirty_min: bits,
            dirty_max: 0,
            live: 0,
            on_list: false,
            in_use: false,
            bits,
            heads: vec![0; bits as usize],
            unflushed: vec![0; words(bits)],
            alloc_map: vec![0; legacy],
            dirty_map: vec![0; legacy],
        }
    }

    /// Starts a fresh block at `va_start` in this slot: all pages free.
    /// Slots are reset only once nothing is live, so `heads` is all zero.
    pub fn reset(&mut self, va_start: u64) {
        debug_assert!(self.heads.iter().all(|&h| h == 0));
        self.va_start = va_start;
        self.free = self.bits;
        self.dirty = 0;
        self.dirty_min = self.bits;
        self.dirty_max = 0;
        self.live = 0;
        self.on_list = false;
        self.in_use = true;
        self.unflushed.fill(0);
        self.dirty_map.fill(0);
        self.alloc_map.fill(0);
        if let Some(last) = self.alloc_map.last_mut() {
            // Pages past `bits` (bits < 64) are never handed out.
            if self.bits % 64 != 0 {
                *last = !((1u64 << (self.bits % 64)) - 1);
            }
        }
    }

    /// Takes `2^order` pages for a request of `pages` (`2^order >= pages`);
    /// returns their page offset. Fails when no (aligned, for Legacy) run
    /// is free; the block is then unchanged.
    #[inline]
    pub fn alloc(&mut self, policy: Policy, pages: u32) -> Option<u32> {
        let n = pages.next_power_of_two();
        if self.free < n {
            return None;
        }
        let off = match policy {
            Policy::Current => self.bits - self.free,
            Policy::Legacy => self.take_aligned(n)?,
        };
        self.free -= n;
        self.live += n;
        self.heads[off as usize] = pages;
        Some(off)
    }

    /// Legacy: marks the lowest free aligned run of `n` pages handed out;
    /// its offset. Out of line: the bump path stays small enough to inline.
    fn take_aligned(&mut self, n: u32) -> Option<u32> {
        let off = find_aligned_clear(&self.alloc_map, n)?;
        set_run(&mut self.alloc_map, off, n);
        Some(off)
    }

    /// Unmaps the mapping of `pages` pages at page `off`, which the caller
    /// found live ([`is_live`](Self::is_live)). Returns whether the block
    /// is now entirely dirty (to be released).
    #[inline]
    pub fn free_live(&mut self, policy: Policy, off: u32, pages: u32) -> bool {
        debug_assert!(self.is_live(off, pages));
        let n = pages.next_power_of_two();
        self.heads[off as usize] = 0;
        self.live -= n;
        self.dirty += n;
        set_run(&mut self.unflushed, off, n);
        match policy {
            Policy::Current => {
                self.dirty_min = self.dirty_min.min(off);
                self.dirty_max = self.dirty_max.max(off + n);
            }
            Policy::Legacy => set_run(&mut self.dirty_map, off, n),
        }
        self.dirty == self.bits
    }

    /// Whether a live mapping of exactly `pages` pages starts at page
    /// `off`.
    #[inline]
    pub fn is_live(&self, off: u32, pages: u32) -> bool {
        pages != 0 && off < self.bits && self.heads[off as usize] == pages
    }

    /// Nothing live, not entirely dirty, and (unless `force`) less than a
    /// quarter free: the kernel's `purge_fragmented_block` test.
    pub fn is_fragmented(&self, force: bool) -> bool {
        self.live == 0 && self.dirty != self.bits && (force || self.free < self.bits / 4)
    }

    /// Marks a fragmented block entirely dirty so it can be released.
    pub fn make_all_dirty(&mut self) {
        debug_assert_eq!(self.live, 0);
        self.free = 0;
        self.dirty = self.bits;
        self.dirty_min = 0;
        self.dirty_max = self.bits;
        self.alloc_map.fill(u64::MAX);
        self.dirty_map.fill(u64::MAX);
    }

    /// The page range an alias flush must cover, and forgets it (Current
    /// resets its range; Legacy, as in 2008, reads its dirty bitmap, which
    /// is never cleared, so it flushes old dirty pages again).
    pub fn take_flush_range(&mut self, policy: Policy) -> Option<(u32, u32)> {
        self.unflushed.fill(0);
        match policy {
            Policy::Current => {
                let r =
                    (self.dirty_min < self.dirty_max).then_some((self.dirty_min, self.dirty_max));
                self.dirty_min = self.bits;
                self.dirty_max = 0;
                r
            }
            Policy::Legacy => span(&self.dirty_map),
        }
    }

    /// Bitmap of live pages; errors on overlapping or misplaced mappings.
    fn live_map(&self, policy: Policy) -> Result<Vec<u64>, CheckError> {
        let mut live = vec![0u64; words(self.bits)];
        for (off, &h) in self.heads.iter().enumerate().filter(|(_, &h)| h != 0) {
            let (off, n) = (off as u32, h.next_power_of_two());
            ensure!(
                off + n <= self.bits,
                Bounds @ self.va_start,
                "vb {:#x}: mapping at {off} past the end",
                self.va_start
            );
            ensure!(
                run_is_clear(&live, off, n),
                Layout @ self.va_start,
                "vb {:#x}: mappings overlap at {off}",
                self.va_start
            );
            ensure!(
                policy == Policy::Current || off % n == 0,
                Bounds @ self.va_start,
                "vb {:#x}: legacy mapping at {off} not aligned to {n}",
                self.va_start
            );
            set_run(&mut live, off, n);
        }
        Ok(live)
    }

    /// Verifies the invariants listed in the module docs.
    pub fn check(&self, policy: Policy) -> Result<(), CheckError> {
        let va = self.va_start;
        ensure!(
            self.free + self.dirty + self.live == self.bits,
            Accounting @ va,
            "vb {va:#x}: free {} + dirty {} + live {} != {}",
            self.free,
            self.dirty,
            self.live,
            self.bits
        );
        ensure!(
            self.on_list == (self.free > 0),
            Structure @ va,
            "vb {va:#x}: on_list {} with free {}",
            self.on_list,
            self.free
        );
        let live = self.live_map(policy)?;
        let count = |m: &[u64]| m.iter().map(|w| w.count_ones()).sum::<u32>();
        ensure!(
            count(&live) == self.live,
            Accounting @ va,
            "vb {va:#x}: live count {} != heads {}",
            self.live,
            count(&live)
        );
        ensure!(
            live.iter().zip(&self.unflushed).all(|(l, u)| l & u == 0),
            Layout @ va,
            "vb {va:#x}: an unflushed dirty page is live"
        );
        match policy {
            Policy::Current => self.check_current(&live),
            Policy::Legacy => self.check_legacy(&live),
        }
    }

    fn check_current(&self, live: &[u64]) -> Result<(), CheckError> {
        let (va, used) = (self.va_start, self.bits - self.free);
        ensure!(
            span(live).map_or(true, |(_, hi)| hi <= used)
                && span(&self.unflushed).map_or(true, |(_, hi)| hi <= used),
            Bounds @ va,
            "vb {va:#x}: live or dirty page above the bump offset {used}"
        );
        let empty = self.dirty_min == self.bits && self.dirty_max == 0;
        ensure!(
            empty || (self.dirty_min < self.dirty_max && self.dirty_max <= self.bits),
            Bounds @ va,
            "vb {va:#x}: bad dirty range [{}, {})",
            self.dirty_min,
            self.dirty_max
        );
        if let Some((lo, hi)) = span(&self.unflushed) {
            ensure!(
                self.dirty_min <= lo && hi <= self.dirty_max,
                Bounds @ va,
                "vb {va:#x}: unflushed [{lo}, {hi}) outside dirty range [{}, {})",
                self.dirty_min,
                self.dirty_max
            );
        }
        Ok(())
    }

    fn check_legacy(&self, live: &[u64]) -> Result<(), CheckError> {
        let va = self.va_start;
        let tail = if self.bits % 64 == 0 {
            0
        } else {
            !((1u64 << (self.bits % 64)) - 1)
        };
        for (w, ((&a, &d), &l)) in self
            .alloc_map
            .iter()
            .zip(&self.dirty_map)
            .zip(live)
            .enumerate()
        {
            let t = if w + 1 == self.alloc_map.len() {
                tail
            } else {
                0
            };
            ensure!(
                a == (l | d | t),
                Structure @ va,
                "vb {va:#x}: alloc_map word {w} != live | dirty"
            );
            ensure!(
                l & d == 0 && d & t == 0,
                Layout @ va,
                "vb {va:#x}: dirty_map word {w} overlaps live pages"
            );
            ensure!(
                self.unflushed[w] & !d == 0,
                Structure @ va,
                "vb {va:#x}: unflushed page not in dirty_map"
            );
        }
        let dirty: u32 = self.dirty_map.iter().map(|w| w.count_ones()).sum();
        ensure!(
            dirty == self.dirty,
            Accounting @ va,
            "vb {va:#x}: dirty_map has {dirty} bits, dirty {}",
            self.dirty
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_search_fills_holes_lowest_first() {
        let mut map = vec![0u64; 2];
        set_run(&mut map, 0, 3); // pages 0..3 taken
        assert_eq!(find_aligned_clear(&map, 1), Some(3));
        assert_eq!(find_aligned_clear(&map, 2), Some(4));
        assert_eq!(find_aligned_clear(&map, 4), Some(4));
        assert_eq!(find_aligned_clear(&map, 64), Some(64));
        set_run(&mut map, 64, 1);
        assert_eq!(find_aligned_clear(&map, 64), None);
        assert_eq!(find_aligned_clear(&map, 32), Some(32));
    }

    #[test]
    fn runs_cross_words() {
        let mut map = vec![0u64; 2];
        set_run(&mut map, 60, 8);
        assert!(run_is_set(&map, 60, 8));
        assert!(run_is_clear(&map, 68, 60));
        assert_eq!(span(&map), Some((60, 68)));
    }

    #[test]
    fn every_short_run_sets_exactly_its_bits() {
        // Against one bit at a time, every start in three words and every
        // length of the one-mask path plus the first of the loop's.
        for off in 0..192 {
            for n in 1..=65u32.min(192 - off) {
                let mut map = vec![0u64; 3];
                set_run(&mut map, off, n);
                let mut want = vec![0u64; 3];
                (off..off + n).for_each(|b| want[(b / 64) as usize] |= 1 << (b % 64));
                assert_eq!(map, want, "off {off} n {n}");
            }
        }
    }
}
