//! [`LinuxFreeTree`] against a `BTreeMap` of free blocks: the same free
//! set after every operation, a valid red-black tree with exact maxima,
//! and Linux's answer: the lowest fit for an alignment up to a page, never
//! above the first block `size + align - 1` long that holds the request
//! for a larger one.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use proptest::prelude::*;

use super::*;

const PAGE: u64 = LINUX_PAGE_SIZE;
const SPACE: (u64, u64) = (0x40_0000, 0x40_0000 + 1024 * PAGE);

/// The free set as sorted, disjoint, non-adjacent blocks.
#[derive(Debug, Clone)]
struct Model(BTreeMap<u64, u64>);

impl Model {
    fn blocks(&self) -> Vec<core::ops::Range<u64>> {
        self.0.iter().map(|(&s, &e)| s..e).collect()
    }

    /// The aligned start of the request in `[s, e)` from `vstart`.
    fn fit(s: u64, e: u64, size: u64, align: u64, vstart: u64) -> Option<u64> {
        let a = s.max(vstart).checked_add(align - 1)? & !(align - 1);
        (a.checked_add(size)? <= e).then_some(a)
    }

    /// The lowest block holding the request from `vstart` whose length is
    /// at least `length`: its address.
    fn first(&self, size: u64, align: u64, vstart: u64, length: u64) -> Option<u64> {
        (self.0.iter())
            .filter(|(&s, &e)| e - s >= length)
            .find_map(|(&s, &e)| Self::fit(s, e, size, align, vstart))
    }

    fn take(&mut self, a: u64, size: u64) {
        let (&s, &e) = self.0.range(..=a).next_back().unwrap();
        assert!(a + size <= e);
        self.0.remove(&s);
        if s < a {
            self.0.insert(s, a);
        }
        if a + size < e {
            self.0.insert(a + size, e);
        }
    }

    fn give(&mut self, mut s: u64, mut e: u64) {
        if let Some((&ps, &pe)) = self.0.range(..s).next_back() {
            if pe == s {
                self.0.remove(&ps);
                s = ps;
            }
        }
        if let Some(ne) = self.0.remove(&e) {
            e = ne;
        }
        self.0.insert(s, e);
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Pages, alignment shift above a page, window start and length in pages.
    Alloc(u64, u32, u64, u64),
    /// Clip pages from a free block: which block, offset and length (by
    /// fraction of the block).
    Clip(usize, u64, u64),
    /// Free the n-th live area.
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..40, 0u32..10, 0u64..1024, 1u64..1025)
            .prop_map(|(p, sh, w, l)| Op::Alloc(p, sh, w, l)),
        2 => (any::<usize>(), 0u64..100, 1u64..100).prop_map(|(b, o, l)| Op::Clip(b, o, l)),
        4 => any::<usize>().prop_map(Op::Free),
    ]
}

fn same(t: &LinuxFreeTree, m: &Model) -> Result<(), TestCaseError> {
    t.check()
        .map_err(|e| TestCaseError::fail(alloc::format!("{e}")))?;
    prop_assert_eq!(t.blocks().collect::<Vec<_>>(), m.blocks());
    Ok(())
}

proptest! {
    #[test]
    fn tree_keeps_the_free_set_and_answers_as_linux(ops in proptest::collection::vec(op(), 1..200)) {
        let mut t = LinuxFreeTree::new(SPACE.0, SPACE.1).unwrap();
        let mut m = Model(BTreeMap::new());
        m.0.insert(SPACE.0, SPACE.1);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(pages, shift, w, l) => {
                    let (size, align) = (pages * PAGE, PAGE << shift);
                    let vstart = SPACE.0 + w * PAGE;
                    let vend = (vstart + l * PAGE).min(SPACE.1 + PAGE);
                    let got = t.find(size, align, vstart, vend);
                    let adjust = align > PAGE && vend - vstart != size;
                    let bound = m.first(size, align, vstart, if adjust { size + align - 1 } else { size });
                    if adjust {
                        // Any block on the path may answer, but the first
                        // long one is always reached.
                        if let Some(a) = got {
                            prop_assert!(bound.map_or(true, |b| a <= b), "{a:#x} above {bound:?}");
                            prop_assert!(m.0.range(..=a).next_back().is_some_and(|(_, &e)| a + size <= e));
                        }
                        prop_assert!(bound.map_or(true, |b| b + size > vend) || got.is_some());
                    } else {
                        prop_assert_eq!(got, bound.filter(|&b| b + size <= vend));
                    }
                    if let Some(a) = got {
                        prop_assert_eq!(t.alloc(size, align, vstart, vend), Some(a));
                        m.take(a, size);
                        live.push((a, a + size));
                    }
                }
                Op::Clip(b, o, l) => {
                    let blocks = m.blocks();
                    let r = &blocks[b % blocks.len().max(1)..][..blocks.len().min(1)];
                    if let Some(r) = r.first() {
                        let pages = (r.end - r.start) / PAGE;
                        let off = o * pages / 100;
                        let len = (l * pages / 100).clamp(1, pages - off);
                        let a = r.start + off * PAGE;
                        t.clip(a, len * PAGE).unwrap();
                        m.take(a, len * PAGE);
                        live.push((a, a + len * PAGE));
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let (s, e) = live.swap_remove(i % live.len());
                    t.free(s, e).unwrap();
                    m.give(s, e);
                }
                Op::Free(_) => {}
            }
            same(&t, &m)?;
        }
    }
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let mut t = LinuxFreeTree::new(0x1000, 0x10_0000).unwrap();
    let a = t.alloc(0x3000, 0x1000, 0x1000, 0x10_0000).unwrap();
    let before: Vec<_> = t.blocks().collect();
    assert_eq!(
        t.free(0x2000, 0x5000),
        Err(AddFreeError::Overlaps {
            start: 0x4000,
            end: 0x5000
        })
    );
    assert_eq!(t.free(9, 9), Err(AddFreeError::Empty { start: 9, end: 9 }));
    assert!(t.clip(a, 0x1000).is_err());
    assert!(t.clip(u64::MAX - 0x1000, 0x2000).is_err());
    assert!(t.clip(0x5000, 0).is_err());
    assert_eq!(t.find(0, 0x1000, 0x1000, 0x10_0000), None);
    assert_eq!(t.find(0x1000, 3, 0x1000, 0x10_0000), None);
    assert_eq!(t.find(u64::MAX, 0x2000, 0x1000, u64::MAX), None);
    assert_eq!(t.find(0x1000, 1 << 63, 0x1000, u64::MAX), None);
    assert_eq!(t.blocks().collect::<Vec<_>>(), before);
    assert!(LinuxFreeTree::new(5, 5).is_err());
    t.check().unwrap();
}

/// The same free set in two shapes: a short block at the root answers a
/// 2 MiB-aligned request below the first long block; under that long
/// block as its left leaf it is never visited.
#[test]
fn the_shape_decides_a_large_alignment() {
    let short = (0x40_0000, 0x40_9000); // 9 pages at 4 MiB
    let long = (0x100_0000, 0x200_0000); // 16 MiB at 16 MiB
    let (size, align, window) = (0x9000, 0x20_0000, (0x1000, 0x1_0000_0000));
    let mut root_short = LinuxFreeTree::new(short.0, short.1).unwrap();
    root_short.free(long.0, long.1).unwrap();
    let mut root_long = LinuxFreeTree::new(long.0, long.1).unwrap();
    root_long.free(short.0, short.1).unwrap();
    assert_eq!(
        root_short.blocks().collect::<Vec<_>>(),
        root_long.blocks().collect::<Vec<_>>()
    );
    assert_eq!(
        root_short.find(size, align, window.0, window.1),
        Some(short.0)
    );
    assert_eq!(
        root_long.find(size, align, window.0, window.1),
        Some(long.0)
    );
    // Up to a page of alignment both find the lowest fit.
    assert_eq!(
        root_long.find(size, 0x1000, window.0, window.1),
        Some(short.0)
    );
}

/// A no-edge fit keeps the node for the right part and links the left
/// part as its in-order predecessor, below it.
#[test]
fn a_no_edge_fit_links_the_left_part_below_its_node() {
    let mut t = LinuxFreeTree::new(0x1000, 0x10_0000).unwrap();
    t.clip(0x4000, 0x1000).unwrap();
    let root = &t.nodes[t.root as usize];
    assert_eq!((root.start, root.end), (0x5000, 0x10_0000));
    let left = &t.nodes[root.kids[L] as usize];
    assert_eq!((left.start, left.end, left.red), (0x1000, 0x4000, true));
    assert_eq!(root.max, 0x10_0000 - 0x5000);
    t.check().unwrap();
    // Freeing the hole merges all three: the left block survives.
    t.free(0x4000, 0x5000).unwrap();
    assert!(t.blocks().eq(core::iter::once(0x1000..0x10_0000)));
    t.check().unwrap();
}

/// An erased node with two children is replaced by its in-order
/// successor, which keeps the erased node's colour.
#[test]
fn an_erased_node_gives_its_place_to_its_successor() {
    let mut t = LinuxFreeTree::new(0x10_0000, 0x11_0000).unwrap();
    t.free(0x1_0000, 0x2_0000).unwrap();
    t.free(0x20_0000, 0x21_0000).unwrap();
    t.free(0x30_0000, 0x31_0000).unwrap();
    let root = t.root;
    assert_eq!(t.nodes[root as usize].start, 0x10_0000);
    t.clip(0x10_0000, 0x1_0000).unwrap(); // a full fit: the root goes
    let r = &t.nodes[t.root as usize];
    assert_eq!((r.start, r.red), (0x20_0000, false));
    assert_eq!(t.nodes[r.kids[L] as usize].start, 0x1_0000);
    assert_eq!(t.nodes[r.kids[R] as usize].start, 0x30_0000);
    t.check().unwrap();
}
