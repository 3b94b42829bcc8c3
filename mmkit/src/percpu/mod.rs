//! The percpu allocator: a bitmap over each chunk with per-block hints
//! (seed 003, Linux 4.14+ `mm/percpu.c`).
//!
//! The kernel gives every CPU its own copy of a percpu variable. A *chunk*
//! is one *unit* of `unit_size` bytes per CPU; an allocation is an offset
//! that is valid in every unit at once, so the allocator only manages the
//! offsets of one unit. mmkit manages exactly that: integer offsets.
//!
//! ```text
//!              unit 0 (cpu 0)     unit 1 (cpu 1)     unit 2 (cpu 2)
//!  chunk 0   [..aaaa..bb.....]  [..aaaa..bb.....]  [..aaaa..bb.....]
//!  chunk 1   [c.......dddddd.]  [c.......dddddd.]  [c.......dddddd.]
//!               ^ PcpuPtr { chunk: 1, offset: 0 } names `c` in every unit
//! ```
//!
//! # The bitmap allocator
//! One bit of `alloc_map` stands for 4 bytes ([`MIN_ALLOC_SIZE`]); sizes are
//! rounded up to 4 and alignments raised to 4. A second bitmap, `bound_map`,
//! marks where allocations start and end, so a free needs no size. The map
//! is cut into metadata blocks of [`BLOCK_SIZE`] bytes (1024 bits), each with
//! a [`BlockMd`] of hints (longest free run, longest run before it, free runs
//! at both edges, first free bit), and the chunk keeps the same record over
//! all of it. Allocation picks a chunk and a block from the hints and scans
//! at most `size + 1 block` of bitmap; free clears bits and updates only the
//! hints the freed run touches. Neither moves memory, which is what made the
//! area map ([`crate::baseline::area_map`]) slow.
//!
//! # Which hints are exact
//! Block records are exact: `first_free`, `left_free`, `right_free` and
//! `contig_hint` always equal what the bitmap says; `scan_hint` is 0
//! ("unknown"), exactly the longest run before the contig hint, or a run as
//! long as the contig hint after it. Of equally long runs, each hint names
//! the one the kernel's `pcpu_block_update` would. The chunk
//! record is exact in `first_free`; its `contig_hint` is never larger than
//! the longest free run and never smaller than any block's, and may lag the
//! truth after a free that stays inside one block and touches a block edge
//! (the seed: "the chunk's contig hint [may be] smaller than what it could
//! allocate ... but never ... later than available"). Allocation keeps
//! hints right; a free that frees a whole block or spans blocks refreshes
//! the chunk record. [`PercpuAllocator::check`] verifies all of this.
//!
//! The chunk record's scan hint is kept but not searched from: a refresh
//! builds the record from block summaries, so it can name a shorter run
//! than one before it. The kernel starts its block walk past that hint and
//! can then pass over a fit; mmkit starts at the chunk's first free bit and
//! lets the exact block hints skip, so a request aligned to at most 4
//! bytes gets the lowest fit in the chunk the slots choose.
//!
//! # Chunk slots
//! Chunks sit in slots by their longest free run (`__pcpu_size_to_slot`):
//! slot 0 holds full chunks and chunks that just failed a fit, the last slot
//! holds wholly free ones. Allocation walks the slots from the one that fits
//! the request upward, creates a chunk when none serves it, and a chunk that
//! becomes free is released when another free chunk is already kept.

mod bitmap;
mod block_md;
mod chunk;
pub(crate) mod slots;
#[cfg(test)]
mod tests;

use alloc::vec::Vec;

pub use block_md::BlockMd;

use crate::error::{AllocError, CheckError, FreeError};
use chunk::Chunk;
use slots::{size_to_slot, ChunkTable, TableChunk, NIL};

/// Bytes per bitmap bit (`PCPU_MIN_ALLOC_SIZE`): the allocation granule.
pub const MIN_ALLOC_SIZE: u64 = 4;
/// Bytes per metadata block (`PCPU_BITMAP_BLOCK_SIZE`, one page).
pub const BLOCK_SIZE: u64 = 4096;
/// Bits per metadata block.
pub const BLOCK_BITS: u32 = (BLOCK_SIZE / MIN_ALLOC_SIZE) as u32;
/// Largest alignment a request may ask for (one page, as in the kernel).
pub const MAX_ALIGN: u64 = 4096;
/// Largest unit size accepted (offsets and bit counts stay in `u32`).
pub const MAX_UNIT_SIZE: u64 = 1 << 30;
/// Chunks in slots below this move to slot 0 when a fit fails in them
/// (`PCPU_SLOT_FAIL_THRESHOLD`), so a chunk whose hint is the right size
/// but the wrong alignment is not scanned again and again.
pub const SLOT_FAIL_THRESHOLD: usize = 3;

/// A percpu allocation: the chunk and the offset inside each of its units.
///
/// # Examples
/// ```
/// use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator};
/// let mut a = PercpuAllocator::new(64 << 10).unwrap();
/// let p: PcpuPtr = a.alloc(8, 8).unwrap();
/// assert_eq!(p, PcpuPtr { chunk: 0, offset: 0 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PcpuPtr {
    /// Chunk id (ids of released chunks are reused).
    pub chunk: u32,
    /// Byte offset inside the chunk's unit.
    pub offset: u32,
}

/// Counters and sizes reported by [`PercpuAlloc::stats`].
///
/// # Examples
/// ```
/// use mmkit::percpu::{PercpuAlloc, PercpuAllocator};
/// let mut a = PercpuAllocator::new(32 << 10).unwrap();
/// a.alloc(10, 4).unwrap();
/// let s = a.stats();
/// assert_eq!((s.chunks, s.used_bytes, s.free_bytes), (1, 12, (32 << 10) - 12));
/// ```
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PercpuStats {
    /// Bytes per unit.
    pub unit_size: u64,
    /// Chunks held (including the one free chunk kept).
    pub chunks: u64,
    /// Chunks with nothing allocated.
    pub empty_chunks: u64,
    /// Live allocations.
    pub live: u64,
    /// Bytes allocated per unit (sizes rounded up to 4).
    pub used_bytes: u64,
    /// Bytes free per unit, over all chunks.
    pub free_bytes: u64,
    /// Longest free run of any chunk as its hints know it (the bitmap
    /// allocator's may lag the truth by less than a block; the area map's
    /// may exceed it until the next full scan).
    pub largest_free: u64,
    /// Chunks in each slot, slot 0 first, the free slot last.
    pub slot_counts: Vec<u64>,
    /// Heap bytes of metadata (maps, blocks).
    pub metadata_bytes: u64,
}

/// The contract both percpu allocators keep (the bitmap allocator and the
/// area-map baseline), so tests and experiments run on either.
///
/// Bad input gets a typed error and changes nothing.
///
/// # Examples
/// ```
/// use mmkit::baseline::area_map::AreaMapAllocator;
/// use mmkit::percpu::{PercpuAlloc, PercpuAllocator};
///
/// fn churn(a: &mut impl PercpuAlloc) -> u64 {
///     let ptrs: Vec<_> = (0..100).map(|_| a.alloc(4, 4).unwrap()).collect();
///     ptrs.into_iter().map(|p| a.free(p).unwrap()).sum()
/// }
/// assert_eq!(churn(&mut PercpuAllocator::new(8192).unwrap()), 400);
/// assert_eq!(churn(&mut AreaMapAllocator::new(8192).unwrap()), 400);
/// ```
pub trait PercpuAlloc {
    /// Bytes per unit: the largest allocation.
    fn unit_size(&self) -> u64;

    /// Allocates `size` bytes aligned to `align` in some chunk, creating a
    /// chunk when none can serve it.
    ///
    /// # Errors
    /// [`AllocError::Invalid`] when `size` is 0 or above the unit size, or
    /// `align` is not a power of two or above [`MAX_ALIGN`].
    fn alloc(&mut self, size: u64, align: u64) -> Result<PcpuPtr, AllocError>;

    /// Frees the allocation starting at `p` and returns the bytes it held
    /// (its size rounded up to 4).
    ///
    /// # Errors
    /// [`FreeError::Invalid`] for a chunk id that is not held or an offset
    /// outside the unit; [`FreeError::NotAllocated`] when `p` does not start
    /// a live allocation (a double free, an interior offset).
    fn free(&mut self, p: PcpuPtr) -> Result<u64, FreeError>;

    /// Verifies every invariant of the allocator.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first invariant found broken (a bug).
    fn check(&self) -> Result<(), CheckError>;

    /// Counters and sizes.
    fn stats(&self) -> PercpuStats;
}

/// Validates a request and converts it to (bits, bit alignment).
pub(crate) fn request_bits(
    size: u64,
    align: u64,
    unit_size: u64,
) -> Result<(usize, usize), AllocError> {
    if size == 0 || size > unit_size || !align.is_power_of_two() || align > MAX_ALIGN {
        return Err(AllocError::Invalid);
    }
    let bits = size.div_ceil(MIN_ALLOC_SIZE);
    let align_bits = (align / MIN_ALLOC_SIZE).max(1);
    Ok((bits as usize, align_bits as usize))
}

/// Validates a unit size: a multiple of [`BLOCK_SIZE`], at most
/// [`MAX_UNIT_SIZE`].
pub(crate) fn check_unit_size(unit_size: u64) -> Result<(), AllocError> {
    if unit_size == 0 || unit_size % BLOCK_SIZE != 0 || unit_size > MAX_UNIT_SIZE {
        return Err(AllocError::Invalid);
    }
    Ok(())
}

/// The slot index of wholly free chunks for a unit size (size slots come
/// before it).
pub(crate) fn free_slot(unit_size: u64) -> usize {
    size_to_slot(unit_size) + 1
}

/// The bitmap percpu allocator with block hints (seed 003).
///
/// # Invariants
/// - Every held chunk is listed in exactly one slot: the slot of its chunk
///   hints (`pcpu_chunk_slot`), or slot 0 when its slot is below
///   [`SLOT_FAIL_THRESHOLD`] and a fit failed in it.
/// - At most one chunk is wholly free.
/// - Each chunk keeps the invariants in the module docs.
///
/// # Examples
/// ```
/// use mmkit::percpu::{PercpuAlloc, PercpuAllocator};
/// let mut a = PercpuAllocator::new(32 << 10).unwrap();
/// let x = a.alloc(4, 4).unwrap();
/// let y = a.alloc(64, 64).unwrap();
/// assert_eq!(y.offset % 64, 0);
/// assert_eq!(a.free(x), Ok(4));
/// assert!(a.free(x).is_err()); // double free: refused, nothing changes
/// a.check().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct PercpuAllocator {
    unit_size: u64,
    table: ChunkTable<Chunk>,
}

impl TableChunk for Chunk {
    fn is_empty(&self) -> bool {
        Chunk::is_empty(self)
    }

    fn live(&self) -> u64 {
        u64::from(self.live)
    }

    fn free_bytes(&self) -> u64 {
        u64::from(self.free_bits) * MIN_ALLOC_SIZE
    }

    fn largest_free(&self) -> u64 {
        u64::from(self.md.contig_hint) * MIN_ALLOC_SIZE
    }

    fn metadata_bytes(&self) -> u64 {
        Chunk::metadata_bytes(self)
    }

    fn check(&self) -> Result<(), CheckError> {
        Chunk::check(self)
    }
}

impl PercpuAllocator {
    /// An allocator whose chunks have units of `unit_size` bytes (no chunk
    /// is created before the first allocation).
    ///
    /// # Errors
    /// [`AllocError::Invalid`] unless `unit_size` is a nonzero multiple of
    /// [`BLOCK_SIZE`] and at most [`MAX_UNIT_SIZE`].
    ///
    /// # Complexity
    /// O(slots).
    pub fn new(unit_size: u64) -> Result<Self, AllocError> {
        check_unit_size(unit_size)?;
        Ok(PercpuAllocator {
            unit_size,
            table: ChunkTable::new(free_slot(unit_size) + 1),
        })
    }

    /// `pcpu_chunk_slot`: where a chunk belongs by its hints.
    fn slot_of_chunk(&self, c: &Chunk) -> usize {
        if c.is_empty() {
            self.table.free_slot()
        } else if c.md.contig_hint == 0 {
            0
        } else {
            size_to_slot(u64::from(c.md.contig_hint) * MIN_ALLOC_SIZE)
        }
    }

    fn relocate(&mut self, id: u32) {
        let slot = self.slot_of_chunk(self.table.chunk(id));
        self.table.slots.relocate(id, slot);
    }

    /// Tries every chunk from the request's slot upward (`pcpu_alloc`).
    fn alloc_from_slots(&mut self, bits: usize, align: usize) -> Option<PcpuPtr> {
        let first = size_to_slot(bits as u64 * MIN_ALLOC_SIZE);
        for slot in first..self.table.slots.len() {
            let mut id = self.table.slots.head(slot);
            while id != NIL {
                let next = self.table.slots.next(id);
                let c = self.table.chunk_mut(id);
                let found = c
                    .find_block_fit(bits, align)
                    .and_then(|start| c.alloc_area(bits, align, start));
                match found {
                    Some(off) => {
                        self.relocate(id);
                        let offset = (off as u64 * MIN_ALLOC_SIZE) as u32;
                        return Some(PcpuPtr { chunk: id, offset });
                    }
                    None if slot < SLOT_FAIL_THRESHOLD => self.table.slots.relocate(id, 0),
                    None => {}
                }
                id = next;
            }
        }
        None
    }

    /// Creates a chunk, reusing a released id, and lists it as free.
    #[cold]
    fn create_chunk(&mut self) -> u32 {
        let c = Chunk::new((self.unit_size / MIN_ALLOC_SIZE) as u32);
        self.table.create(c)
    }
}

impl PercpuAlloc for PercpuAllocator {
    fn unit_size(&self) -> u64 {
        self.unit_size
    }

    /// # Complexity
    /// Per chunk tried: O(1) to reject by hints, else O(blocks) to find
    /// the block and O((size + 4 KiB) / 256 B) words to scan; chunks that
    /// fail in low slots move to slot 0 and are not tried again.
    fn alloc(&mut self, size: u64, align: u64) -> Result<PcpuPtr, AllocError> {
        crate::debug_check!(self);
        let (bits, align) = request_bits(size, align, self.unit_size)?;
        if let Some(p) = self.alloc_from_slots(bits, align) {
            return Ok(p);
        }
        let id = self.create_chunk();
        let c = self.table.chunk_mut(id);
        let start = c
            .find_block_fit(bits, align)
            .expect("a free chunk fits any valid request");
        let off = c
            .alloc_area(bits, align, start)
            .expect("a free chunk fits any valid request");
        self.relocate(id);
        Ok(PcpuPtr {
            chunk: id,
            offset: (off as u64 * MIN_ALLOC_SIZE) as u32,
        })
    }

    /// # Complexity
    /// O(size / 256 B + 16) words, plus a chunk refresh (O(blocks)) when
    /// the freed run spans blocks or frees a whole block.
    fn free(&mut self, p: PcpuPtr) -> Result<u64, FreeError> {
        crate::debug_check!(self);
        let off = u64::from(p.offset);
        if !self.table.is_held(p.chunk) || off >= self.unit_size {
            return Err(FreeError::Invalid);
        }
        if off % MIN_ALLOC_SIZE != 0 {
            return Err(FreeError::NotAllocated);
        }
        let c = self.table.chunk_mut(p.chunk);
        let bits = c.free_area((off / MIN_ALLOC_SIZE) as usize)?;
        self.relocate(p.chunk);
        self.table.release_if_spare(p.chunk);
        Ok(bits as u64 * MIN_ALLOC_SIZE)
    }

    /// # Complexity
    /// O(chunks * unit_size / 4) bits: recomputes every hint.
    fn check(&self) -> Result<(), CheckError> {
        // A chunk whose allocation failed in a low slot sits in slot 0.
        self.table.check_chunks(
            |_, _| Ok(()),
            |c| self.slot_of_chunk(c),
            |at, want| at == 0 && want < SLOT_FAIL_THRESHOLD,
        )
    }

    /// # Complexity
    /// O(chunks + slots).
    fn stats(&self) -> PercpuStats {
        self.table.stats(self.unit_size)
    }
}
