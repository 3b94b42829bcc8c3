//! Where an allocator keeps its metadata: on the heap ([`Heap`], the
//! default), or in arrays inside the allocator itself ([`Fixed`]), so that
//! it can be built by a `const fn` in a `static` and run before a kernel
//! has a heap.
//!
//! [`VmapAllocator`](crate::vmap::VmapAllocator) is generic over it:
//! `VmapAllocator` is `VmapAllocator<Heap>`, and
//! `VmapAllocator<Fixed<N>>` holds its free tree's nodes and the holes of
//! its memory map in arrays of `N` entries each:
//!
//! ```text
//!   VmapAllocator<Fixed<N>>
//!     leaves  [Leaf; N]   280 bytes each, 8 to 16 free blocks a leaf
//!     inners  [Inner; N]  600 bytes each, 8 to 16 children a node
//!     holes   [(u64, u64); N]
//!     each with a Vec beside it, empty until the heap is allowed
//! ```
//!
//! A fixed allocator uses no heap until
//! [`allow_heap`](crate::vmap::VmapAllocator::allow_heap) says it may:
//! an operation that would need more than the arrays hold is refused with
//! a typed `StorageFull` error and changes nothing. Once allowed, a full
//! array moves into a heap `Vec` and grows there as [`Heap`]'s do.
//!
//! The choice is a type parameter, so [`Heap`]'s code is the code of a
//! plain `Vec` (the store's methods are inlined to it): the fixed
//! storage's checks compile away there. The allocator's entry points are
//! written once per storage (non-generic on the heap, so this crate
//! compiles them as it did before there was a choice); code generic over
//! the storage names that with the bound
//! `VmapAllocator<S>: mmkit::vmap::PerStorage`, which both storages meet:
//!
//! ```
//! use mmkit::storage::{Fixed, Storage};
//! use mmkit::vmap::{PerStorage, VmapAllocator};
//!
//! fn first_page<S: Storage>(va: &mut VmapAllocator<S>) -> Option<u64>
//! where
//!     VmapAllocator<S>: PerStorage,
//! {
//!     va.add_free(0x1000, 0x10_0000).ok()?;
//!     va.alloc(0x1000, 0x1000).ok()
//! }
//! assert_eq!(first_page(&mut VmapAllocator::new_empty()), Some(0x1000));
//! assert_eq!(first_page(&mut VmapAllocator::<Fixed<4>>::new_fixed()), Some(0x1000));
//! ```

use alloc::vec::Vec;
use core::fmt::Debug;

mod sealed {
    pub trait Sealed {}
}

/// Where an allocator keeps its metadata: [`Heap`] or [`Fixed`].
/// Sealed: implemented only here.
pub trait Storage: sealed::Sealed + Debug + Clone + Send + 'static {
    /// The store of each kind of metadata.
    #[doc(hidden)]
    type Store<T: Copy + Debug + Send + 'static>: Store<T>;
    /// Whether the stores have a fixed capacity (until the heap is allowed).
    #[doc(hidden)]
    const FIXED: bool;
}

/// Metadata on the heap, in `Vec`s that grow as needed: the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Heap;

/// Metadata in arrays of `N` entries inside the allocator (see the
/// [module docs](self)); the heap only once allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fixed<const N: usize>;

impl sealed::Sealed for Heap {}
impl<const N: usize> sealed::Sealed for Fixed<N> {}

impl Storage for Heap {
    type Store<T: Copy + Debug + Send + 'static> = Vec<T>;
    const FIXED: bool = false;
}

impl<const N: usize> Storage for Fixed<N> {
    type Store<T: Copy + Debug + Send + 'static> = Inline<T, N>;
    const FIXED: bool = true;
}

/// A growable list of `T`: a `Vec`, or an [`Inline`] array.
#[doc(hidden)]
pub trait Store<T>: Debug + Clone + Send {
    /// The entries.
    fn as_slice(&self) -> &[T];
    /// The entries, to change.
    fn as_mut_slice(&mut self) -> &mut [T];
    /// Appends `x`; there must be room ([`room`](Self::room)).
    fn push(&mut self, x: T);
    /// Inserts `x` at `i`; there must be room.
    fn insert(&mut self, i: usize, x: T);
    /// Removes and returns entry `i`.
    fn remove(&mut self, i: usize) -> T;
    /// Keeps the entries `keep` says to.
    fn retain(&mut self, keep: impl FnMut(&T) -> bool);
    /// How many entries it can hold with no heap allocation it may not
    /// make (`usize::MAX` when the heap may grow it).
    fn room(&self) -> usize;
    /// Heap bytes held.
    fn heap_bytes(&self) -> usize;
    /// Makes room for `n` entries in all, where the heap may be used.
    fn reserve_total(&mut self, n: usize);
    /// Lets the store move to the heap when its array is full.
    fn allow_heap(&mut self);
}

impl<T: Copy + Debug + Send> Store<T> for Vec<T> {
    #[inline(always)]
    fn as_slice(&self) -> &[T] {
        self
    }

    #[inline(always)]
    fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }

    #[inline(always)]
    fn push(&mut self, x: T) {
        Vec::push(self, x);
    }

    #[inline]
    fn insert(&mut self, i: usize, x: T) {
        Vec::insert(self, i, x);
    }

    #[inline]
    fn remove(&mut self, i: usize) -> T {
        Vec::remove(self, i)
    }

    fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        Vec::retain(self, keep);
    }

    #[inline(always)]
    fn room(&self) -> usize {
        usize::MAX
    }

    fn heap_bytes(&self) -> usize {
        self.capacity() * core::mem::size_of::<T>()
    }

    fn reserve_total(&mut self, n: usize) {
        self.reserve(n.saturating_sub(self.len()));
    }

    fn allow_heap(&mut self) {}
}

/// Up to `N` entries in an array, then, once the heap is allowed, all of
/// them in a `Vec`.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Inline<T, const N: usize> {
    items: [T; N],
    len: usize,
    /// The entries once they have moved to the heap (`spilled`).
    heap: Vec<T>,
    spilled: bool,
    heap_ok: bool,
}

impl<T: Copy, const N: usize> Inline<T, N> {
    /// `len` entries of `fill` (the rest of the array holds it too).
    pub(crate) const fn filled(fill: T, len: usize) -> Self {
        Inline {
            items: [fill; N],
            len,
            heap: Vec::new(),
            spilled: false,
            heap_ok: false,
        }
    }

    /// Moves the entries to the heap, with room for as many again.
    #[cold]
    fn spill(&mut self) {
        let mut v = Vec::with_capacity(2 * N.max(1));
        v.extend_from_slice(&self.items[..self.len]);
        self.heap = v;
        self.spilled = true;
    }

    /// Makes room for one more entry: the caller checked
    /// [`room`](Store::room), so a full array may spill.
    #[inline]
    fn make_room(&mut self) {
        if !self.spilled && self.len == N {
            assert!(
                self.heap_ok,
                "fixed storage overrun: room() was not checked"
            );
            self.spill();
        }
    }
}

impl<T: Copy + Debug + Send, const N: usize> Store<T> for Inline<T, N> {
    #[inline]
    fn as_slice(&self) -> &[T] {
        if self.spilled {
            &self.heap
        } else {
            &self.items[..self.len]
        }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [T] {
        if self.spilled {
            &mut self.heap
        } else {
            &mut self.items[..self.len]
        }
    }

    fn push(&mut self, x: T) {
        let n = self.as_slice().len();
        self.insert(n, x);
    }

    fn insert(&mut self, i: usize, x: T) {
        self.make_room();
        if self.spilled {
            self.heap.insert(i, x);
        } else {
            self.items.copy_within(i..self.len, i + 1);
            self.items[i] = x;
            self.len += 1;
        }
    }

    fn remove(&mut self, i: usize) -> T {
        if self.spilled {
            return self.heap.remove(i);
        }
        let x = self.items[i];
        self.items.copy_within(i + 1..self.len, i);
        self.len -= 1;
        x
    }

    fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        if self.spilled {
            return self.heap.retain(keep);
        }
        let mut kept = 0;
        for i in 0..self.len {
            if keep(&self.items[i]) {
                self.items[kept] = self.items[i];
                kept += 1;
            }
        }
        self.len = kept;
    }

    #[inline]
    fn room(&self) -> usize {
        if self.heap_ok {
            usize::MAX
        } else {
            N
        }
    }

    fn heap_bytes(&self) -> usize {
        self.heap.capacity() * core::mem::size_of::<T>()
    }

    fn reserve_total(&mut self, n: usize) {
        if self.heap_ok && n > N {
            if !self.spilled {
                self.spill();
            }
            self.heap.reserve(n.saturating_sub(self.heap.len()));
        }
    }

    fn allow_heap(&mut self) {
        self.heap_ok = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_store_keeps_order_and_spills_only_when_allowed() {
        let mut s: Inline<u32, 3> = Inline::filled(0, 0);
        s.push(1);
        s.push(3);
        s.insert(1, 2);
        assert_eq!(s.as_slice(), [1, 2, 3]);
        assert_eq!((s.room(), s.heap_bytes()), (3, 0));
        assert_eq!(s.remove(0), 1);
        s.retain(|&x| x != 3);
        assert_eq!(s.as_slice(), [2]);
        s.push(4);
        s.push(5);
        s.allow_heap();
        assert_eq!(s.room(), usize::MAX);
        s.insert(0, 1);
        assert_eq!(s.as_slice(), [1, 2, 4, 5]);
        assert!(s.heap_bytes() > 0);
        s.as_mut_slice()[0] = 9;
        assert_eq!(s.remove(0), 9);
        assert_eq!(s.as_slice(), [2, 4, 5]);
    }

    #[test]
    #[should_panic(expected = "fixed storage overrun")]
    fn an_unchecked_push_past_the_array_is_a_bug_caught() {
        let mut s: Inline<u8, 1> = Inline::filled(0, 1);
        s.push(1);
    }
}
