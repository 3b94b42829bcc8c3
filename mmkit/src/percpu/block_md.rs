//! The hint record of one metadata block (and of a whole chunk):
//! [`BlockMd`], with the rules that keep it up to date.
//!
//! All positions and lengths are in bits (one bit = 4 bytes), relative to
//! the start of the block (or chunk) the record describes.
//!
//! ```text
//!   bit 0                                                    nr_bits
//!   |##..........####...##......................###.....#######....|
//!      \________/     \/  \____________________/   \___/       \__/
//!      left_free=0    |   contig_hint                          right_free
//!   first_free=2      scan_hint = largest run before contig_hint_start
//! ```

use super::bitmap;

/// Hints about the free runs (maximal runs of clear bits) of one block of
/// the allocation bitmap, or of a whole chunk.
///
/// # Invariants (for a block; `check` in the chunk verifies them)
/// - `first_free`: exactly the first clear bit (`nr_bits` when full).
/// - `left_free` / `right_free`: exactly the length of the free run that
///   touches bit 0 / bit `nr_bits - 1` (0 when that bit is used).
/// - `contig_hint`: exactly the length of the longest free run;
///   `contig_hint_start` is the start of such a run (of several, a strictly
///   better aligned start takes the hint from the one it names).
/// - `scan_hint`: 0 ("unknown"), or a free run starting at
///   `scan_hint_start`: either before `contig_hint_start` and exactly as
///   long as the longest run that starts there (an allocation larger than
///   `scan_hint` can therefore skip everything before `scan_hint_start +
///   scan_hint`), or after it and as long as the contig hint (the kernel's
///   record of an equal run that lost the tie; it skips nothing).
///   Which of several equally long runs each hint names follows the
///   kernel's `pcpu_block_update`.
///
/// For the chunk-wide record the kernel lets the free path lag: a free that
/// stays inside one block updates the chunk record with the run clipped to
/// that block, so the chunk's `contig_hint` may be smaller than the longest
/// free run (never larger), and its `scan_hint`, `left_free`, `right_free`
/// are likewise lower bounds. `first_free` stays exact. A full refresh
/// (after an allocation that cuts the chunk's contig run, or a free that
/// spans blocks or frees a whole block) makes it exact again.
///
/// # Examples
/// ```
/// use mmkit::percpu::BlockMd;
/// let mut md = BlockMd::new_free(1024);
/// assert_eq!((md.contig_hint, md.left_free, md.right_free), (1024, 1024, 1024));
/// md.reset_full();
/// md.update(10, 30); // the run [10, 30) became free
/// assert_eq!((md.contig_hint, md.contig_hint_start, md.first_free), (20, 10, 10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockMd {
    /// Length of the longest free run.
    pub contig_hint: u32,
    /// Start of the run `contig_hint` describes.
    pub contig_hint_start: u32,
    /// Longest free run before `contig_hint_start`, or 0 when unknown.
    pub scan_hint: u32,
    /// Start of the run `scan_hint` describes.
    pub scan_hint_start: u32,
    /// Length of the free run starting at bit 0.
    pub left_free: u32,
    /// Length of the free run ending at bit `nr_bits`.
    pub right_free: u32,
    /// First clear bit, `nr_bits` when there is none.
    pub first_free: u32,
    /// Bits this record covers.
    pub nr_bits: u32,
}

/// Does `s` start better aligned than `cur` (more trailing zero bits)?
/// 0 is the best alignment there is.
fn better_aligned(s: u32, cur: u32) -> bool {
    cur != 0 && (s == 0 || s.trailing_zeros() > cur.trailing_zeros())
}

/// Do `[a, a + alen)` and `[b, b + blen)` share a bit?
pub(crate) fn overlaps(a: u32, alen: u32, b: u32, blen: u32) -> bool {
    alen > 0 && blen > 0 && a < b + blen && b < a + alen
}

impl BlockMd {
    /// A record for `nr_bits` clear bits: one free run covering everything.
    ///
    /// # Complexity
    /// O(1).
    pub fn new_free(nr_bits: u32) -> Self {
        BlockMd {
            contig_hint: nr_bits,
            contig_hint_start: 0,
            scan_hint: 0,
            scan_hint_start: 0,
            left_free: nr_bits,
            right_free: nr_bits,
            first_free: 0,
            nr_bits,
        }
    }

    /// Turns the record into the one of a wholly used block.
    ///
    /// # Complexity
    /// O(1).
    pub fn reset_full(&mut self) {
        *self = BlockMd {
            contig_hint: 0,
            contig_hint_start: 0,
            scan_hint: 0,
            scan_hint_start: 0,
            left_free: 0,
            right_free: 0,
            first_free: self.nr_bits,
            nr_bits: self.nr_bits,
        };
    }

    /// Is every bit free?
    ///
    /// # Complexity
    /// O(1).
    pub fn is_free(&self) -> bool {
        self.contig_hint == self.nr_bits
    }

    /// Where a search for `bits` free bits may start: past the scan hint
    /// when the request is larger than it (nothing before can fit), else
    /// at `first_free`.
    ///
    /// # Complexity
    /// O(1).
    pub fn next_hint(&self, bits: u32) -> u32 {
        if self.scan_hint != 0
            && self.contig_hint_start > self.scan_hint_start
            && bits > self.scan_hint
        {
            self.scan_hint_start + self.scan_hint
        } else {
            self.first_free
        }
    }

    /// Records that `[s, e)` is a free run (maximal for a block; possibly
    /// clipped to one block for a chunk record, which keeps the hints lower
    /// bounds). Only ever raises hints; used by the free path and by
    /// refreshes, which feed runs in increasing order. Between equally long
    /// runs it chooses as the kernel's `pcpu_block_update` does, except
    /// where that would leave a scan hint shorter than a run before it (the
    /// record then stays exact; see the type's invariants).
    ///
    /// # Complexity
    /// O(1).
    pub fn update(&mut self, s: u32, e: u32) {
        self.record_run(s, e, false);
    }

    /// [`update`](Self::update) for the chunk record, which keeps a scan
    /// hint that lies wholly before a new contig hint at or before the old
    /// one (the kernel forgets it). The chunk's refresh scans from
    /// `first_free`, so its scan hint never picks a contig hint; kept, it
    /// lets a later free that touches it be joined with it.
    ///
    /// # Complexity
    /// O(1).
    pub(crate) fn update_chunk(&mut self, s: u32, e: u32) {
        self.record_run(s, e, true);
    }

    fn record_run(&mut self, s: u32, e: u32, keep_scan_before: bool) {
        let c = e - s;
        self.first_free = self.first_free.min(s);
        if s == 0 {
            self.left_free = self.left_free.max(c);
        }
        if e == self.nr_bits {
            self.right_free = self.right_free.max(c);
        }
        if c > self.contig_hint {
            self.grow_contig(s, c, keep_scan_before);
        } else if c == self.contig_hint {
            self.tie_contig(s, c);
        } else if s < self.contig_hint_start
            && self.scan_hint != 0
            && (c > self.scan_hint || (c == self.scan_hint && s > self.scan_hint_start))
        {
            // Before the contig hint: a longer run, or an equal one farther
            // on, becomes the scan hint. An unknown scan hint stays unknown
            // (the kernel would take this run though a longer one may lie
            // before it).
            self.set_scan(s, c);
        }
    }

    /// `[s, s + c)` is longer than the contig hint: it becomes the hint.
    fn grow_contig(&mut self, s: u32, c: u32, keep_scan_before: bool) {
        let (cs, cc) = (self.contig_hint_start, self.contig_hint);
        if s <= cs {
            // What lies before the run (which may hold the old hint) is
            // forgotten, unless asked to keep a scan hint wholly before it
            // (it was a longest run before a later point).
            if !keep_scan_before || self.scan_hint_start + self.scan_hint >= s {
                self.scan_hint = 0;
            }
        } else if cc > self.scan_hint {
            // The old hint was the longest run anywhere, so it is a longest
            // before the new one.
            self.set_scan(cs, cc);
        } else if s <= self.scan_hint_start {
            // A scan hint as long as the old hint, after the new run (or
            // part of it).
            self.scan_hint = 0;
        }
        // Otherwise the scan hint is as long as the old hint and before
        // `s`: it stays, the nearer of the two.
        self.contig_hint = c;
        self.contig_hint_start = s;
    }

    /// `[s, s + c)` is as long as the contig hint: a strictly better
    /// aligned start (alignment padding is what makes a hint useless) takes
    /// the hint; otherwise the run becomes the scan hint if it lies farther
    /// than the scan hint or the scan hint is shorter, before the contig
    /// hint or after it.
    fn tie_contig(&mut self, s: u32, c: u32) {
        let cs = self.contig_hint_start;
        if better_aligned(s, cs) {
            if s <= self.scan_hint_start && self.scan_hint < c {
                // A shorter scan hint after the new hint's start.
                self.scan_hint = 0;
            } else if s > cs && self.scan_hint != 0 && self.scan_hint < c {
                // The kernel keeps the shorter scan hint, though the old
                // contig run now lies before the hint: that run takes it.
                self.set_scan(cs, c);
            }
            self.contig_hint_start = s;
        } else if self.scan_hint < c || s > self.scan_hint_start {
            self.set_scan(s, c);
        }
    }

    fn set_scan(&mut self, s: u32, c: u32) {
        self.scan_hint = c;
        self.scan_hint_start = s;
    }

    /// Shrinks the hints after `[s, e)` (record-relative, inside the
    /// record) was allocated. `map` is the chunk's alloc_map with the
    /// allocation already set; `base` is the record's first bit in it.
    /// A cut into the contig hint rescans with [`refresh`](Self::refresh).
    ///
    /// # Complexity
    /// O(1) unless the contig hint was cut; then O(bits after the scan hint
    /// / 64).
    pub(crate) fn alloc_update(&mut self, map: &[u64], base: usize, s: u32, e: u32) {
        let old_first_free = self.first_free;
        if s == self.first_free {
            let end = base + self.nr_bits as usize;
            self.first_free = (bitmap::next_zero(map, base + e as usize, end) - base) as u32;
        }
        self.left_free = self.left_free.min(s);
        self.right_free = self.right_free.min(self.nr_bits - e);
        if overlaps(s, e - s, self.scan_hint_start, self.scan_hint) {
            self.scan_hint = 0;
        }
        if overlaps(s, e - s, self.contig_hint_start, self.contig_hint)
            && !self.cut_right_run(s, e, old_first_free)
        {
            self.refresh(map, base);
        }
    }

    /// The common cut, answered without a scan: `[s, e)` was allocated at
    /// the start of a contig run that reaches the end of the record, and
    /// nothing was free before `s`, so the rest `[e, nr_bits)` is the only
    /// run. Returns `false` (nothing changed) when the cut is not of that
    /// shape. With runs before `s` the answer depends on them: the kernel's
    /// rescan starts at the end of the promoted scan hint, and a run there
    /// as long as it and better aligned takes the contig hint.
    ///
    /// # Complexity
    /// O(1).
    pub(crate) fn cut_right_run(&mut self, s: u32, e: u32, old_first_free: u32) -> bool {
        let (cs, c) = (self.contig_hint_start, self.contig_hint);
        if s != cs || cs + c != self.nr_bits || e > self.nr_bits || old_first_free != s {
            return false;
        }
        let rest = self.nr_bits - e;
        self.contig_hint = rest;
        self.contig_hint_start = if rest > 0 { e } else { 0 };
        self.scan_hint = 0;
        true
    }

    /// `pcpu_block_refresh_hint`: recomputes the contig and scan hints from
    /// the bitmap after an allocation cut the contig run. A known scan hint
    /// is promoted to contig hint (no run before its end is longer) and the
    /// bits after it are scanned; otherwise the scan starts at `first_free`.
    ///
    /// # Complexity
    /// O(bits scanned / 64 + runs found).
    pub(crate) fn refresh(&mut self, map: &[u64], base: usize) {
        let from = if self.scan_hint != 0 {
            self.contig_hint = self.scan_hint;
            self.contig_hint_start = self.scan_hint_start;
            self.scan_hint = 0;
            self.contig_hint_start + self.contig_hint
        } else {
            self.contig_hint = 0;
            self.contig_hint_start = 0;
            self.first_free
        };
        let end = base + self.nr_bits as usize;
        bitmap::for_each_zero_run(map, base + from as usize, end, |s, e| {
            self.update((s - base) as u32, (e - base) as u32);
        });
    }
}
