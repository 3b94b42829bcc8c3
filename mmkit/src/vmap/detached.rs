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
    /// each handle is checked against the space and the detached counts
    /// as it comes, then joins the run as `free_batch`'s areas do.
    pub(super) fn release_body(
        &mut self,
        areas: impl IntoIterator<Item = Detached>,
    ) -> Result<(), (Detached, FreeError)> {
        crate::debug_check!(self);
        if !self.joins_batches() {
            return crate::range::release_each(self, areas, |a, d| {
                a.free_sized(d.start(), d.size())
            });
        }
        let mut run = None;
        for d in areas {
            let (s, e) = (d.start(), d.end());
            let ours = self.start <= s
                && e <= self.end
                && self.detached_count > 0
                && e - s <= self.detached_bytes;
            if !ours {
                self.end_run(run);
                return Err((d, FreeError::NotAllocated));
            }
            self.detached_count -= 1;
            self.detached_bytes -= e - s;
            self.join_run(&mut run, s, e);
        }
        self.end_run(run);
        Ok(())
    }
}
