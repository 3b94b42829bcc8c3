//! A purge's first half one step at a time, as Linux 6.12 runs it
//! (`__purge_vmap_area_lazy`, `decay_va_pool_node`): for each node in
//! turn, each non-empty pool is taken off its list (*detached*), its
//! newest quarter is set aside, the rest is put back (*attached*); the
//! node's set-aside areas then go to the free tree (*reclaimed*); then
//! the node's lazy list is *taken*. Another CPU's request in between
//! misses a detached pool and cannot have a set-aside area yet.
//!
//! [`LinuxNodes::purge_begin`] runs every step at one point;
//! [`LinuxNodes::purge_step`] runs one, where a capture's kprobe events
//! say Linux ran it.

use alloc::vec::Vec;

use super::{LinuxNodes, Purging, PAGE, POOLED_PAGES};

/// One step of a purge's decay and take. Linux 6.12 runs them node by
/// node: each non-empty pool detached and attached in turn, then the
/// node's reclaim, then its take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeStep {
    /// A purge begins (one still pending ends first), nothing decayed or
    /// taken yet; `full` empties every pool it detaches and pools
    /// nothing.
    Start {
        /// A full purge (`full_pool_decay`).
        full: bool,
    },
    /// `node`'s pool of `pages`-page areas leaves its list: its newest
    /// `len / 4` areas (all of them when it holds fewer than 4, or in a
    /// full purge) wait for [`Reclaim`](Self::Reclaim); requests miss the
    /// rest until [`Attach`](Self::Attach).
    Detach {
        /// The vmap node.
        node: usize,
        /// The pool's area size in pages, 1 to 256.
        pages: u64,
    },
    /// The rest of a detached pool is back on its list.
    Attach {
        /// The vmap node.
        node: usize,
        /// The pool's area size in pages, 1 to 256.
        pages: u64,
    },
    /// `node`'s decayed areas go to the free tree: merged among
    /// themselves first, then the lowest first; its pools are attached.
    Reclaim {
        /// The vmap node.
        node: usize,
    },
    /// The purge takes `node`'s lazy list; later lazy frees wait for the
    /// next purge.
    Take {
        /// The vmap node.
        node: usize,
    },
}

impl LinuxNodes {
    /// Runs one step of a purge's first half. Whether it did anything:
    /// `false` (and no change) for a node out of range, a pool size
    /// outside 1 to 256 pages, or a `Take` with no purge begun.
    ///
    /// ```
    /// use mmkit::nodes::{LinuxNodes, PurgeStep};
    /// use mmkit::range::RangeAllocator;
    ///
    /// let (vs, ve) = (0x10_0000, 0x100_0000);
    /// let mut n = LinuxNodes::new(0x1000, 0x200_0000, 2, (vs, ve)).unwrap();
    /// let a = n.alloc_in(0x1000, 0x1000, vs, ve).unwrap(); // CPU 0: node 0
    /// n.free_lazy(a).unwrap();
    /// n.purge(&mut |_, _| {}); // into node 0's pool of 1 page
    /// n.purge_step(PurgeStep::Start { full: false });
    /// n.purge_step(PurgeStep::Detach { node: 0, pages: 1 });
    /// // The pool's one area waits for the reclaim: neither pooled nor free.
    /// assert_eq!(n.alloc_in(0x1000, 0x1000, vs, ve), Ok(vs + 0x1000));
    /// n.purge_step(PurgeStep::Reclaim { node: 0 });
    /// assert_eq!(n.alloc_in(0x1000, 0x1000, vs, ve), Ok(vs));
    /// n.check().unwrap();
    /// ```
    pub fn purge_step(&mut self, step: PurgeStep) -> bool {
        let class = |pages: u64| {
            (1..=POOLED_PAGES)
                .contains(&pages)
                .then(|| pages as usize - 1)
        };
        match step {
            PurgeStep::Start { full } => {
                self.purge_end();
                // A decay whose reclaim the trace did not show ends first.
                for node in 0..self.nodes {
                    self.reclaim(node);
                }
                self.detached.clear();
                self.purging = Some(Purging {
                    full,
                    nodes: alloc::vec![Vec::new(); self.nodes],
                    done: 0,
                });
                true
            }
            PurgeStep::Detach { node, pages } => match class(pages) {
                Some(c) if node < self.nodes => {
                    let full = self.purging.as_ref().is_some_and(|p| p.full);
                    self.detach(node, c, full);
                    true
                }
                _ => false,
            },
            PurgeStep::Attach { node, pages } => match class(pages) {
                Some(c) if node < self.nodes => {
                    self.detached.retain(|&d| d != (node, c));
                    true
                }
                _ => false,
            },
            PurgeStep::Reclaim { node } if node < self.nodes => {
                self.reclaim(node);
                true
            }
            PurgeStep::Take { node } => self.take(node),
            PurgeStep::Reclaim { .. } => false,
        }
    }

    /// `decay_va_pool_node` for `node` at once: every non-empty pool
    /// detached and attached, then the reclaim.
    pub(super) fn decay_node(&mut self, node: usize, full: bool) {
        for c in 0..self.pools[node].len() {
            if !self.pools[node][c].is_empty() {
                self.detach(node, c, full);
                self.detached.retain(|&d| d != (node, c));
            }
        }
        self.reclaim(node);
    }

    /// Detaches `node`'s pool `c`, setting its newest areas aside: all of
    /// them when `full` or when it holds fewer than 4 (the kernel's
    /// countdown from 0 never reaches 0 again), else `len / 4`.
    fn detach(&mut self, node: usize, c: usize, full: bool) {
        let pool = &mut self.pools[node][c];
        let take = match pool.len() >> 2 {
            k if k > 0 && !full => k,
            _ => pool.len(),
        };
        let size = (c as u64 + 1) * PAGE;
        let aside = pool.drain(..take).map(|a| (a, a + size));
        self.decaying[node].extend(aside);
        if !self.detached.contains(&(node, c)) {
            self.detached.push((node, c));
        }
    }

    /// The areas `node`'s decay set aside go to the free tree: merged
    /// among themselves (Linux gathers them in a tree of their own), each
    /// merged run the lowest first. Its pools are attached again.
    fn reclaim(&mut self, node: usize) {
        self.detached.retain(|&(n, _)| n != node);
        let mut back = core::mem::take(&mut self.decaying[node]);
        back.sort_unstable();
        let mut run: Option<(u64, u64)> = None;
        for (s, e) in back {
            self.tree.free(s).expect("a decayed area is live");
            run = match run {
                Some((rs, re)) if re == s => Some((rs, e)),
                done => {
                    self.free_run(done);
                    Some((s, e))
                }
            };
        }
        self.free_run(run);
    }

    /// Takes the area `[a, a + size)` off the areas a decay set aside, if
    /// it is one of them.
    pub(super) fn take_aside(&mut self, a: u64, size: u64) -> bool {
        for aside in &mut self.decaying {
            if let Some(i) = aside.iter().position(|&r| r == (a, a + size)) {
                aside.swap_remove(i);
                return true;
            }
        }
        false
    }

    /// The begun purge takes `node`'s lazy list. Whether it could: a
    /// purge has begun and `node` is in range.
    fn take(&mut self, node: usize) -> bool {
        let Some(taken) = self.purging.as_mut().and_then(|p| p.nodes.get_mut(node)) else {
            return false;
        };
        taken.append(&mut self.lazy[node]);
        true
    }
}
