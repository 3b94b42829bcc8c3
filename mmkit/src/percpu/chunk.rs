//! One chunk of the bitmap allocator: its two bitmaps and its hint blocks.
//!
//! ```text
//!  unit (unit_size bytes, the same offsets in every CPU's unit)
//!  |<- block 0: 4096 B ->|<- block 1 ->|        ...        |<- block n-1 ->|
//!  alloc_map  1 bit per 4 B: 1 = allocated
//!             |1111 1100 0011 1111 1000 ...
//!  bound_map  1 bit per 4 B + 1: set at each allocation's start and end
//!             |1000 0010 0010 0000 0100 ...
//!  blocks     one BlockMd per 1024 bits: contig/scan/left/right/first_free
//!  md         the same record over the whole chunk
//! ```
//!
//! # Invariants (checked by [`Chunk::check`])
//! - Every live allocation `[s, e)` has `alloc_map` bits `s..e` set,
//!   `bound_map` bit `s` set and bits `s+1..e` clear; every set `alloc_map`
//!   bit belongs to one. So "`alloc_map[s]` and `bound_map[s]` are set" is
//!   exactly "`s` starts a live allocation", and its end is the next set
//!   `bound_map` bit: a free needs no size.
//! - `free_bits == nr_bits - (set bits of alloc_map)`.
//! - Block records are exact (see [`BlockMd`]); the chunk record is exact in
//!   `first_free` and a lower bound elsewhere, with `contig_hint` at least
//!   every block's `contig_hint`.

use alloc::vec;
use alloc::vec::Vec;

use super::bitmap;
use super::block_md::{overlaps, BlockMd};
use super::BLOCK_BITS;
use crate::error::{CheckError, FreeError};

const BB: usize = BLOCK_BITS as usize;

/// One chunk: `nr_bits` bits of bitmap with hints.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    alloc_map: Vec<u64>,
    bound_map: Vec<u64>,
    blocks: Vec<BlockMd>,
    /// The chunk-wide hint record (`chunk_md` in the kernel).
    pub(crate) md: BlockMd,
    /// Clear bits in `alloc_map`.
    pub(crate) free_bits: u32,
    /// Live allocations.
    pub(crate) live: u32,
}

/// Can `bits` bits aligned to `align` start inside `[s, s + len)`?
fn fits(s: usize, len: usize, bits: usize, align: usize) -> bool {
    let a = s.next_multiple_of(align);
    a + bits <= s + len
}

impl Chunk {
    /// A wholly free chunk of `nr_bits` bits (a multiple of `BLOCK_BITS`).
    pub(crate) fn new(nr_bits: u32) -> Self {
        let n = nr_bits as usize;
        Chunk {
            alloc_map: vec![0; n / 64],
            bound_map: vec![0; n / 64 + 1],
            blocks: vec![BlockMd::new_free(BLOCK_BITS); n / BB],
            md: BlockMd::new_free(nr_bits),
            free_bits: nr_bits,
            live: 0,
        }
    }

    fn nr_bits(&self) -> usize {
        self.md.nr_bits as usize
    }

    /// The record of block `i`.
    #[cfg(test)]
    pub(crate) fn block(&self, i: usize) -> &BlockMd {
        &self.blocks[i]
    }

    /// Allocates exactly `[off, off + bits)` (tests set up layouts with it).
    #[cfg(test)]
    pub(crate) fn alloc_at(&mut self, off: usize, bits: usize) {
        assert_eq!(
            bitmap::next_set(&self.alloc_map, off, off + bits),
            off + bits,
            "not free"
        );
        self.mark_allocated(off, bits);
    }

    /// Is nothing allocated?
    pub(crate) fn is_empty(&self) -> bool {
        self.free_bits == self.md.nr_bits
    }

    /// Heap bytes of the maps and blocks.
    pub(crate) fn metadata_bytes(&self) -> u64 {
        let words = self.alloc_map.len() + self.bound_map.len();
        (words * 8 + self.blocks.len() * core::mem::size_of::<BlockMd>()) as u64
    }

    /// `pcpu_find_block_fit`: the bit where [`alloc_area`](Self::alloc_area)
    /// should start scanning for `bits` bits aligned to `align`, found from
    /// the hints alone, or `None` when the hints say the chunk cannot serve
    /// it.
    ///
    /// Walks blocks from the chunk's first free bit, carrying a free run
    /// across block edges (`right_free` of one + `left_free` of the next),
    /// and stops at the first block whose contig hint fits. Every record it
    /// reads is exact, so a request aligned to one bit gets the lowest fit
    /// in the chunk. The kernel starts past the chunk's scan hint instead;
    /// that hint is only the largest run the chunk record happens to know
    /// of (block summaries, runs clipped to a block), so it can skip a
    /// longer run before it.
    pub(crate) fn find_block_fit(&self, bits: usize, align: usize) -> Option<usize> {
        let md = &self.md;
        let (cs, contig) = (md.contig_hint_start as usize, md.contig_hint as usize);
        if !fits(cs, contig, bits, align) {
            return None;
        }
        let start = md.first_free as usize;
        let (mut carry_start, mut carry_len) = (0usize, 0usize);
        for (i, b) in self.blocks.iter().enumerate().skip(start / BB) {
            let base = i * BB;
            if carry_len > 0 {
                let len = carry_len + b.left_free as usize;
                if fits(carry_start, len, bits, align) {
                    return Some(carry_start);
                }
                if b.is_free() {
                    carry_len = len;
                    continue;
                }
            }
            let off = start.saturating_sub(base);
            let bcs = b.contig_hint_start as usize;
            if bcs >= off && fits(base + bcs, b.contig_hint as usize, bits, align) {
                return Some(base + off.max(b.next_hint(bits as u32) as usize));
            }
            let rs = (base + BB - b.right_free as usize).max(start);
            carry_start = rs;
            carry_len = (base + BB).saturating_sub(rs);
        }
        (carry_len > 0 && fits(carry_start, carry_len, bits, align)).then_some(carry_start)
    }

    /// `pcpu_alloc_area`: takes the first `bits`-bit run aligned to `align`
    /// in `[start, start + bits + BLOCK_BITS)` and updates maps and hints.
    /// Returns its first bit, or `None` (nothing changed) when there is none.
    ///
    /// # Complexity
    /// O((bits + BLOCK_BITS) / 64) for the scan, plus the hint updates:
    /// O(1) per block touched unless a contig hint is cut (a rescan).
    pub(crate) fn alloc_area(&mut self, bits: usize, align: usize, start: usize) -> Option<usize> {
        let end = (start + bits + BB).min(self.nr_bits());
        let off = bitmap::find_zero_run(&self.alloc_map, start, end, bits, align)?;
        self.mark_allocated(off, bits);
        Some(off)
    }

    fn mark_allocated(&mut self, off: usize, bits: usize) {
        let end = off + bits;
        bitmap::set_range(&mut self.alloc_map, off, end);
        bitmap::set(&mut self.bound_map, off);
        bitmap::set(&mut self.bound_map, end);
        bitmap::clear_range(&mut self.bound_map, off + 1, end);
        self.free_bits -= bits as u32;
        self.live += 1;
        self.alloc_block_hints(off, end);
        self.alloc_chunk_hints(off, end);
    }

    /// Block records after `[off, end)` was allocated: blocks covered whole
    /// become full, the one or two partly covered shrink their hints.
    fn alloc_block_hints(&mut self, off: usize, end: usize) {
        for i in off / BB..=(end - 1) / BB {
            let base = i * BB;
            let s = (off.max(base) - base) as u32;
            let e = (end.min(base + BB) - base) as u32;
            if s == 0 && e as usize == BB {
                self.blocks[i].reset_full();
            } else {
                self.blocks[i].alloc_update(&self.alloc_map, base, s, e);
            }
        }
    }

    /// The chunk record after `[off, end)` was allocated. A cut into its
    /// contig hint means a full refresh from the block records.
    fn alloc_chunk_hints(&mut self, off: usize, end: usize) {
        let nr = self.nr_bits();
        let md = &mut self.md;
        let old_first_free = md.first_free;
        if off == md.first_free as usize {
            md.first_free = bitmap::next_zero(&self.alloc_map, end, nr) as u32;
        }
        md.left_free = md.left_free.min(off as u32);
        md.right_free = md.right_free.min((nr - end) as u32);
        let len = (end - off) as u32;
        if overlaps(off as u32, len, md.scan_hint_start, md.scan_hint) {
            md.scan_hint = 0;
        }
        if overlaps(off as u32, len, md.contig_hint_start, md.contig_hint)
            && !md.cut_right_run(off as u32, end as u32, old_first_free)
        {
            self.refresh_chunk();
        }
    }

    /// `pcpu_chunk_refresh_hint`: recomputes the chunk record from
    /// `first_free` on. Free runs are joined across blocks from the block
    /// records alone (`right_free` + whole free blocks + `left_free`, and
    /// each block's contig hint when it is inside the block), the runs
    /// `pcpu_for_each_md_free_region` yields.
    ///
    /// # Complexity
    /// O(blocks).
    fn refresh_chunk(&mut self) {
        let nr = self.nr_bits();
        let from = self.md.first_free as usize;
        let mut md = BlockMd::new_free(nr as u32);
        md.reset_full();
        md.first_free = from as u32;
        let mut carry: Option<(usize, usize)> = None;
        // `from` is the chunk's first free bit, so every bit of its block
        // before `from` is used and the block's hints describe exactly the
        // runs at or after `from`: no bitmap needs reading.
        let first = from / BB;
        for (i, b) in self.blocks.iter().enumerate().skip(first) {
            let base = i * BB;
            if b.is_free() {
                carry = Some((carry.map_or(base, |c| c.0), base + BB));
                continue;
            }
            let carried = carry.take();
            if let Some((s, _)) = carried {
                md.update_chunk(s as u32, (base + b.left_free as usize) as u32);
            }
            // The block's contig hint, unless it is the left run just
            // joined or the right run carried on. A left run that is not
            // the contig hint and not joined is not read, as in the kernel.
            let (bcs, bc) = (b.contig_hint_start, b.contig_hint);
            if bc > 0 && (carried.is_none() || bcs > 0) && (bcs + bc) as usize != BB {
                md.update_chunk(base as u32 + bcs, base as u32 + bcs + bc);
            }
            if b.right_free > 0 {
                carry = Some((base + BB - b.right_free as usize, base + BB));
            }
        }
        if let Some((s, e)) = carry {
            md.update_chunk(s as u32, e as u32);
        }
        self.md = md;
    }

    /// `pcpu_free_area`: frees the allocation starting at bit `off` and
    /// returns its length in bits.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] when `off` does not start a live
    /// allocation (nothing changes).
    ///
    /// # Complexity
    /// O(length / 64 + BLOCK_BITS / 64) plus, when the freed run spans
    /// blocks or frees a whole block, a chunk refresh.
    pub(crate) fn free_area(&mut self, off: usize) -> Result<usize, FreeError> {
        let nr = self.nr_bits();
        if off >= nr || !bitmap::test(&self.alloc_map, off) || !bitmap::test(&self.bound_map, off) {
            return Err(FreeError::NotAllocated);
        }
        let end = bitmap::next_set(&self.bound_map, off + 1, nr + 1);
        bitmap::clear_range(&mut self.alloc_map, off, end);
        self.free_bits += (end - off) as u32;
        self.live -= 1;
        let (rs, re) = self.free_block_hints(off, end);
        if re - rs >= BB || rs / BB != (re - 1) / BB {
            self.md.first_free = self.md.first_free.min(off as u32);
            self.refresh_chunk();
        } else {
            // Clipped to its block: the chunk record may lag, never lead.
            let (s, e) = self.join_known_runs(rs as u32, re as u32);
            self.md.update_chunk(s, e);
        }
        Ok(end - off)
    }

    /// Widens the free run `[s, e)` (cut at its block's edges) by the chunk
    /// record's scan and contig runs when it touches them: both are free,
    /// so touching means one run, and the record must not hold two
    /// overlapping pieces of it.
    fn join_known_runs(&self, mut s: u32, mut e: u32) -> (u32, u32) {
        let md = &self.md;
        let known = [
            (md.scan_hint_start, md.scan_hint),
            (md.contig_hint_start, md.contig_hint),
            (md.scan_hint_start, md.scan_hint),
        ];
        for (ks, kc) in known {
            if kc > 0 && s <= ks + kc && ks <= e {
                s = s.min(ks);
                e = e.max(ks + kc);
            }
        }
        (s, e)
    }

    /// Block records after `[off, end)` was cleared. Returns the free run
    /// around it, cut at the edges of its first and last block.
    fn free_block_hints(&mut self, off: usize, end: usize) -> (usize, usize) {
        let (sb, eb) = (off / BB, (end - 1) / BB);
        let rs = self.run_start(sb, off);
        let re = self.run_end(eb, end);
        let (sbase, ebase) = (sb * BB, eb * BB);
        if sb == eb {
            self.blocks[sb].update((rs - sbase) as u32, (re - sbase) as u32);
        } else {
            self.blocks[sb].update((rs - sbase) as u32, BLOCK_BITS);
            for b in &mut self.blocks[sb + 1..eb] {
                *b = BlockMd::new_free(BLOCK_BITS);
            }
            self.blocks[eb].update(0, (re - ebase) as u32);
        }
        (rs, re)
    }

    /// First bit of the free run (inside block `b`) that ends at `off`.
    /// The hints answer the common cases without touching the bitmap.
    fn run_start(&self, b: usize, off: usize) -> usize {
        let base = b * BB;
        let md = &self.blocks[b];
        let o = (off - base) as u32;
        if md.left_free == o {
            base
        } else if md.contig_hint > 0 && md.contig_hint_start + md.contig_hint == o {
            base + md.contig_hint_start as usize
        } else {
            bitmap::prev_set(&self.alloc_map, base, off).map_or(base, |p| p + 1)
        }
    }

    /// End of the free run (inside block `b`) that starts at `end`.
    fn run_end(&self, b: usize, end: usize) -> usize {
        let base = b * BB;
        let md = &self.blocks[b];
        let o = (end - base) as u32;
        if o == BLOCK_BITS || BLOCK_BITS - md.right_free == o {
            base + BB
        } else if md.contig_hint > 0 && md.contig_hint_start == o {
            base + (md.contig_hint_start + md.contig_hint) as usize
        } else {
            bitmap::next_set(&self.alloc_map, end, base + BB)
        }
    }

    /// Lengths (in bits) of every live allocation, checked against both
    /// maps; see the module invariants.
    fn check_maps(&self) -> Result<(u64, u64), CheckError> {
        let nr = self.nr_bits();
        let (mut pos, mut live, mut used) = (0usize, 0u64, 0u64);
        loop {
            pos = bitmap::next_set(&self.alloc_map, pos, nr);
            if pos >= nr {
                break;
            }
            crate::ensure!(
                bitmap::test(&self.bound_map, pos),
                Structure @ pos,
                "bit {pos}: allocated but no bound_map start"
            );
            let end = bitmap::next_set(&self.bound_map, pos + 1, nr + 1);
            crate::ensure!(
                end <= nr,
                Structure @ pos,
                "bit {pos}: allocation has no end in bound_map"
            );
            let hole = bitmap::next_zero(&self.alloc_map, pos, end);
            crate::ensure!(
                hole == end,
                Layout @ hole,
                "allocation [{pos}, {end}) has a clear bit at {hole}"
            );
            live += 1;
            used += (end - pos) as u64;
            pos = end;
        }
        Ok((live, used))
    }

    /// Every free run of `[from, to)` as (start, end), relative to `from`.
    fn runs(&self, from: usize, to: usize) -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        bitmap::for_each_zero_run(&self.alloc_map, from, to, |s, e| {
            v.push(((s - from) as u32, (e - from) as u32))
        });
        v
    }

    /// Verifies maps, counters and every hint against the bitmap.
    pub(crate) fn check(&self) -> Result<(), CheckError> {
        let (live, used) = self.check_maps()?;
        crate::ensure!(
            live == u64::from(self.live),
            Accounting,
            "live count {} but {live} in the maps",
            self.live
        );
        let free = self.nr_bits() as u64 - used;
        crate::ensure!(
            free == u64::from(self.free_bits),
            Accounting,
            "free_bits {} but {free} clear",
            self.free_bits
        );
        for (i, b) in self.blocks.iter().enumerate() {
            let runs = self.runs(i * BB, (i + 1) * BB);
            check_block(b, &runs).map_err(|e| e.within(alloc::format!("block {i}")))?;
        }
        let runs = self.runs(0, self.nr_bits());
        let max_block = self.blocks.iter().map(|b| b.contig_hint).max().unwrap_or(0);
        check_chunk_md(&self.md, &runs, max_block).map_err(|e| e.within("chunk md"))
    }
}

/// The free run of `runs` that contains `[s, s + len)`, if any.
fn run_containing(runs: &[(u32, u32)], s: u32, len: u32) -> Option<(u32, u32)> {
    runs.iter().copied().find(|&(a, b)| a <= s && s + len <= b)
}

/// A block record must be exact (see [`BlockMd`]).
fn check_block(b: &BlockMd, runs: &[(u32, u32)]) -> Result<(), CheckError> {
    let nr = b.nr_bits;
    let first = runs.first().map_or(nr, |r| r.0);
    crate::ensure!(
        b.first_free == first,
        Hint @ first,
        "first_free {} but first clear bit {first}",
        b.first_free
    );
    let left = runs.first().filter(|r| r.0 == 0).map_or(0, |r| r.1);
    crate::ensure!(
        b.left_free == left,
        Hint,
        "left_free {} but {left}",
        b.left_free
    );
    let right = runs.last().filter(|r| r.1 == nr).map_or(0, |r| r.1 - r.0);
    crate::ensure!(
        b.right_free == right,
        Hint,
        "right_free {} but {right}",
        b.right_free
    );
    let max = runs.iter().map(|r| r.1 - r.0).max().unwrap_or(0);
    crate::ensure!(
        b.contig_hint == max,
        Hint,
        "contig_hint {} but longest run {max}",
        b.contig_hint
    );
    if max > 0 {
        let cs = b.contig_hint_start;
        crate::ensure!(
            runs.contains(&(cs, cs + max)),
            Hint @ cs,
            "contig_hint_start {cs} is not a run of {max}"
        );
    }
    if b.scan_hint != 0 {
        let (ss, sc) = (b.scan_hint_start, b.scan_hint);
        crate::ensure!(
            runs.contains(&(ss, ss + sc)),
            Hint @ ss,
            "scan hint ({ss}, {sc}) is not a free run"
        );
        if ss > b.contig_hint_start {
            crate::ensure!(
                sc == b.contig_hint,
                Hint @ ss,
                "scan hint ({ss}, {sc}) after the contig hint but shorter"
            );
        } else {
            crate::ensure!(
                ss < b.contig_hint_start,
                Hint @ ss,
                "scan hint at the contig hint's start {ss}"
            );
            let before = runs
                .iter()
                .filter(|r| r.0 < b.contig_hint_start)
                .map(|r| r.1 - r.0)
                .max();
            crate::ensure!(
                before == Some(sc),
                Hint,
                "scan_hint {sc} but longest run before contig {before:?}"
            );
        }
    }
    Ok(())
}

/// The chunk record: exact `first_free`, lower bounds elsewhere.
fn check_chunk_md(md: &BlockMd, runs: &[(u32, u32)], max_block: u32) -> Result<(), CheckError> {
    let first = runs.first().map_or(md.nr_bits, |r| r.0);
    crate::ensure!(
        md.first_free == first,
        Hint @ first,
        "first_free {} but first clear bit {first}",
        md.first_free
    );
    let max = runs.iter().map(|r| r.1 - r.0).max().unwrap_or(0);
    crate::ensure!(
        md.contig_hint <= max,
        Hint,
        "contig_hint {} above the longest run {max}",
        md.contig_hint
    );
    crate::ensure!(
        md.contig_hint >= max_block,
        Hint,
        "contig_hint {} below a block's {max_block}",
        md.contig_hint
    );
    if md.contig_hint > 0 {
        let ok = run_containing(runs, md.contig_hint_start, md.contig_hint).is_some();
        crate::ensure!(
            ok,
            Hint @ md.contig_hint_start,
            "contig hint ({}, {}) is not free",
            md.contig_hint_start,
            md.contig_hint
        );
    }
    if md.scan_hint != 0 {
        let (ss, sc) = (md.scan_hint_start, md.scan_hint);
        crate::ensure!(
            run_containing(runs, ss, sc).is_some(),
            Hint @ ss,
            "scan hint ({ss}, {sc}) is not free"
        );
        let (cs, ch) = (md.contig_hint_start, md.contig_hint);
        crate::ensure!(
            ss + sc <= cs || (ss >= cs + ch && sc == ch),
            Hint @ ss,
            "scan hint ({ss}, {sc}) overlaps the contig hint or is after it and shorter"
        );
    }
    let left = runs.first().filter(|r| r.0 == 0).map_or(0, |r| r.1);
    crate::ensure!(
        md.left_free <= left,
        Hint,
        "left_free {} above {left}",
        md.left_free
    );
    let right = runs
        .last()
        .filter(|r| r.1 == md.nr_bits)
        .map_or(0, |r| r.1 - r.0);
    crate::ensure!(
        md.right_free <= right,
        Hint,
        "right_free {} above {right}",
        md.right_free
    );
    Ok(())
}
