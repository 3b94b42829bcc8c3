//! A [`VmapAllocator`] in fixed storage, built by a `const fn` before any
//! heap exists: [`VmapAllocator::new_fixed`].
//!
//! A kernel's first allocator manages the frames its heap is carved from,
//! so it cannot keep its own metadata on that heap. `VmapAllocator<Fixed<N>>`
//! keeps its free tree's nodes and its memory map's holes in arrays of `N`
//! entries inside itself (see [`crate::storage`]), so a `static` holds it
//! whole:
//!
//! - it keeps no busy index: frees carry their size
//!   ([`free_sized`](VmapAllocator::free_sized),
//!   [`free_range`](VmapAllocator::free_range)), as a boot-time frame list's
//!   do, and `free(addr)` is refused;
//! - freed blocks go straight into the tree (no isolated or pending block
//!   held aside), so an operation adds at most one block to it, and one
//!   refused for lack of room is refused before it changes anything
//!   ([`AllocError::StorageFull`] and its kin);
//! - lazy frees need a list on the heap: refused (`StorageFull`) until the
//!   heap is allowed;
//! - [`Policy::BestFit`] keeps a size index whose nodes come from the
//!   same arrays as the tree's, as many again: a best fit the arrays have
//!   no room for is refused (`StorageFull`).
//!
//! [`Policy::BestFit`]: crate::request::Policy::BestFit
//!
//! [`allow_heap`](VmapAllocator::allow_heap), once the kernel has a heap,
//! lets every array move to the heap when full and grow there.
//!
//! Room: with `N` of each, the tree holds at least `8 * (N - 1)` free
//! blocks in `N` leaves while it has at most two inner levels, and `N`
//! holes; a check before each operation keeps a leaf and an inner node per
//! level spare.

use super::busy::BusyIndex;
use super::memmap::Holes;
use super::VmapAllocator;
use crate::error::{AllocError, FreeError};
use crate::range::RangeAllocator;
use crate::storage::{Fixed, Storage, Store};
use crate::tree::btree::BTree;

impl<const N: usize> VmapAllocator<Fixed<N>> {
    /// An allocator in fixed storage (`N` tree nodes of each kind and `N`
    /// holes, inside the allocator) that manages nothing yet: `const`, and
    /// it touches no heap, so it can initialise a `static` and serve a
    /// kernel before its heap exists. Free space comes from
    /// [`add_free`](Self::add_free); frees carry their size (it keeps no
    /// busy index), and lazy frees wait for
    /// [`allow_heap`](Self::allow_heap). An operation that would need more
    /// room than the arrays have is refused with a `StorageFull` error and
    /// changes nothing (see [`crate::storage`]).
    ///
    /// # Examples
    /// ```
    /// use mmkit::lock::Guarded;
    /// use mmkit::storage::Fixed;
    /// use mmkit::vmap::VmapAllocator;
    ///
    /// static FRAMES: Guarded<spin::Mutex<()>, VmapAllocator<Fixed<16>>> =
    ///     Guarded::new(VmapAllocator::new_fixed());
    ///
    /// FRAMES.with(|f| f.add_free(0x10_0000, 0x800_0000)).unwrap();
    /// let heap = FRAMES.alloc(0x40_0000, 0x20_0000).unwrap();
    /// assert_eq!(heap, 0x20_0000);
    /// assert_eq!(FRAMES.with(|f| f.free_range(heap, 0x1000)), Ok(0x1000));
    /// ```
    pub const fn new_fixed() -> Self {
        let mut va = Self::from_parts(BTree::new_fixed(), Holes::new_fixed(), BusyIndex::empty());
        va.sized_only = true;
        va.indexed = false;
        va
    }
}

impl<S: Storage> VmapAllocator<S>
where
    Self: RangeAllocator,
{
    /// Lets an allocator in fixed storage move its metadata to the heap
    /// when an array is full, and take lazy frees (once the kernel has a
    /// heap). Nothing moves until it must. A no-op on the heap.
    ///
    /// # Examples
    /// ```
    /// use mmkit::storage::Fixed;
    /// use mmkit::vmap::VmapAllocator;
    /// use mmkit::AddFreeError;
    ///
    /// let mut va = VmapAllocator::<Fixed<2>>::new_fixed();
    /// va.add_free(0, 10).unwrap();
    /// // Two holes fit in the array; a third needs the heap.
    /// va.add_free(20, 30).unwrap();
    /// va.add_free(40, 50).unwrap();
    /// assert_eq!(va.add_free(60, 70), Err(AddFreeError::StorageFull));
    /// va.allow_heap();
    /// va.add_free(60, 70).unwrap();
    /// assert_eq!(va.managed().count(), 4);
    /// ```
    pub fn allow_heap(&mut self) {
        self.free.allow_heap();
        self.holes.allow_heap();
    }

    /// Whether fixed storage (not yet allowed the heap) has room for `n`
    /// more free blocks in the tree and `holes` more holes.
    #[inline]
    pub(super) fn has_room(&self, n: usize, holes: usize) -> bool {
        !S::FIXED || (self.free.has_room_for_blocks(n) && self.holes.has_room(holes))
    }

    /// Whether lazy frees may grow the lazy list, a heap `Vec`.
    pub(super) fn lazy_allowed(&self) -> bool {
        !S::FIXED || self.holes.heap_allowed()
    }

    /// [`has_room`](Self::has_room) for one block, as an allocation's
    /// error.
    #[inline]
    pub(super) fn alloc_room(&self) -> Result<(), AllocError> {
        match self.has_room(1, 0) {
            true => Ok(()),
            false => Err(AllocError::StorageFull),
        }
    }

    /// [`has_room`](Self::has_room) for one block, as a free's error.
    #[inline]
    pub(super) fn free_room(&self) -> Result<(), FreeError> {
        match self.has_room(1, 0) {
            true => Ok(()),
            false => Err(FreeError::StorageFull),
        }
    }
}

impl<S: Storage> Holes<S> {
    fn allow_heap(&mut self) {
        self.0.allow_heap();
    }

    fn has_room(&self, n: usize) -> bool {
        self.list().len() + n <= self.0.room()
    }

    fn heap_allowed(&self) -> bool {
        self.0.room() == usize::MAX
    }
}
