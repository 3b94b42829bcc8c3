//! The buddy allocator's invariant checker: every invariant listed in the
//! module documentation, from the frames up.

use alloc::vec;
use alloc::vec::Vec;

use super::{BuddyAllocator, Frame, MigrateType};
use crate::error::{CheckError, Invariant};

impl BuddyAllocator {
    /// Checks every invariant listed in the module documentation.
    ///
    /// # Errors
    /// A [`CheckError`] naming the first violation (a bug in mmkit).
    ///
    /// # Complexity
    /// O(span + pageblocks).
    ///
    /// # Examples
    /// ```
    /// use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
    /// let mut zone = BuddyAllocator::new(0, 64, BuddyConfig::default()).unwrap();
    /// zone.add_free_range(0, 64).unwrap();
    /// zone.alloc(3, MigrateType::Movable).unwrap();
    /// zone.check().unwrap();
    /// ```
    pub fn check(&self) -> Result<(), CheckError> {
        let per_list = self.check_frames()?;
        self.check_lists(&per_list)?;
        let c = &self.compact_stats;
        crate::ensure!(
            c.success + c.fail == c.runs && c.moved_pages <= c.migrate_scanned,
            Accounting,
            "compaction counters inconsistent: {c:?}"
        );
        Ok(())
    }

    /// Walks the frames block by block; returns free blocks per list.
    fn check_frames(&self) -> Result<Vec<u64>, CheckError> {
        let mut per_list = vec![0u64; self.lists.len()];
        let (mut free, mut present, mut i) = (0u64, 0u64, 0usize);
        while i < self.frames.len() {
            let pfn = self.start + i as u64;
            let (order, free_mt) = match self.frame(i) {
                Frame::Hole => {
                    i += 1;
                    continue;
                }
                Frame::Tail => {
                    return Err(CheckError::new(
                        module_path!(),
                        Invariant::Structure,
                        Some(pfn),
                        alloc::format!("pfn {pfn:#x}: interior frame without a head"),
                    ))
                }
                Frame::Free { order, mt } => (order, Some(mt)),
                Frame::Alloc { order, .. } => (order, None),
            };
            self.check_block_shape(pfn, order)?;
            if let Some(mt) = free_mt {
                self.check_free_block(pfn, order, mt)?;
                per_list[self.list_index(order, mt)] += 1;
                free += 1u64 << order;
            }
            present += 1u64 << order;
            i += 1 << order;
        }
        crate::ensure!(
            free == self.free_pages,
            Accounting,
            "free_pages {} but blocks hold {free}",
            self.free_pages
        );
        crate::ensure!(
            present == self.present_pages,
            Accounting,
            "present_pages {} but blocks cover {present}",
            self.present_pages
        );
        Ok(per_list)
    }

    /// A block head at `pfn`: order in range, aligned, inside the span, and
    /// every other frame of it interior.
    fn check_block_shape(&self, pfn: u64, order: u8) -> Result<(), CheckError> {
        crate::ensure!(
            order <= self.cfg.max_order,
            Bounds @ pfn,
            "pfn {pfn:#x}: order {order} > max"
        );
        crate::ensure!(
            pfn % (1u64 << order) == 0,
            Bounds @ pfn,
            "pfn {pfn:#x}: not aligned to order {order}"
        );
        let end = pfn + (1u64 << order);
        crate::ensure!(
            end <= self.end_pfn(),
            Bounds @ pfn,
            "pfn {pfn:#x}: order {order} block leaves the span"
        );
        let i = (pfn - self.start) as usize;
        let inner = &self.frames[i + 1..i + (1usize << order)];
        crate::ensure!(
            inner.iter().all(|f| f.unpack() == Frame::Tail),
            Layout @ pfn,
            "pfn {pfn:#x}: order {order} block holds a hole or another head"
        );
        Ok(())
    }

    /// A free block: its type matches its pageblocks, and its buddy is not a
    /// free block it should have merged with.
    fn check_free_block(&self, pfn: u64, order: u8, mt: MigrateType) -> Result<(), CheckError> {
        let first = self.block_index(pfn);
        let last = self.block_index(pfn + (1u64 << order) - 1);
        crate::ensure!(
            self.blocks[first..=last].iter().all(|&t| t == mt),
            Structure @ pfn,
            "pfn {pfn:#x}: free on {mt:?} list inside a pageblock of another type"
        );
        if order < self.cfg.max_order {
            if let Some(bmt) = self.free_head(pfn ^ (1u64 << order), order) {
                let forbidden = bmt != mt && !(bmt.is_pcp() && mt.is_pcp());
                crate::ensure!(
                    forbidden,
                    Layout @ pfn,
                    "pfn {pfn:#x}: order {order} buddy is free but not merged"
                );
            }
        }
        Ok(())
    }

    /// Every list: links consistent, members are free heads of that list,
    /// and as many as the frames say.
    fn check_lists(&self, per_list: &[u64]) -> Result<(), CheckError> {
        for order in 0..=self.cfg.max_order {
            for mt in MigrateType::ALL {
                let li = self.list_index(order, mt);
                let list = &self.lists[li];
                self.links
                    .walk(list, |i| match self.frame(i as usize) {
                        Frame::Free { order: o, mt: t } if o == order && t == mt => Ok(()),
                        other => Err(alloc::format!("frame index {i} is {other:?}")),
                    })
                    .map_err(|e| {
                        let e = alloc::format!("list ({order}, {mt:?}): {e}");
                        CheckError::new(module_path!(), Invariant::Structure, None, e)
                    })?;
                crate::ensure!(
                    list.len == per_list[li],
                    Accounting @ order,
                    "list ({order}, {mt:?}) has {} blocks, frames say {}",
                    list.len,
                    per_list[li]
                );
            }
        }
        Ok(())
    }
}
