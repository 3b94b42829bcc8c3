//! Intrusive doubly-linked lists of frames, indexed by frame number.
//!
//! The kernel threads its free lists through `struct page` (`page->lru`), so
//! removing a block found by pfn (a buddy about to merge) is O(1). Here the
//! links live in two vectors indexed by the frame's index in the zone, and a
//! list is just its head, tail and length:
//!
//! ```text
//!   List { head: 7, tail: 2, len: 3 }
//!
//!   index:   0    1    2    3    4    5    6    7
//!   next:    .    .   NIL   .    2    .    .    4
//!   prev:    .    .    4    .    7    .    .   NIL
//!
//!   head -> 7 <-> 4 <-> 2 <- tail
//! ```
//!
//! Invariants (checked by `BuddyAllocator::check` through [`Links::walk`]):
//! `prev[next[i]] == i` along a list, `head` has `prev == NIL`, `tail` has
//! `next == NIL`, and walking from `head` meets exactly `len` frames. A frame
//! is on at most one list at a time; its links are meaningless otherwise.

use crate::error::{try_vec, AllocError};

/// "No frame": the end of a list.
pub(crate) const NIL: u32 = u32::MAX;

/// One list: its first and last frame and how many frames it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) len: u64,
}

impl List {
    /// An empty list.
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        len: 0,
    };

    /// Whether the list holds no frame.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

/// The `next`/`prev` links of every frame of a zone.
#[derive(Debug, Clone)]
pub(crate) struct Links {
    next: alloc::vec::Vec<u32>,
    prev: alloc::vec::Vec<u32>,
}

impl Links {
    /// Links for `n` frames, all off-list; `NoSpace` when the heap refuses
    /// them.
    pub(crate) fn new(n: usize) -> Result<Self, AllocError> {
        Ok(Links {
            next: try_vec(n, NIL)?,
            prev: try_vec(n, NIL)?,
        })
    }

    /// Puts frame `i` first on `list`. O(1).
    #[inline]
    pub(crate) fn push_head(&mut self, list: &mut List, i: u32) {
        self.prev[i as usize] = NIL;
        self.next[i as usize] = list.head;
        if list.head == NIL {
            list.tail = i;
        } else {
            self.prev[list.head as usize] = i;
        }
        list.head = i;
        list.len += 1;
    }

    /// Puts frame `i` last on `list`. O(1).
    #[inline]
    pub(crate) fn push_tail(&mut self, list: &mut List, i: u32) {
        self.next[i as usize] = NIL;
        self.prev[i as usize] = list.tail;
        if list.tail == NIL {
            list.head = i;
        } else {
            self.next[list.tail as usize] = i;
        }
        list.tail = i;
        list.len += 1;
    }

    /// Unlinks frame `i`, which must be on `list`. O(1).
    #[inline]
    pub(crate) fn remove(&mut self, list: &mut List, i: u32) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        if p == NIL {
            list.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            list.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        list.len -= 1;
    }

    /// Removes and returns the first frame of `list`. O(1).
    #[inline]
    pub(crate) fn pop_head(&mut self, list: &mut List) -> Option<u32> {
        let i = list.head;
        if i == NIL {
            return None;
        }
        // The head's prev is NIL by invariant: no need to read it.
        let n = self.next[i as usize];
        list.head = n;
        if n == NIL {
            list.tail = NIL;
        } else {
            self.prev[n as usize] = NIL;
        }
        list.len -= 1;
        Some(i)
    }

    /// The frame after `i` on its list, if any.
    pub(crate) fn next(&self, i: u32) -> Option<u32> {
        let n = self.next[i as usize];
        (n != NIL).then_some(n)
    }

    /// Walks `list` from the head, checking the back links, and calls `f` on
    /// every frame. Stops with an error message after `len + 1` frames (a
    /// cycle) or at a broken back link.
    pub(crate) fn walk(
        &self,
        list: &List,
        mut f: impl FnMut(u32) -> Result<(), alloc::string::String>,
    ) -> Result<(), alloc::string::String> {
        let mut prev = NIL;
        let mut cur = list.head;
        let mut seen = 0u64;
        while cur != NIL {
            if seen > list.len {
                return Err(alloc::format!("list longer than its len {}", list.len));
            }
            if self.prev[cur as usize] != prev {
                return Err(alloc::format!("frame index {cur}: broken prev link"));
            }
            f(cur)?;
            seen += 1;
            prev = cur;
            cur = self.next[cur as usize];
        }
        if list.tail != prev {
            return Err(alloc::format!(
                "tail {} is not the last frame {prev}",
                list.tail
            ));
        }
        if seen != list.len {
            return Err(alloc::format!(
                "walked {seen} frames, len says {}",
                list.len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn collect(l: &Links, list: &List) -> Vec<u32> {
        let mut v = Vec::new();
        l.walk(list, |i| {
            v.push(i);
            Ok(())
        })
        .unwrap();
        v
    }

    #[test]
    fn push_remove_pop_keep_order_and_links() {
        let mut links = Links::new(8).unwrap();
        let mut list = List::EMPTY;
        links.push_head(&mut list, 3);
        links.push_tail(&mut list, 5);
        links.push_head(&mut list, 1);
        links.push_tail(&mut list, 7);
        assert_eq!(collect(&links, &list), [1, 3, 5, 7]);
        links.remove(&mut list, 5);
        assert_eq!(collect(&links, &list), [1, 3, 7]);
        links.remove(&mut list, 1);
        links.remove(&mut list, 7);
        assert_eq!(collect(&links, &list), [3]);
        assert_eq!(links.pop_head(&mut list), Some(3));
        assert!(list.is_empty());
        assert_eq!(list, List::EMPTY);
        assert_eq!(links.pop_head(&mut list), None);
    }
}
