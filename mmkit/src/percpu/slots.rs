//! Chunk slots: lists of chunk ids sorted by how much a chunk can still
//! hold, shared by the bitmap allocator and the area-map baseline.
//!
//! ```text
//!  slot 0        full, or failed a fit          [c7] <-> [c2]
//!  slot 1..=k    longest free run ~ 2^(slot+2)  [c4] <-> [c9] <-> [c1]
//!  free slot     wholly free (at most one kept) [c0]
//! ```
//!
//! The lists are intrusive and doubly linked over chunk ids (`prev`/`next`
//! arrays indexed by id), so moving a chunk between slots is O(1), as the
//! kernel's `list_move` is.

use alloc::vec;
use alloc::vec::Vec;

use super::PercpuStats;

/// "No chunk" in the link arrays.
pub(crate) const NIL: u32 = u32::MAX;

/// `__pcpu_size_to_slot`: `max(fls(bytes) - 5 + 2, 1)`, where `fls` is the
/// 1-based index of the highest set bit. 4..=15 bytes map to slot 1,
/// 16..=31 to 2, doubling from there.
pub(crate) fn size_to_slot(bytes: u64) -> usize {
    let fls = 64 - bytes.leading_zeros() as usize;
    fls.saturating_sub(3).max(1)
}

/// Doubly linked lists of chunk ids, one per slot.
#[derive(Debug, Clone)]
pub(crate) struct SlotLists {
    head: Vec<u32>,
    tail: Vec<u32>,
    count: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// The slot each chunk id is listed in, `NIL` when it is not listed.
    slot_of: Vec<u32>,
}

impl SlotLists {
    /// `nr_slots` empty lists.
    pub(crate) fn new(nr_slots: usize) -> Self {
        SlotLists {
            head: vec![NIL; nr_slots],
            tail: vec![NIL; nr_slots],
            count: vec![0; nr_slots],
            prev: Vec::new(),
            next: Vec::new(),
            slot_of: Vec::new(),
        }
    }

    /// Number of slots.
    pub(crate) fn len(&self) -> usize {
        self.head.len()
    }

    /// Chunks listed in `slot`.
    pub(crate) fn count(&self, slot: usize) -> u64 {
        self.count[slot]
    }

    /// Per-slot chunk counts.
    pub(crate) fn counts(&self) -> Vec<u64> {
        self.count.clone()
    }

    /// First chunk of `slot`, or `NIL`.
    pub(crate) fn head(&self, slot: usize) -> u32 {
        self.head[slot]
    }

    /// The chunk after `id` in its list, or `NIL`.
    pub(crate) fn next(&self, id: u32) -> u32 {
        self.next[id as usize]
    }

    /// The slot `id` is listed in, if any.
    pub(crate) fn slot_of(&self, id: u32) -> Option<usize> {
        self.slot_of
            .get(id as usize)
            .and_then(|&s| (s != NIL).then_some(s as usize))
    }

    fn grow_to(&mut self, id: u32) {
        let need = id as usize + 1;
        if self.prev.len() < need {
            self.prev.resize(need, NIL);
            self.next.resize(need, NIL);
            self.slot_of.resize(need, NIL);
        }
    }

    /// Lists `id` (not listed now) in `slot`, at the head or the tail.
    pub(crate) fn insert(&mut self, id: u32, slot: usize, at_head: bool) {
        self.grow_to(id);
        let i = id as usize;
        if at_head {
            let h = self.head[slot];
            self.prev[i] = NIL;
            self.next[i] = h;
            if h == NIL {
                self.tail[slot] = id;
            } else {
                self.prev[h as usize] = id;
            }
            self.head[slot] = id;
        } else {
            let t = self.tail[slot];
            self.next[i] = NIL;
            self.prev[i] = t;
            if t == NIL {
                self.head[slot] = id;
            } else {
                self.next[t as usize] = id;
            }
            self.tail[slot] = id;
        }
        self.slot_of[i] = slot as u32;
        self.count[slot] += 1;
    }

    /// Unlists `id` (a no-op when it is not listed).
    pub(crate) fn remove(&mut self, id: u32) {
        let Some(slot) = self.slot_of(id) else { return };
        let i = id as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head[slot] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[slot] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.slot_of[i] = NIL;
        self.count[slot] -= 1;
    }

    /// Moves `id` to `slot`: to the head when the chunk got freer (a higher
    /// slot: try it first), to the tail when it got fuller.
    pub(crate) fn relocate(&mut self, id: u32, slot: usize) {
        let old = self.slot_of(id);
        if old == Some(slot) {
            return;
        }
        self.remove(id);
        let at_head = match old {
            None => true,
            Some(o) => slot > o,
        };
        self.insert(id, slot, at_head);
    }

    /// Checks the links: every list is consistent both ways, its count is
    /// right, and every chunk in it says it is in that slot. Returns the
    /// number of listed chunks.
    pub(crate) fn check(&self) -> Result<u64, crate::CheckError> {
        let mut total = 0u64;
        for slot in 0..self.len() {
            let (mut cur, mut prev, mut n) = (self.head[slot], NIL, 0u64);
            while cur != NIL {
                let i = cur as usize;
                crate::ensure!(
                    self.slot_of[i] == slot as u32,
                    Structure @ cur,
                    "chunk {cur} in list {slot} says slot {}",
                    self.slot_of[i]
                );
                crate::ensure!(
                    self.prev[i] == prev,
                    Structure @ cur,
                    "chunk {cur}: broken prev link"
                );
                n += 1;
                crate::ensure!(
                    n <= self.slot_of.len() as u64,
                    Structure @ slot,
                    "slot {slot}: list loops"
                );
                prev = cur;
                cur = self.next[i];
            }
            crate::ensure!(
                self.tail[slot] == prev,
                Structure @ slot,
                "slot {slot}: tail is not the last chunk"
            );
            crate::ensure!(
                self.count[slot] == n,
                Accounting @ slot,
                "slot {slot}: count {} but {n} listed",
                self.count[slot]
            );
            total += n;
        }
        Ok(total)
    }
}

/// What [`ChunkTable`] needs to know of a chunk.
pub(crate) trait TableChunk {
    /// Nothing allocated in it.
    fn is_empty(&self) -> bool;
    /// Live allocations in it.
    fn live(&self) -> u64;
    /// Bytes free in it, per unit.
    fn free_bytes(&self) -> u64;
    /// Its longest free run in bytes, as its hints know it.
    fn largest_free(&self) -> u64;
    /// Heap bytes of its metadata.
    fn metadata_bytes(&self) -> u64;
    /// Checks its own invariants.
    fn check(&self) -> Result<(), crate::CheckError>;
}

/// The chunk table of a percpu allocator: chunks by id (ids of released
/// chunks are reused), and the slot lists they sit in. The bitmap
/// allocator and the area-map baseline keep their chunks in one of these
/// and differ only in the chunk and in the slot they give it.
///
/// Invariants (checked by [`check`](Self::check)): every held chunk is
/// listed in one slot and no released id is; at most one chunk is empty.
#[derive(Debug, Clone)]
pub(crate) struct ChunkTable<C> {
    chunks: Vec<Option<C>>,
    free_ids: Vec<u32>,
    pub(crate) slots: SlotLists,
}

impl<C: TableChunk> ChunkTable<C> {
    /// An empty table with `nr_slots` slots, the last for empty chunks.
    pub(crate) fn new(nr_slots: usize) -> Self {
        ChunkTable {
            chunks: Vec::new(),
            free_ids: Vec::new(),
            slots: SlotLists::new(nr_slots),
        }
    }

    /// The slot of wholly free chunks (the last).
    pub(crate) fn free_slot(&self) -> usize {
        self.slots.len() - 1
    }

    /// Whether `id` names a held chunk.
    pub(crate) fn is_held(&self, id: u32) -> bool {
        self.chunks.get(id as usize).is_some_and(Option::is_some)
    }

    /// The held chunk `id`; panics on a released or unknown id (callers
    /// check with [`is_held`](Self::is_held) or take ids from the lists).
    pub(crate) fn chunk(&self, id: u32) -> &C {
        self.chunks[id as usize]
            .as_ref()
            .expect("listed chunk is held")
    }

    /// [`chunk`](Self::chunk), mutably.
    pub(crate) fn chunk_mut(&mut self, id: u32) -> &mut C {
        self.chunks[id as usize]
            .as_mut()
            .expect("listed chunk is held")
    }

    /// Every held chunk.
    pub(crate) fn held(&self) -> impl Iterator<Item = &C> {
        self.chunks.iter().flatten()
    }

    /// Adds `c`, reusing a released id, and lists it as free.
    pub(crate) fn create(&mut self, c: C) -> u32 {
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.chunks[id as usize] = Some(c);
                id
            }
            None => {
                self.chunks.push(Some(c));
                (self.chunks.len() - 1) as u32
            }
        };
        let slot = self.free_slot();
        self.slots.insert(id, slot, true);
        id
    }

    /// Releases chunk `id` when it is empty and another empty chunk is
    /// listed (the kernel's balance work keeps at most one).
    pub(crate) fn release_if_spare(&mut self, id: u32) {
        if self.chunk(id).is_empty() && self.slots.count(self.free_slot()) > 1 {
            self.slots.remove(id);
            self.chunks[id as usize] = None;
            self.free_ids.push(id);
        }
    }

    /// Checks the lists and the table's invariants; `each(id, chunk, slot
    /// it is listed in)` checks a held chunk and its slot.
    pub(crate) fn check(
        &self,
        mut each: impl FnMut(u32, &C, Option<usize>) -> Result<(), crate::CheckError>,
    ) -> Result<(), crate::CheckError> {
        let listed = self.slots.check()?;
        let (mut held, mut empty) = (0u64, 0u64);
        for (id, c) in self.chunks.iter().enumerate() {
            let id = id as u32;
            let Some(c) = c else {
                crate::ensure!(
                    self.slots.slot_of(id).is_none(),
                    Structure @ id,
                    "released chunk {id} still listed"
                );
                continue;
            };
            held += 1;
            empty += u64::from(c.is_empty());
            each(id, c, self.slots.slot_of(id))?;
        }
        crate::ensure!(
            listed == held,
            Accounting,
            "{held} chunks held but {listed} listed"
        );
        crate::ensure!(empty <= 1, Bounds, "{empty} free chunks kept (at most 1)");
        Ok(())
    }

    /// [`check`](Self::check), with for each held chunk: `first(id,
    /// chunk)`, the allocator's own test of it; the chunk's invariants;
    /// and its slot: the one `want(chunk)` names, or one `also(listed,
    /// wanted)` accepts.
    pub(crate) fn check_chunks(
        &self,
        mut first: impl FnMut(u32, &C) -> Result<(), crate::CheckError>,
        want: impl Fn(&C) -> usize,
        also: impl Fn(usize, usize) -> bool,
    ) -> Result<(), crate::CheckError> {
        self.check(|id, c, at| {
            first(id, c)?;
            c.check()
                .map_err(|e| e.within(alloc::format!("chunk {id}")))?;
            let want = want(c);
            crate::ensure!(
                at == Some(want) || at.is_some_and(|at| also(at, want)),
                Structure @ id,
                "chunk {id} listed in slot {at:?}, belongs in {want}"
            );
            Ok(())
        })
    }

    /// The statistics of the held chunks, whose units are `unit_size`
    /// bytes.
    ///
    /// # Complexity
    /// O(chunks + slots).
    pub(crate) fn stats(&self, unit_size: u64) -> PercpuStats {
        let mut s = PercpuStats {
            unit_size,
            slot_counts: self.slots.counts(),
            ..PercpuStats::default()
        };
        for c in self.held() {
            s.chunks += 1;
            s.empty_chunks += u64::from(c.is_empty());
            s.live += c.live();
            s.free_bytes += c.free_bytes();
            s.largest_free = s.largest_free.max(c.largest_free());
            s.metadata_bytes += c.metadata_bytes();
        }
        s.used_bytes = s.chunks * unit_size - s.free_bytes;
        s
    }
}
