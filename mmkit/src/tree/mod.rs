//! The index of free blocks that [`crate::vmap`] searches: an augmented
//! B+tree ([`btree::BTree`]) whose inner nodes keep, for each child, its
//! lowest start, its longest block and an [`AlignSummary`] of what it can
//! hold at each alignment, so a lowest-fit search skips every child that
//! cannot hold the request and the descent stays O(log n).
//!
//! ```text
//!   inner:        key 0          key 40           key 96
//!                 max 16         max 8            max 4
//!                /               |                 \
//!   leaves: [0,4) [10,26)   [40,48) [60,62)   [96,98) [120,124)
//!   the wilderness, the highest block, outside the tree: [200,4096)
//! ```
//!
//! Where each part lives:
//! - `summary/`: [`AlignSummary`], a subtree's usable length at every
//!   alignment packed in one `u64`, and how summaries are combined;
//! - `btree/mod.rs`: the tree, its invariants and how updates keep the
//!   summaries (upper bounds, not exact values);
//! - `btree/node.rs`: leaves, inner nodes and the pool both kinds live in;
//! - `btree/entry.rs`: a parent's entry for each child, and how an update
//!   refreshes the entries above it;
//! - `btree/walk.rs`: descents, reads and iteration in address order;
//! - `btree/search.rs`: the lowest- and highest-fit searches;
//! - `btree/finger.rs`: a free's lookup of its neighbours, from the path
//!   the last lookup kept;
//! - `btree/update.rs`: inserts, removals, splits and merges of blocks and
//!   nodes;
//! - `btree/check.rs`: the invariant checker (`BTree::check`);
//! - `btree/tests.rs`: model tests against a `BTreeMap` of blocks.
//!
//! Not part of mmkit's stable API: reachable from outside the crate only
//! with the `internals` feature (see the crate docs).

pub mod btree;
mod summary;
pub use summary::{AlignSummary, Part, CLASSES};
