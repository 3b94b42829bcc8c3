//! Top-down search: the **highest** fit, for allocators that hand out
//! address space from the top of a window down (the `Highest` policy of
//! [`crate::vmap::VmapAllocator::allocate`], vm-allocator's
//! `AllocPolicy::LastMatch`, a top-down mmap layout).
//!
//! The mirror image of [`RangeTree::lowest_fit`]: the same `smax` and
//! alignment-summary pruning, visiting right subtrees first. Whether some
//! aligned `[a, a + size)` fits in a range does not depend on the direction
//! of the search, so the augmented values serve both.

use super::{AlignSummary, NodeArena, NodeId, Path, RangeTree, NIL};

/// A highest-fit request: `size` bytes aligned to `2^k` in `[lo, hi)`.
#[derive(Clone, Copy)]
struct Down {
    prune: bool,
    size: u64,
    align: u64,
    k: u32,
    lo: u64,
    hi: u64,
}

/// The highest `a` with `a % align == 0`, `lo <= a` and `a + size <= hi`.
/// Never overflows. `align` must be a power of two.
#[inline]
fn top_fit(lo: u64, hi: u64, size: u64, align: u64) -> Option<u64> {
    let a = hi.checked_sub(size)? & !(align - 1);
    (lo < hi && a >= lo).then_some(a)
}

impl RangeTree {
    /// The highest address `a` in `[lo, hi)` with `a % align == 0` such
    /// that `[a, a + size)` lies inside one range of the tree; returns that
    /// range's node and `a`. `align` must be a power of two, `size > 0`.
    ///
    /// # Complexity
    /// As [`lowest_fit`](Self::lowest_fit): O(log n) plus the near misses
    /// of alignments beyond the summaries' classes.
    pub fn highest_fit(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(NodeId, u64)> {
        self.highest_fit_at(ar, size, align, lo, hi, &mut Path::new())
    }

    /// [`highest_fit`](Self::highest_fit), also recording in `path` the
    /// ancestors of the node found, for [`set_range_at`](Self::set_range_at).
    pub fn highest_fit_at(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        path: &mut Path,
    ) -> Option<(NodeId, u64)> {
        path.len = 0;
        if lo >= hi || hi - lo < size {
            return None;
        }
        // The wilderness lies above every range of the AVL tree.
        if let Some(found) = self.fit_in_wild(ar, size, align, lo, hi, top_fit) {
            return Some(found);
        }
        if ar.smax(self.root) < size {
            return None;
        }
        let q = Down {
            prune: self.summaries,
            size,
            align,
            k: align.trailing_zeros(),
            lo,
            hi,
        };
        fit_down(ar, self.root, q, path)
    }

    /// The slow reference for [`highest_fit`](Self::highest_fit): the ranges
    /// in descending address order, the first that holds the request.
    /// O(n); the tests cross-check the two.
    pub fn highest_fit_linear(
        &self,
        ar: &NodeArena,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
    ) -> Option<(NodeId, u64)> {
        let ids: alloc::vec::Vec<NodeId> = self.iter(ar).collect();
        ids.into_iter().rev().find_map(|id| {
            let n = ar.get(id);
            top_fit(n.start.max(lo), n.end.min(hi), size, align).map(|a| (id, a))
        })
    }
}

fn usable(ar: &NodeArena, at: NodeId, k: u32) -> Option<u64> {
    let n = ar.get(at);
    let asum: AlignSummary = n.asum;
    asum.usable(n.smax(), k)
}

fn fit_down(ar: &NodeArena, at: NodeId, q: Down, path: &mut Path) -> Option<(NodeId, u64)> {
    debug_assert!(at != NIL);
    let n = ar.get(at);
    if q.prune && !matches!(usable(ar, at, q.k), Some(u) if u >= q.size) {
        return None;
    }
    // Right ranges start at or after n.end: useful only if one could end
    // by q.hi.
    if n.rmax >= q.size && n.end < q.hi && q.hi - n.end >= q.size {
        path.push(at);
        if let Some(r) = fit_down(ar, n.right, q, path) {
            return Some(r);
        }
        path.len -= 1;
    }
    // This and every range to the left end at or before n.end.
    if n.end <= q.lo || n.end - q.lo < q.size {
        return None;
    }
    if n.len() >= q.size {
        if let Some(a) = top_fit(n.start.max(q.lo), n.end.min(q.hi), q.size, q.align) {
            return Some((at, a));
        }
    }
    if n.lmax < q.size {
        return None;
    }
    path.push(at);
    let r = fit_down(ar, n.left, q, path);
    if r.is_none() {
        path.len -= 1;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use proptest::prelude::*;

    use crate::tree::layout;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The tree search returns what the linear scan returns, with and
        /// without summaries, and its path lets `set_range_at` cut the
        /// answer out with every invariant intact.
        #[test]
        fn highest_fit_matches_linear_scan(
            raw in proptest::collection::vec((1u64..64, 1u64..64), 0..40),
            shift in 0u32..4,
            queries in proptest::collection::vec(
                (1u64..200, 0u32..10, 0u64..3000, 1u64..3000, any::<bool>()), 1..20),
        ) {
            let ranges = layout(&raw, shift);
            let mut ar = NodeArena::new();
            let mut t = RangeTree::new();
            for &(s, e) in &ranges {
                let n = ar.alloc(s, e);
                t.insert(&mut ar, n);
            }
            for (size, k, lo, len, summaries) in queries {
                let (align, hi) = (1u64 << k, lo + len);
                if summaries {
                    t.enable_summaries(&mut ar, align);
                }
                let want = t.highest_fit_linear(&ar, size, align, lo, hi);
                let mut path = Path::new();
                let got = t.highest_fit_at(&ar, size, align, lo, hi, &mut path);
                prop_assert_eq!(got, want);
                if let Some((id, a)) = got {
                    let n = *ar.get(id);
                    prop_assert!(a >= lo && a + size <= hi && a % align == 0);
                    prop_assert!(n.start <= a && a + size <= n.end);
                    // Cut the tail [a, end) off through the recorded path.
                    if a > n.start {
                        t.set_range_at(&mut ar, path.nodes(), id, n.start, a);
                        t.check(&ar, 0, u64::MAX).map_err(|e| TestCaseError::fail(format!("{e}")))?;
                        t.set_range_at(&mut ar, path.nodes(), id, n.start, n.end);
                    }
                }
            }
            t.check(&ar, 0, u64::MAX).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        }
    }

    #[test]
    fn highest_fit_near_u64_max() {
        let mut ar = NodeArena::new();
        let mut t = RangeTree::new();
        let n = ar.alloc(u64::MAX - 100, u64::MAX);
        t.insert(&mut ar, n);
        let top = u64::MAX;
        assert_eq!(t.highest_fit(&ar, 10, 1, 0, top), Some((n, top - 10)));
        assert_eq!(
            t.highest_fit(&ar, 10, 16, 0, top).map(|r| r.1),
            Some((top - 10) & !15)
        );
        assert_eq!(t.highest_fit(&ar, 101, 1, 0, top), None);
        assert_eq!(t.highest_fit(&ar, 1, 1 << 63, 0, top), None);
    }
}
