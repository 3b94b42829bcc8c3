//! The live areas of a layer by start address: an open-addressing hash
//! table (linear probing; a removal shifts the entries after it back, so
//! no tombstones pile up). The calls' own lookups (`vfree`'s, `vrealloc`'s)
//! are by exact start and cost the same at 16 or 16,000 live areas, where
//! an ordered map walks four or five levels of nodes. Queries by order
//! (the area at or before an address, every area by address) scan the
//! table: fault reports, errors and checks ask them, and a check that asks
//! many sorts once ([`AreaBook::sorted`]).

use alloc::vec::Vec;

/// Slots of the first table.
const MIN_SLOTS: usize = 16;

/// Areas by start address.
///
/// ```
/// use mmkit_vmalloc::book::AreaBook;
/// let mut b = AreaBook::new();
/// assert_eq!(b.insert(0x3000, "c"), None);
/// assert_eq!(b.insert(0x1000, "a"), None);
/// assert_eq!(b.get(0x1000), Some(&"a"));
/// assert_eq!(b.at_or_before(0x2fff), Some((0x1000, &"a")));
/// assert_eq!(b.remove(0x1000), Some("a"));
/// assert_eq!(b.sorted(), vec![(0x3000, &"c")]);
/// ```
#[derive(Debug, Clone)]
pub struct AreaBook<A> {
    /// A power of two of slots (or none), at most 7/8 full.
    slots: Vec<Option<(u64, A)>>,
    len: usize,
}

impl<A> Default for AreaBook<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A> AreaBook<A> {
    /// An empty book (no table until the first insert).
    pub const fn new() -> Self {
        AreaBook {
            slots: Vec::new(),
            len: 0,
        }
    }

    /// Areas held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot an address hashes to: the page number times a large odd
    /// constant, its top bits (areas are page-aligned, often a few pages
    /// apart: the multiply spreads neighbours over the table).
    fn home(&self, va: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        let h = (va >> 12 ^ va << 52).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - bits)) as usize
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `va` (`Ok`), or the empty slot that ends its
    /// probe run (`Err`: where an insert puts it, the table having no
    /// tombstones); `None` before the first table.
    fn probe(&self, va: u64) -> Option<Result<usize, usize>> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(va);
        loop {
            match &self.slots[i] {
                None => return Some(Err(i)),
                Some((k, _)) if *k == va => return Some(Ok(i)),
                Some(_) => i = (i + 1) & self.mask(),
            }
        }
    }

    /// The slot holding `va`.
    fn find(&self, va: u64) -> Option<usize> {
        self.probe(va)?.ok()
    }

    /// The area starting at `va`.
    ///
    /// # Complexity
    /// O(1) expected.
    pub fn get(&self, va: u64) -> Option<&A> {
        let i = self.find(va)?;
        self.slots[i].as_ref().map(|(_, a)| a)
    }

    /// The area starting at `va`, to change.
    pub fn get_mut(&mut self, va: u64) -> Option<&mut A> {
        let i = self.find(va)?;
        self.slots[i].as_mut().map(|(_, a)| a)
    }

    /// Whether an area starts at `va`.
    pub fn contains(&self, va: u64) -> bool {
        self.find(va).is_some()
    }

    /// Files `a` at `va`; returns the area it replaced.
    ///
    /// # Complexity
    /// O(1) expected, amortized (the table doubles when 7/8 full).
    pub fn insert(&mut self, va: u64, a: A) -> Option<A> {
        let empty = match self.probe(va) {
            Some(Ok(i)) => return self.slots[i].replace((va, a)).map(|(_, old)| old),
            Some(Err(i)) => Some(i),
            None => None,
        };
        match empty {
            // One probe run: the empty slot it ended at is where `va` goes.
            Some(i) if (self.len + 1) * 8 <= self.slots.len() * 7 => self.slots[i] = Some((va, a)),
            _ => {
                self.resize((self.slots.len() * 2).max(MIN_SLOTS));
                self.place(va, a);
            }
        }
        self.len += 1;
        None
    }

    /// Puts `(va, a)` in the first empty slot from its home (`va` absent,
    /// a slot free).
    fn place(&mut self, va: u64, a: A) {
        let mut i = self.home(va);
        while self.slots[i].is_some() {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = Some((va, a));
    }

    /// Takes the area at `va` out.
    ///
    /// # Complexity
    /// O(1) expected. The table keeps its size (a workload that peaked at
    /// n areas will peak again: it would grow back, slot by slot).
    pub fn remove(&mut self, va: u64) -> Option<A> {
        let i = self.find(va)?;
        self.remove_at(i)
    }

    /// Takes the area at `va` out if `test` passes it, with one lookup:
    /// `None` when no area starts at `va`, `Some(Err)` with what `test`
    /// said when it refused (nothing changes), `Some(Ok)` with the area.
    ///
    /// ```
    /// use mmkit_vmalloc::book::AreaBook;
    /// let mut b = AreaBook::new();
    /// b.insert(0x1000, 7);
    /// let odd = |a: &i32| if a % 2 == 1 { Ok(()) } else { Err(*a) };
    /// assert_eq!(b.remove_where(0x2000, odd), None);
    /// b.insert(0x2000, 8);
    /// assert_eq!(b.remove_where(0x2000, odd), Some(Err(8)));
    /// assert_eq!(b.remove_where(0x1000, odd), Some(Ok(7)));
    /// assert_eq!(b.len(), 1);
    /// ```
    ///
    /// # Complexity
    /// O(1) expected, as [`remove`](Self::remove).
    pub fn remove_where<E>(
        &mut self,
        va: u64,
        test: impl FnOnce(&A) -> Result<(), E>,
    ) -> Option<Result<A, E>> {
        let i = self.find(va)?;
        let (_, a) = self.slots[i].as_ref()?;
        if let Err(e) = test(a) {
            return Some(Err(e));
        }
        self.remove_at(i).map(Ok)
    }

    /// Empties slot `hole` (holding an entry) and closes the gap.
    fn remove_at(&mut self, mut hole: usize) -> Option<A> {
        let (_, a) = self.slots[hole].take()?;
        self.len -= 1;
        // Shift back every entry of the run after the hole that may move
        // there: one whose home is not between the hole and itself.
        let mut j = (hole + 1) & self.mask();
        while let Some((k, _)) = &self.slots[j] {
            let home = self.home(*k);
            if (j.wrapping_sub(home) & self.mask()) >= (j.wrapping_sub(hole) & self.mask()) {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
            j = (j + 1) & self.mask();
        }
        Some(a)
    }

    /// Rehashes into `slots` slots (a power of two above `len`).
    fn resize(&mut self, slots: usize) {
        let old = core::mem::take(&mut self.slots);
        self.slots.resize_with(slots, || None);
        for (va, a) in old.into_iter().flatten() {
            self.place(va, a);
        }
    }

    /// Every area, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &A)> {
        self.slots.iter().flatten().map(|(va, a)| (*va, a))
    }

    /// Every area, by address.
    ///
    /// # Complexity
    /// O(n log n).
    pub fn sorted(&self) -> Vec<(u64, &A)> {
        let mut v: Vec<(u64, &A)> = self.iter().collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// The area with the highest start at or below `va`.
    ///
    /// # Complexity
    /// O(n): a scan of the table (fault reports and errors ask it).
    pub fn at_or_before(&self, va: u64) -> Option<(u64, &A)> {
        self.iter().filter(|e| e.0 <= va).max_by_key(|e| e.0)
    }
}

/// In a list by address (from [`AreaBook::sorted`]), the area with the
/// highest start at or below `va`, in O(log n).
pub fn sorted_at_or_before<'a, A>(sorted: &[(u64, &'a A)], va: u64) -> Option<(u64, &'a A)> {
    let n = sorted.partition_point(|e| e.0 <= va);
    n.checked_sub(1).map(|i| sorted[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        RemoveOdd(u64),
        Before(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct pages, many collisions; the top of the space too.
        let va = prop_oneof![
            (0u64..64).prop_map(|p| p << 12),
            (0u64..4).prop_map(|p| u64::MAX - (p << 12)),
        ];
        prop_oneof![
            (va.clone(), any::<u32>()).prop_map(|(v, x)| Op::Insert(v, x)),
            va.clone().prop_map(Op::Remove),
            va.clone().prop_map(Op::RemoveOdd),
            va.prop_map(Op::Before),
        ]
    }

    proptest! {
        /// The book answers as an ordered map does, after any sequence
        /// of inserts and removes (growing and shrinking the table).
        #[test]
        fn the_book_is_an_ordered_map(ops in proptest::collection::vec(op(), 0..400)) {
            let mut b = AreaBook::new();
            let mut m = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(v, x) => prop_assert_eq!(b.insert(v, x), m.insert(v, x)),
                    Op::Remove(v) => prop_assert_eq!(b.remove(v), m.remove(&v)),
                    Op::RemoveOdd(v) => {
                        let odd = |x: &u32| if x % 2 == 1 { Ok(()) } else { Err(*x) };
                        let want = match m.get(&v).copied() {
                            None => None,
                            Some(x) if x % 2 == 1 => m.remove(&v).map(Ok),
                            Some(x) => Some(Err(x)),
                        };
                        prop_assert_eq!(b.remove_where(v, odd), want);
                    }
                    Op::Before(v) => {
                        let want = m.range(..=v).next_back().map(|(&k, x)| (k, x));
                        prop_assert_eq!(b.at_or_before(v), want);
                        prop_assert_eq!(sorted_at_or_before(&b.sorted(), v), want);
                    }
                }
                prop_assert_eq!(b.len(), m.len());
                let all: Vec<(u64, &u32)> = m.iter().map(|(&k, x)| (k, x)).collect();
                prop_assert_eq!(b.sorted(), all);
                for (&k, x) in &m {
                    prop_assert_eq!(b.get(k), Some(x));
                }
            }
        }
    }

    #[test]
    fn it_grows_and_keeps_its_size_with_every_entry_found() {
        let mut b = AreaBook::new();
        for p in 0..10_000u64 {
            assert_eq!(b.insert(p << 13, p), None);
        }
        assert!(b.slots.len() >= 10_000 * 8 / 7);
        for p in (0..10_000u64).step_by(2) {
            assert_eq!(b.remove(p << 13), Some(p));
        }
        for p in 0..10_000u64 {
            assert_eq!(b.get(p << 13), (p % 2 == 1).then_some(&p));
        }
        for p in (1..10_000u64).step_by(2) {
            assert_eq!(b.remove(p << 13), Some(p));
        }
        assert!(b.is_empty());
        assert_eq!(b.slots.len(), 16_384, "the table keeps its size");
        assert_eq!(b.get_mut(0), None);
    }
}
