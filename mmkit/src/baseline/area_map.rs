//! The area-map percpu allocator that seed 003 replaced (Linux 3.15-4.13).
//!
//! Each chunk keeps `map`: the start offsets of its areas in address order,
//! bit 0 set when the area is in use (offsets are even, so bit 0 is free
//! to carry the flag), closed by a sentinel `unit_size | 1`. Area `i` is
//! `[map[i] & !1, map[i + 1] & !1)`.
//!
//! ```text
//!   map:  [ 0|1 ][ 16 ][ 48|1 ][ 52 ][ 64|1 ] ... [ unit_size|1 ]
//!   unit: |used  |free      |used|free |used ...               |
//! ```
//!
//! Allocation is first fit from the `first_free` index hint; splitting an
//! area inserts entries (a memmove of everything after it), freeing finds
//! the entry by binary search and merging removes entries (another
//! memmove). A chunk's `contig_hint` only says "maybe this much is free":
//! a request that is the right size but the wrong alignment scans the whole
//! map of every such chunk, which is the seed's 52-minute case.
//!
//! To keep one contract with [`crate::percpu::PercpuAllocator`], sizes are
//! rounded up to 4 bytes and alignments raised to 4 (the kernel's area map
//! used 2); nothing else in the algorithm depends on it.
//!
//! # Invariants (checked by [`AreaMapAllocator::check`])
//! - `map` offsets strictly increase from 0; the last entry is
//!   `unit_size | 1`; every offset is a multiple of 4.
//! - No two neighbouring areas are both free (merges are done at once).
//! - Every area before `first_free` is in use.
//! - `free_size` is the sum of the free areas; `contig_hint` is at least
//!   the largest free area (it may be stale-high; a failed full scan fixes
//!   it).
//! - A chunk is listed in the slot of its free size (`pcpu_chunk_slot`
//!   before 4.14); at most one chunk is wholly free.

use alloc::vec::Vec;

use crate::error::{AllocError, CheckError, FreeError};
use crate::percpu::slots::{size_to_slot, ChunkTable, TableChunk, NIL};
use crate::percpu::{
    check_unit_size, free_slot, request_bits, PcpuPtr, PercpuAlloc, PercpuStats, MIN_ALLOC_SIZE,
};

/// Bit 0 of a map entry: the area is in use.
const IN_USE: u32 = 1;

/// One chunk's area map.
#[derive(Debug, Clone)]
struct AreaChunk {
    map: Vec<u32>,
    first_free: usize,
    contig_hint: u32,
    free_size: u32,
    live: u32,
}

impl AreaChunk {
    fn new(unit_size: u32) -> Self {
        // The kernel starts maps at 16 entries and doubles them.
        let mut map = Vec::with_capacity(16);
        map.push(0);
        map.push(unit_size | IN_USE);
        AreaChunk {
            map,
            first_free: 0,
            contig_hint: unit_size,
            free_size: unit_size,
            live: 0,
        }
    }

    fn unit_size(&self) -> u32 {
        self.map[self.map.len() - 1] & !IN_USE
    }

    fn areas(&self) -> usize {
        self.map.len() - 1
    }

    fn area(&self, i: usize) -> (u32, u32, bool) {
        let s = self.map[i];
        (s & !IN_USE, self.map[i + 1] & !IN_USE, s & IN_USE != 0)
    }

    /// `pcpu_alloc_area`: first fit of `size` bytes aligned to `align`,
    /// scanning from `first_free`. On failure the scan saw every free area,
    /// so `contig_hint` becomes exact.
    fn alloc_area(&mut self, size: u32, align: u32) -> Option<u32> {
        let mut max_contig = 0;
        let mut seen_free = false;
        let mut i = self.first_free;
        while i < self.areas() {
            let (off, end, used) = self.area(i);
            if used {
                i += 1;
                continue;
            }
            let head = off.next_multiple_of(align) - off;
            if end - off < head + size {
                if !seen_free {
                    self.first_free = i;
                    seen_free = true;
                }
                max_contig = max_contig.max(end - off);
                i += 1;
                continue;
            }
            return Some(self.split(i, head, size, max_contig, seen_free));
        }
        self.contig_hint = max_contig;
        None
    }

    /// Carves `[off + head, off + head + size)` out of free area `i`. The
    /// previous area is in use (areas are merged), so a head stays a free
    /// area of its own; head and tail entries go in with one memmove.
    fn split(
        &mut self,
        mut i: usize,
        head: u32,
        size: u32,
        mut max_contig: u32,
        mut seen_free: bool,
    ) -> u32 {
        let (off, end, _) = self.area(i);
        let start = off + head;
        let tail = end - start - size;
        let extra = [start, start + size];
        let new = match (head > 0, tail > 0) {
            (true, true) => &extra[..],
            (true, false) => &extra[..1],
            (false, true) => &extra[1..],
            (false, false) => &extra[..0],
        };
        self.map.splice(i + 1..i + 1, new.iter().copied());
        if head > 0 {
            if !seen_free {
                self.first_free = i;
                seen_free = true;
            }
            max_contig = max_contig.max(head);
            i += 1;
        }
        if tail > 0 {
            max_contig = max_contig.max(tail);
        }
        if !seen_free {
            self.first_free = i + 1;
        }
        // Scanned to the end only when the allocation is the last area.
        self.contig_hint = if i + 1 == self.areas() {
            max_contig
        } else {
            self.contig_hint.max(max_contig)
        };
        self.free_size -= size;
        self.live += 1;
        self.map[i] |= IN_USE;
        start
    }

    /// Index of the area starting at `off` (binary search), if any.
    fn find(&self, off: u32) -> Option<usize> {
        self.map[..self.areas()]
            .binary_search_by_key(&off, |e| e & !IN_USE)
            .ok()
    }

    /// `pcpu_free_area`: frees the in-use area starting at `off`, merging it
    /// with free neighbours (one memmove), and returns its size.
    fn free_area(&mut self, off: u32) -> Result<u32, FreeError> {
        let i = self.find(off).ok_or(FreeError::NotAllocated)?;
        let (_, end, used) = self.area(i);
        if !used {
            return Err(FreeError::NotAllocated);
        }
        self.first_free = self.first_free.min(i);
        self.map[i] &= !IN_USE;
        let size = end - off;
        self.free_size += size;
        self.live -= 1;
        let mut p = i;
        let mut remove = 0;
        if self.map[i + 1] & IN_USE == 0 {
            remove += 1;
        }
        if i > 0 && self.map[i - 1] & IN_USE == 0 {
            remove += 1;
            p -= 1;
        }
        self.map.drain(p + 1..p + 1 + remove);
        let (s, e, _) = self.area(p);
        self.contig_hint = self.contig_hint.max(e - s);
        Ok(size)
    }

    fn check(&self) -> Result<(), CheckError> {
        let n = self.areas();
        crate::ensure!(self.map[0] & !IN_USE == 0, Layout @ 0usize, "map does not start at 0");
        crate::ensure!(self.map[n] & IN_USE != 0, Structure @ n, "sentinel not in use");
        crate::ensure!(
            self.first_free <= n,
            Hint @ self.first_free,
            "first_free {} past {n} areas",
            self.first_free
        );
        let (mut free, mut largest, mut live) = (0u32, 0u32, 0u32);
        for i in 0..n {
            let (s, e, used) = self.area(i);
            crate::ensure!(s < e, Layout @ s, "area {i}: [{s}, {e}) not increasing");
            crate::ensure!(
                s % 4 == 0 && e % 4 == 0,
                Bounds @ s,
                "area {i}: [{s}, {e}) not 4-byte granular"
            );
            if used {
                live += 1;
            } else {
                crate::ensure!(
                    i >= self.first_free,
                    Hint @ s,
                    "free area {i} before first_free {}",
                    self.first_free
                );
                crate::ensure!(
                    i == 0 || self.area(i - 1).2,
                    Layout @ s,
                    "free areas {} and {i} not merged",
                    i - 1
                );
                free += e - s;
                largest = largest.max(e - s);
            }
        }
        crate::ensure!(
            free == self.free_size,
            Accounting,
            "free_size {} but {free} free",
            self.free_size
        );
        crate::ensure!(
            live == self.live,
            Accounting,
            "live {} but {live} in the map",
            self.live
        );
        crate::ensure!(
            self.contig_hint >= largest,
            Hint,
            "contig_hint {} below largest free {largest}",
            self.contig_hint
        );
        Ok(())
    }
}

/// The area-map percpu allocator (Linux 3.15-4.13), the baseline of seed
/// 003; see the [module docs](self).
///
/// # Examples
/// ```
/// use mmkit::baseline::area_map::AreaMapAllocator;
/// use mmkit::percpu::PercpuAlloc;
/// let mut a = AreaMapAllocator::new(32 << 10).unwrap();
/// let p = a.alloc(6, 4).unwrap();
/// let q = a.alloc(4, 4).unwrap();
/// assert_eq!((p.offset, q.offset), (0, 8));
/// assert_eq!(a.free(p), Ok(8));
/// a.check().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct AreaMapAllocator {
    unit_size: u64,
    table: ChunkTable<AreaChunk>,
}

impl TableChunk for AreaChunk {
    fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn live(&self) -> u64 {
        u64::from(self.live)
    }

    fn free_bytes(&self) -> u64 {
        u64::from(self.free_size)
    }

    fn largest_free(&self) -> u64 {
        u64::from(self.contig_hint)
    }

    fn metadata_bytes(&self) -> u64 {
        (self.map.capacity() * 4) as u64
    }

    fn check(&self) -> Result<(), CheckError> {
        AreaChunk::check(self)
    }
}

impl AreaMapAllocator {
    /// An allocator with units of `unit_size` bytes.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] unless `unit_size` is a nonzero multiple of
    /// 4096 and at most [`crate::percpu::MAX_UNIT_SIZE`] (the same rule as
    /// the bitmap allocator, so both run the same configurations).
    ///
    /// # Complexity
    /// O(slots).
    pub fn new(unit_size: u64) -> Result<Self, AllocError> {
        check_unit_size(unit_size)?;
        Ok(AreaMapAllocator {
            unit_size,
            table: ChunkTable::new(free_slot(unit_size) + 1),
        })
    }

    /// The pre-4.14 `pcpu_chunk_slot`: by free bytes, not by the hint.
    fn slot_of_chunk(&self, c: &AreaChunk) -> usize {
        if u64::from(c.free_size) == self.unit_size {
            self.table.free_slot()
        } else if c.free_size < 4 || c.contig_hint < 4 {
            0
        } else {
            size_to_slot(u64::from(c.free_size))
        }
    }

    fn relocate(&mut self, id: u32) {
        let slot = self.slot_of_chunk(self.table.chunk(id));
        self.table.slots.relocate(id, slot);
    }

    fn alloc_from_slots(&mut self, size: u32, align: u32) -> Option<PcpuPtr> {
        for slot in size_to_slot(u64::from(size))..self.table.slots.len() {
            let mut id = self.table.slots.head(slot);
            while id != NIL {
                let next = self.table.slots.next(id);
                let c = self.table.chunk_mut(id);
                if size <= c.contig_hint {
                    let off = c.alloc_area(size, align);
                    self.relocate(id);
                    if let Some(offset) = off {
                        return Some(PcpuPtr { chunk: id, offset });
                    }
                }
                id = next;
            }
        }
        None
    }

    #[cold]
    fn create_chunk(&mut self) -> u32 {
        self.table.create(AreaChunk::new(self.unit_size as u32))
    }
}

impl PercpuAlloc for AreaMapAllocator {
    fn unit_size(&self) -> u64 {
        self.unit_size
    }

    /// # Complexity
    /// O(areas scanned) per chunk tried, plus a memmove of the map after the
    /// split; every chunk whose hint is large enough is tried.
    fn alloc(&mut self, size: u64, align: u64) -> Result<PcpuPtr, AllocError> {
        crate::debug_check!(self);
        let (bits, align_bits) = request_bits(size, align, self.unit_size)?;
        let (size, align) = (
            (bits as u64 * MIN_ALLOC_SIZE) as u32,
            (align_bits as u64 * MIN_ALLOC_SIZE) as u32,
        );
        if let Some(p) = self.alloc_from_slots(size, align) {
            return Ok(p);
        }
        let id = self.create_chunk();
        let c = self.table.chunk_mut(id);
        let offset = c
            .alloc_area(size, align)
            .expect("a free chunk fits any valid request");
        self.relocate(id);
        Ok(PcpuPtr { chunk: id, offset })
    }

    /// # Complexity
    /// O(log areas) to find the area, O(areas) for the merging memmove.
    fn free(&mut self, p: PcpuPtr) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        if !self.table.is_held(p.chunk) || u64::from(p.offset) >= self.unit_size {
            return Err(FreeError::Invalid);
        }
        let size = self.table.chunk_mut(p.chunk).free_area(p.offset)?;
        self.relocate(p.chunk);
        self.table.release_if_spare(p.chunk);
        Ok(u64::from(size))
    }

    /// # Complexity
    /// O(total areas).
    fn check(&self) -> Result<(), CheckError> {
        self.table.check_chunks(
            |id, c| {
                crate::ensure!(
                    u64::from(c.unit_size()) == self.unit_size,
                    Structure @ id,
                    "chunk {id}: wrong sentinel"
                );
                Ok(())
            },
            |c| self.slot_of_chunk(c),
            |_, _| false,
        )
    }

    /// # Complexity
    /// O(chunks + slots).
    fn stats(&self) -> PercpuStats {
        self.table.stats(self.unit_size)
    }
}
