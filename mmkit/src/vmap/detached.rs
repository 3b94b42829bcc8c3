//! Detached areas: live areas taken out of the busy index by
//! [`detach`](crate::range::RangeAllocator::detach), neither live nor
//! free, until [`release_detached`](crate::range::RangeAllocator::release_detached)
//! merges them into free space.
//!
//! A kernel's lazy `vfree` detaches its area at once, so a second free
//! of it is refused there and then, and the purge after the TLB flush
//! releases thousands of them with no busy-index lookup: the handles
//! ([`Detached`]) say what they are, and only `detach` makes one. The
//! allocator counts them (areas and bytes); `check` finds their bytes in
//! the gaps between free, live, lazy ranges and holes.
//!
//! Where [`free_batch`](crate::range::RangeAllocator::free_batch) does not
//! join runs (fixed storage, or no busy index) a detached area stays live
//! in the index, as the trait's default keeps it, and its release frees
//! it with its size.

use alloc::vec::Vec;

use super::VmapAllocator;
use crate::error::FreeError;
use crate::range::{Detached, RangeAllocator, SizedFree};

impl<S: crate::storage::Storage> VmapAllocator<S>
where
    Self: RangeAllocator + SizedFree,
{
    /// The body of [`detach`](RangeAllocator::detach).
    pub(super) fn detach_body(&mut self, start: u64, end: u64) -> Result<Detached, FreeError> {
        crate::debug_check!(self);
        if start >= end {
            return Err(FreeError::Invalid);
        }
        if !self.joins_batches() {
            return Ok(Detached::new(start, end));
        }
        let probe = self.busy.probe(start);
        match self.busy.remove_probed_if(start, probe, |e| e == end) {
            Some(Ok(_)) => {}
            Some(Err(_)) => return Err(FreeError::SizeMismatch),
            None => return Err(FreeError::NotAllocated),
        }
        self.live_bytes -= end - start;
        self.live_count -= 1;
        self.detached_count += 1;
        self.detached_bytes += end - start;
        Ok(Detached::new(start, end))
    }

    /// The body of [`release_detached`](RangeAllocator::release_detached):
    /// the handles are checked against the space and the detached counts
    /// first, then the good ones join in runs as `free_batch`'s do.
    pub(super) fn release_body(&mut self, areas: &mut Vec<Detached>) -> Result<(), FreeError> {
        crate::debug_check!(self);
        if !self.joins_batches() {
            return crate::range::release_each(self, areas, |a, d| a.free_sized(d.start(), d.size()));
        }
        let (mut count, mut bytes) = (0u64, 0u64);
        let good = areas
            .iter()
            .take_while(|d| {
                count += 1;
                bytes = bytes.saturating_add(d.size());
                self.start <= d.start()
                    && d.end() <= self.end
                    && count <= self.detached_count
                    && bytes <= self.detached_bytes
            })
            .count();
        let mut run = None;
        for d in &areas[..good] {
            self.detached_count -= 1;
            self.detached_bytes -= d.size();
            self.join_run(&mut run, d.start(), d.end());
        }
        self.end_run(run);
        areas.drain(..good);
        if areas.is_empty() {
            Ok(())
        } else {
            Err(FreeError::NotAllocated)
        }
    }
}
