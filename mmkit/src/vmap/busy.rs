//! The busy index: live areas by start address, in O(1).
//!
//! An open-addressing hash table (linear probing, backward-shift deletion)
//! from an area's start to its end: 16 bytes a live area, no tree node. It replaces the kernel's busy rb-tree
//! for the one query the allocator needs on free, "which live area starts
//! here?", without walking a tree of a million nodes. The table doubles when
//! it passes 7/8 full and never shrinks, so steady state allocates nothing;
//! between 7/16 and 7/8 full, it holds 18 to 37 bytes per live area.
//!
//! Invariant: every key sits in the probe run that starts at its home slot,
//! with no empty slot between its home and its position.

use alloc::vec;
use alloc::vec::Vec;

/// A live area `[key, end)`; `end == 0` marks an empty slot (a live area
/// always ends above its start, so never at 0).
#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    end: u64,
}

const EMPTY: Slot = Slot { key: 0, end: 0 };

/// A key's home slot and what it held when read ([`BusyIndex::probe`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Probe {
    i: usize,
    slot: Slot,
}

/// Start address -> end address of each live area.
#[derive(Debug, Clone)]
pub(crate) struct BusyIndex {
    slots: Vec<Slot>,
    len: usize,
}

impl BusyIndex {
    pub(crate) fn new() -> Self {
        BusyIndex {
            slots: vec![EMPTY; 16],
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot>()
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Fibonacci hashing: page-aligned keys still spread over every slot.
    #[inline]
    fn home(&self, key: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The home slot of `key`, read. A caller that reads it before work
    /// that does not depend on it (the free-block descent of a free) lets
    /// the processor wait for both cache misses at once; the lookup goes
    /// on from it in [`remove_probed`](Self::remove_probed).
    #[inline]
    pub(crate) fn probe(&self, key: u64) -> Probe {
        let i = self.home(key);
        Probe {
            i,
            slot: self.slots[i],
        }
    }

    /// The slot holding `key`, if present.
    #[inline]
    fn position(&self, key: u64) -> Option<usize> {
        self.position_from(key, self.probe(key))
    }

    /// [`position`](Self::position), from the home slot already read.
    #[inline]
    fn position_from(&self, key: u64, p: Probe) -> Option<usize> {
        let (mut i, mut s) = (p.i, p.slot);
        loop {
            if s.end == 0 {
                return None;
            }
            if s.key == key {
                return Some(i);
            }
            i = (i + 1) & self.mask();
            s = self.slots[i];
        }
    }

    pub(crate) fn get(&self, key: u64) -> Option<u64> {
        self.position(key).map(|i| self.slots[i].end)
    }

    /// Inserts the live area `[key, end)`; the key must not be present.
    pub(crate) fn insert(&mut self, key: u64, end: u64) {
        debug_assert!(end > key);
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        let mut i = self.home(key);
        while self.slots[i].end != 0 {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = Slot { key, end };
        self.len += 1;
    }

    /// Removes the area starting at `key` and returns its end, if present.
    pub(crate) fn remove(&mut self, key: u64) -> Option<u64> {
        let p = self.probe(key);
        self.remove_probed(key, p)
    }

    /// [`remove`](Self::remove), from `p`, [`probe`](Self::probe) of `key`
    /// taken with no change to the index since.
    pub(crate) fn remove_probed(&mut self, key: u64, p: Probe) -> Option<u64> {
        let mut hole = self.position_from(key, p)?;
        let end = self.slots[hole].end;
        // Backward shift: pull later members of the run into the hole when
        // their home does not lie cyclically in (hole, j].
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask();
            let s = self.slots[j];
            if s.end == 0 {
                break;
            }
            let h = self.home(s.key);
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        Some(end)
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY; self.slots.len() * 2];
        let old = core::mem::replace(&mut self.slots, bigger);
        self.len = 0;
        for s in old.into_iter().filter(|s| s.end != 0) {
            self.insert(s.key, s.end);
        }
    }

    /// Every live area `(start, end)`, in table order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.end != 0)
            .map(|s| (s.key, s.end))
    }

    /// Checks that every key is reachable from its home slot.
    pub(crate) fn consistent(&self) -> bool {
        self.iter().all(|(k, end)| self.get(k) == Some(end)) && self.iter().count() == self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_against_a_vec() {
        let mut ix = BusyIndex::new();
        let mut model: Vec<(u64, u64)> = Vec::new();
        let mut x = 1u64;
        for step in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = (x >> 40) << 12; // page-aligned keys collide in low bits
            match model.iter().position(|&(k, _)| k == key) {
                Some(p) if step % 3 != 0 => {
                    assert_eq!(ix.remove(key), Some(model.swap_remove(p).1));
                }
                Some(_) => assert_eq!(ix.get(key), model.iter().find(|m| m.0 == key).map(|m| m.1)),
                None => {
                    assert_eq!(ix.remove(key), None);
                    ix.insert(key, key + 1 + step as u64);
                    model.push((key, key + 1 + step as u64));
                }
            }
            assert_eq!(ix.len(), model.len());
        }
        assert!(ix.consistent());
        for (k, end) in model {
            assert_eq!(ix.get(k), Some(end));
        }
    }
}
