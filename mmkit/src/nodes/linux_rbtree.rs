//! [`LinuxFreeTree`]: Linux 6.12's free vmap tree in the shape Linux gives
//! it, so that its search takes the block Linux takes.
//!
//! ```text
//!                 [a, b) max=M          one node a free block, keyed by start;
//!                /            \         max: the largest block of its subtree
//!      [c, d) max=..      [e, f) max=..  red-black as lib/rbtree.c balances it
//! ```
//!
//! `find_vmap_lowest_match` (mm/vmalloc.c) descends this tree and returns
//! the first block on its path that holds the request. For an alignment up
//! to a page that is the lowest fit. For a larger one it only enters
//! subtrees whose largest block is at least `size + align - 1` long, yet
//! it still tests every block on its path, short ones included: which
//! short block lies on the path depends on the tree's shape, and that
//! shape depends on every insert, erase and rotation before. So this tree
//! does what Linux's does, case for case:
//! - insert: link as a leaf where the descent from the root (or from a
//!   hint node) ends, then lib/rbtree.c's insert rebalancing;
//! - erase: a node with two children is replaced by its in-order
//!   successor, then lib/rbtree.c's erase rebalancing;
//! - an allocation clips its block as `va_clip` does (full, left-edge,
//!   right-edge or no-edge fit); a no-edge fit keeps the node for the right
//!   remainder and links a new node for the left one below it;
//! - a free merges as `merge_or_add_vmap_area` does: the next block grows
//!   down, the previous one grows up, and when both merge the next one is
//!   erased and the previous one survives.
//!
//! The augmented maxima are kept exact after every change, as Linux's
//! propagate, copy and rotate callbacks keep them; they do not change the
//! shape. The tree never panics on bad input: a free that overlaps a free
//! block and a clip outside one are refused and change nothing.

use alloc::vec::Vec;

use crate::error::{AddFreeError, CheckError, Invariant};
use crate::request::{RequestError, LINUX_PAGE_SIZE};

/// No node.
const NIL: u32 = u32::MAX;
/// A node's sides: `kids[L]` holds lower blocks, `kids[R]` higher ones.
const L: usize = 0;
const R: usize = 1;

/// One free block.
#[derive(Debug, Clone)]
struct Node {
    start: u64,
    end: u64,
    kids: [u32; 2],
    parent: u32,
    red: bool,
    /// The longest block in this node's subtree (`subtree_max_size`).
    max: u64,
}

/// Linux 6.12's augmented red-black tree of free blocks (see the
/// [module docs](self)).
///
/// # Examples
/// ```
/// use mmkit::nodes::linux_rbtree::LinuxFreeTree;
///
/// let mut t = LinuxFreeTree::new(0x10_0000, 0x100_0000).unwrap();
/// let a = t.alloc(0x3000, 0x1000, 0x10_0000, 0x100_0000).unwrap();
/// assert_eq!(a, 0x10_0000);
/// t.free(a, a + 0x3000).unwrap();
/// assert!(t.blocks().eq([0x10_0000..0x100_0000]));
/// t.check().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct LinuxFreeTree {
    nodes: Vec<Node>,
    /// Slots of erased nodes, for reuse.
    spare: Vec<u32>,
    root: u32,
}

impl LinuxFreeTree {
    /// A tree of one free block `[start, end)` (Linux's initial free tree
    /// is `[1, ULONG_MAX)` less the early areas).
    ///
    /// # Errors
    /// [`AddFreeError::Empty`] when `start >= end`.
    pub fn new(start: u64, end: u64) -> Result<Self, AddFreeError> {
        let mut t = LinuxFreeTree {
            nodes: Vec::new(),
            spare: Vec::new(),
            root: NIL,
        };
        t.free(start, end)?;
        Ok(t)
    }

    /// The free blocks in address order.
    pub fn blocks(&self) -> impl Iterator<Item = core::ops::Range<u64>> + '_ {
        let mut at = self.first();
        core::iter::from_fn(move || {
            let n = self.nodes.get(at as usize)?;
            let r = n.start..n.end;
            at = self.step(at, R);
            Some(r)
        })
    }

    /// The longest free block (0 when none).
    pub fn largest(&self) -> u64 {
        self.max(self.root)
    }

    /// Linux's address for `size` bytes aligned to `align` in `[vstart,
    /// vend)` (`__alloc_vmap_area` without the clip): the first block its
    /// descent accepts, failing when that fit ends past `vend`. `None`
    /// when Linux fails, and for a zero size or an alignment that is not a
    /// power of two.
    ///
    /// # Complexity
    /// O(log n) for a plain descent; a roll-back can revisit subtrees.
    pub fn find(&self, size: u64, align: u64, vstart: u64, vend: u64) -> Option<u64> {
        if size == 0 || !align.is_power_of_two() || vstart >= vend {
            return None;
        }
        let adjust = align > LINUX_PAGE_SIZE && vend - vstart != size;
        let n = self.lowest_match(size, align, vstart, adjust)?;
        let a = self.fit_in(n, size, align, vstart)?;
        (a.checked_add(size)? <= vend).then_some(a)
    }

    /// [`find`](Self::find), then the clip of the block it found.
    pub fn alloc(&mut self, size: u64, align: u64, vstart: u64, vend: u64) -> Option<u64> {
        let a = self.find(size, align, vstart, vend)?;
        self.clip(a, size).ok()?;
        Some(a)
    }

    /// Takes `[addr, addr + size)` out of the free block that holds it,
    /// as `va_clip` does.
    ///
    /// # Errors
    /// [`RequestError::NotFree`] when no free block holds the whole range
    /// (nothing changes).
    pub fn clip(&mut self, addr: u64, size: u64) -> Result<(), RequestError> {
        let end = addr.checked_add(size).filter(|_| size > 0);
        let not_free = RequestError::NotFree {
            start: addr,
            end: addr.saturating_add(size),
        };
        let Some(end) = end else {
            return Err(not_free);
        };
        let n = self.holding(addr);
        if n == NIL || self.nodes[n as usize].end < end {
            return Err(not_free);
        }
        let (s, e) = (self.nodes[n as usize].start, self.nodes[n as usize].end);
        match (s == addr, e == end) {
            (true, true) => self.erase(n),
            (true, false) => {
                self.nodes[n as usize].start = end;
                self.propagate(n);
            }
            (false, true) => {
                self.nodes[n as usize].end = addr;
                self.propagate(n);
            }
            (false, false) => {
                // The node keeps the right part; the left part is linked
                // by a descent from the node.
                self.nodes[n as usize].start = end;
                self.propagate(n);
                let (parent, side) = self
                    .links(n, s, addr)
                    .expect("the left part lies below its node, beside no block");
                self.link(parent, side, s, addr);
            }
        }
        Ok(())
    }

    /// Gives `[start, end)` back, as `merge_or_add_vmap_area` does.
    ///
    /// # Errors
    /// [`AddFreeError::Empty`] for `start >= end`, [`AddFreeError::Overlaps`]
    /// when a free block overlaps it (nothing changes).
    pub fn free(&mut self, start: u64, end: u64) -> Result<(), AddFreeError> {
        if start >= end {
            return Err(AddFreeError::Empty { start, end });
        }
        let Some((parent, side)) = self.links(self.root, start, end) else {
            let o = self.nodes.get(self.holding_any(start, end) as usize);
            return Err(AddFreeError::Overlaps {
                start: o.map_or(start, |o| o.start.max(start)),
                end: o.map_or(end, |o| o.end.min(end)),
            });
        };
        let (prev, next) = match (parent, side) {
            (NIL, _) => (NIL, NIL),
            (p, L) => (self.step(p, L), p),
            (p, _) => (p, self.step(p, R)),
        };
        let mut merged = NIL;
        if next != NIL && self.nodes[next as usize].start == end {
            self.nodes[next as usize].start = start;
            merged = next;
        }
        if prev != NIL && self.nodes[prev as usize].end == start {
            let end = match merged {
                NIL => end,
                m => {
                    let e = self.nodes[m as usize].end;
                    self.erase(m);
                    e
                }
            };
            self.nodes[prev as usize].end = end;
            merged = prev;
        }
        match merged {
            NIL => self.link(parent, side, start, end),
            m => self.propagate(m),
        }
        Ok(())
    }

    /// `find_vmap_lowest_match`: the first node of the descent that holds
    /// the request.
    fn lowest_match(&self, size: u64, align: u64, mut vstart: u64, adjust: bool) -> Option<u32> {
        let length = if adjust {
            size.checked_add(align - 1)?
        } else {
            size
        };
        let mut n = self.root;
        while n != NIL {
            let node = &self.nodes[n as usize];
            if self.max(node.kids[L]) >= length && vstart < node.start {
                n = node.kids[L];
                continue;
            }
            if self.fit_in(n, size, align, vstart).is_some() {
                return Some(n);
            }
            if self.max(node.kids[R]) >= length {
                n = node.kids[R];
                continue;
            }
            // Roll back to the first ancestor that holds the request or
            // whose right subtree may, searched from above its start.
            loop {
                n = self.nodes.get(n as usize)?.parent;
                let up = self.nodes.get(n as usize)?;
                if self.fit_in(n, size, align, vstart).is_some() {
                    return Some(n);
                }
                if self.max(up.kids[R]) >= length && vstart <= up.start {
                    vstart = up.start + 1;
                    n = up.kids[R];
                    break;
                }
            }
        }
        None
    }

    /// `is_within_this_va`: the aligned start of the request in node `n`
    /// searched from `vstart`, if it fits there.
    fn fit_in(&self, n: u32, size: u64, align: u64, vstart: u64) -> Option<u64> {
        let node = &self.nodes[n as usize];
        let from = node.start.max(vstart);
        let a = from.checked_add(align - 1)? & !(align - 1);
        (a.checked_add(size)? <= node.end).then_some(a)
    }

    /// `find_va_links` from node `from`: the parent and side where
    /// `[start, end)` links, or `None` when it overlaps a block.
    fn links(&self, from: u32, start: u64, end: u64) -> Option<(u32, usize)> {
        let (mut parent, mut side, mut n) = (NIL, L, from);
        while n != NIL {
            let node = &self.nodes[n as usize];
            parent = n;
            side = if end <= node.start {
                L
            } else if start >= node.end {
                R
            } else {
                return None;
            };
            n = node.kids[side];
        }
        Some((parent, side))
    }

    /// The node whose block contains `addr`, else `NIL`.
    fn holding(&self, addr: u64) -> u32 {
        self.holding_any(addr, addr.saturating_add(1))
    }

    /// A node whose block overlaps `[start, end)`, else `NIL`.
    fn holding_any(&self, start: u64, end: u64) -> u32 {
        let mut n = self.root;
        while n != NIL {
            let node = &self.nodes[n as usize];
            if end <= node.start {
                n = node.kids[L];
            } else if start >= node.end {
                n = node.kids[R];
            } else {
                break;
            }
        }
        n
    }

    /// The subtree maximum of `n` (0 for none).
    fn max(&self, n: u32) -> u64 {
        self.nodes.get(n as usize).map_or(0, |x| x.max)
    }

    fn is_red(&self, n: u32) -> bool {
        self.nodes.get(n as usize).is_some_and(|x| x.red)
    }

    /// The child of `n` on `side`.
    fn kid(&self, n: u32, side: usize) -> u32 {
        self.nodes[n as usize].kids[side]
    }

    /// The leftmost node.
    fn first(&self) -> u32 {
        let mut n = self.root;
        while n != NIL && self.kid(n, L) != NIL {
            n = self.kid(n, L);
        }
        n
    }

    /// The in-order neighbour of `n` on `side`: its successor for `R`,
    /// its predecessor for `L`.
    fn step(&self, mut n: u32, side: usize) -> u32 {
        if self.kid(n, side) != NIL {
            n = self.kid(n, side);
            while self.kid(n, 1 - side) != NIL {
                n = self.kid(n, 1 - side);
            }
            return n;
        }
        loop {
            let p = self.nodes[n as usize].parent;
            if p == NIL || self.kid(p, 1 - side) == n {
                return p;
            }
            n = p;
        }
    }

    /// Recomputes the maxima from `n` up to the root.
    fn propagate(&mut self, mut n: u32) {
        while n != NIL {
            self.recompute(n);
            n = self.nodes[n as usize].parent;
        }
    }

    fn recompute(&mut self, n: u32) {
        let node = &self.nodes[n as usize];
        let m = (node.end - node.start)
            .max(self.max(node.kids[L]))
            .max(self.max(node.kids[R]));
        self.nodes[n as usize].max = m;
    }

    /// Puts `new` where `old` hangs from `parent` (or at the root).
    fn replace_child(&mut self, parent: u32, old: u32, new: u32) {
        if parent == NIL {
            self.root = new;
        } else {
            let side = if self.kid(parent, L) == old { L } else { R };
            self.nodes[parent as usize].kids[side] = new;
        }
        if new != NIL {
            self.nodes[new as usize].parent = parent;
        }
    }

    /// Rotates `x` down to its `side`: its child on the other side rises
    /// into its place and takes `x`'s subtree maximum; `x`'s own is
    /// recomputed (lib/rbtree.c's rotate callback).
    fn rotate(&mut self, x: u32, side: usize) {
        let y = self.kid(x, 1 - side);
        let b = self.kid(y, side);
        self.nodes[x as usize].kids[1 - side] = b;
        if b != NIL {
            self.nodes[b as usize].parent = x;
        }
        self.replace_child(self.nodes[x as usize].parent, x, y);
        self.nodes[y as usize].kids[side] = x;
        self.nodes[x as usize].parent = y;
        self.nodes[y as usize].max = self.nodes[x as usize].max;
        self.recompute(x);
    }

    /// Links a red leaf `[start, end)` on `parent`'s `side` and rebalances.
    fn link(&mut self, parent: u32, side: usize, start: u64, end: u64) {
        let node = Node {
            start,
            end,
            kids: [NIL; 2],
            parent,
            red: true,
            max: end - start,
        };
        let z = match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        match parent {
            NIL => self.root = z,
            p => self.nodes[p as usize].kids[side] = z,
        }
        self.propagate(z);
        self.insert_fixup(z);
    }

    /// lib/rbtree.c's insert rebalancing from the new red node `z`.
    fn insert_fixup(&mut self, mut z: u32) {
        loop {
            let p = self.nodes[z as usize].parent;
            if p == NIL {
                self.nodes[z as usize].red = false;
                return;
            }
            if !self.nodes[p as usize].red {
                return;
            }
            // A red parent is not the root: the grandparent exists.
            let g = self.nodes[p as usize].parent;
            let ps = if self.kid(g, L) == p { L } else { R };
            let uncle = self.kid(g, 1 - ps);
            if self.is_red(uncle) {
                self.nodes[uncle as usize].red = false;
                self.nodes[p as usize].red = false;
                self.nodes[g as usize].red = true;
                z = g;
                continue;
            }
            let mut p = p;
            if self.kid(p, 1 - ps) == z {
                self.rotate(p, ps);
                p = z;
            }
            self.rotate(g, 1 - ps);
            self.nodes[p as usize].red = false;
            self.nodes[g as usize].red = true;
            return;
        }
    }

    /// Erases node `z` (a node with two children is replaced by its
    /// in-order successor) and rebalances.
    fn erase(&mut self, z: u32) {
        let Node {
            kids: [left, right],
            parent,
            red,
            ..
        } = self.nodes[z as usize].clone();
        let rebalance = if left == NIL || right == NIL {
            let child = if left == NIL { right } else { left };
            self.replace_child(parent, z, child);
            self.propagate(parent);
            if child != NIL {
                // A lone child is red below a black node: it turns black.
                self.nodes[child as usize].red = red;
                NIL
            } else if red {
                NIL
            } else {
                parent
            }
        } else {
            // The successor `s`, its parent `sp` after the splice (`s`
            // itself when it is the right child) and its right child.
            let (mut s, mut sp) = (right, right);
            while self.kid(s, L) != NIL {
                sp = s;
                s = self.kid(s, L);
            }
            let child2 = self.kid(s, R);
            if s != right {
                self.nodes[sp as usize].kids[L] = child2;
                if child2 != NIL {
                    self.nodes[child2 as usize].parent = sp;
                }
                self.nodes[s as usize].kids[R] = right;
                self.nodes[right as usize].parent = s;
            }
            self.nodes[s as usize].kids[L] = left;
            self.nodes[left as usize].parent = s;
            self.replace_child(parent, z, s);
            let s_red = self.nodes[s as usize].red;
            self.nodes[s as usize].red = red;
            self.propagate(sp);
            if child2 != NIL {
                self.nodes[child2 as usize].red = false;
                NIL
            } else if s_red {
                NIL
            } else {
                sp
            }
        };
        self.spare.push(z);
        self.nodes[z as usize].parent = NIL;
        if rebalance != NIL {
            self.erase_fixup(rebalance);
        }
    }

    /// lib/rbtree.c's erase rebalancing: `parent` lost a black node on
    /// one side (the side whose child is `node`, `NIL` at first).
    fn erase_fixup(&mut self, mut parent: u32) {
        let mut node = NIL;
        loop {
            // The side `node` hangs on; its sibling is on the other.
            let ns = if self.kid(parent, R) != node { L } else { R };
            let mut s = self.kid(parent, 1 - ns);
            if self.is_red(s) {
                self.rotate(parent, ns);
                self.nodes[s as usize].red = false;
                self.nodes[parent as usize].red = true;
                s = self.kid(parent, 1 - ns);
            }
            if !self.is_red(self.kid(s, 1 - ns)) {
                let near = self.kid(s, ns);
                if !self.is_red(near) {
                    self.nodes[s as usize].red = true;
                    if self.nodes[parent as usize].red {
                        self.nodes[parent as usize].red = false;
                        return;
                    }
                    node = parent;
                    parent = self.nodes[node as usize].parent;
                    if parent == NIL {
                        return;
                    }
                    continue;
                }
                self.rotate(s, 1 - ns);
                self.nodes[near as usize].red = false;
                self.nodes[s as usize].red = true;
                s = near;
            }
            let far = self.kid(s, 1 - ns);
            self.rotate(parent, ns);
            self.nodes[s as usize].red = self.nodes[parent as usize].red;
            self.nodes[parent as usize].red = false;
            self.nodes[far as usize].red = false;
            return;
        }
    }

    /// Checks the tree: blocks sorted, disjoint, apart (adjacent blocks
    /// are merged) and non-empty; parent links; a black root, no red node
    /// with a red child, the same black height on every path; every
    /// subtree maximum exact.
    ///
    /// # Errors
    /// The first broken invariant.
    pub fn check(&self) -> Result<(), CheckError> {
        let bad = |at: u64, inv: Invariant, what: &str| {
            Err(CheckError::new("linux-free-tree", inv, Some(at), what))
        };
        if self.is_red(self.root) {
            return bad(0, Invariant::Structure, "the root is red");
        }
        if self.root != NIL && self.nodes[self.root as usize].parent != NIL {
            return bad(0, Invariant::Structure, "the root has a parent");
        }
        self.check_subtree(self.root)?;
        let mut last: Option<u64> = None;
        for b in self.blocks() {
            if b.start >= b.end || last.is_some_and(|e| e >= b.start) {
                return bad(
                    b.start,
                    Invariant::Layout,
                    "blocks overlap, touch or are empty",
                );
            }
            last = Some(b.end);
        }
        Ok(())
    }

    /// Checks the subtree of `n`; returns its black height.
    fn check_subtree(&self, n: u32) -> Result<u32, CheckError> {
        if n == NIL {
            return Ok(1);
        }
        let node = &self.nodes[n as usize];
        let bad = |inv: Invariant, what: &str| {
            Err(CheckError::new(
                "linux-free-tree",
                inv,
                Some(node.start),
                what,
            ))
        };
        for c in node.kids {
            if c != NIL && self.nodes[c as usize].parent != n {
                return bad(Invariant::Structure, "a child's parent link is wrong");
            }
            if c != NIL && node.red && self.nodes[c as usize].red {
                return bad(Invariant::Structure, "a red node has a red child");
            }
        }
        let (l, r) = (
            self.check_subtree(node.kids[L])?,
            self.check_subtree(node.kids[R])?,
        );
        if l != r {
            return bad(Invariant::Structure, "black heights differ");
        }
        let m = (node.end - node.start)
            .max(self.max(node.kids[L]))
            .max(self.max(node.kids[R]));
        if node.max != m {
            return bad(Invariant::Hint, "a subtree maximum is wrong");
        }
        Ok(l + u32::from(!node.red))
    }
}

#[cfg(test)]
mod tests;
