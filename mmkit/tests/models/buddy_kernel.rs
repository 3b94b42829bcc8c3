// The kernel's buddy choices as plain data: `Kernel`, included (by
// `include!`, never copied) by `models/buddy.rs` and by
// `tests/buddy_pcp_model.rs`, whose zone below the per-CPU lists it is.
// A module of its own, so that its imports never clash with the includer's.

pub use buddy_kernel::Kernel;

mod buddy_kernel {
    use std::collections::{BTreeMap, VecDeque};

    use mmkit::buddy::{BuddyAllocator, MigrateType, Placement};
    use mmkit::{AllocError, FreeError};

    /// What the kernel's buddy allocator chooses, stated step by step over plain
    /// data (a map of free heads, a `VecDeque` per list, a type per pageblock),
    /// written from `mm/page_alloc.c`'s rules and sharing no code with
    /// `mmkit::buddy`: the block `alloc` returns (the smallest order with a
    /// free block of the type, that list's head; else a claim from the largest
    /// fallback order down, else a steal from the smallest up), the halves
    /// `expand` puts back, the buddy `free` merges with, and whether the merged
    /// block goes to the head or the tail of its list. The allocator's every
    /// list must hold the same blocks in the same order.
    #[derive(Debug, Clone)]
    pub struct Kernel {
        pub max_order: u8,
        pub pb: u8,
        pub start: u64,
        pub end: u64,
        pub tail_if_merge_likely: bool,
        pub present: Vec<bool>,
        /// Free heads: pfn -> (order, type).
        pub free: BTreeMap<u64, (u8, MigrateType)>,
        /// Allocated heads: pfn -> (order, the request's type).
        pub used: BTreeMap<u64, (u8, MigrateType)>,
        /// Free lists by (order, type): head first.
        pub lists: BTreeMap<(u8, MigrateType), VecDeque<u64>>,
        /// The type of each pageblock, from the span's first.
        pub blocks: Vec<MigrateType>,
    }

    /// The kernel's `fallbacks[]` table, written out here.
    fn kernel_fallbacks(mt: MigrateType) -> &'static [MigrateType] {
        use MigrateType::*;
        match mt {
            Unmovable => &[Reclaimable, Movable],
            Movable => &[Reclaimable, Unmovable],
            Reclaimable => &[Unmovable, Movable],
            HighAtomic => &[],
        }
    }

    impl Kernel {
        /// A zone of `[start, end)` with nothing present, every pageblock
        /// Movable (as at boot).
        pub fn new(max_order: u8, pb: u8, start: u64, end: u64, placement: Placement) -> Self {
            let nblocks = ((end - 1) >> pb) - (start >> pb) + 1;
            Kernel {
                max_order,
                pb,
                start,
                end,
                tail_if_merge_likely: placement == Placement::TailIfMergeLikely,
                present: vec![false; (end - start) as usize],
                free: BTreeMap::new(),
                used: BTreeMap::new(),
                lists: BTreeMap::new(),
                blocks: vec![MigrateType::Movable; nblocks as usize],
            }
        }

        fn block_of(&self, pfn: u64) -> usize {
            ((pfn >> self.pb) - (self.start >> self.pb)) as usize
        }

        fn list(&mut self, order: u8, mt: MigrateType) -> &mut VecDeque<u64> {
            self.lists.entry((order, mt)).or_default()
        }

        fn has(&self, order: u8, mt: MigrateType) -> bool {
            self.lists.get(&(order, mt)).is_some_and(|l| !l.is_empty())
        }

        fn link(&mut self, pfn: u64, order: u8, mt: MigrateType, tail: bool) {
            self.free.insert(pfn, (order, mt));
            let l = self.list(order, mt);
            if tail {
                l.push_back(pfn);
            } else {
                l.push_front(pfn);
            }
        }

        fn unlink(&mut self, pfn: u64) -> (u8, MigrateType) {
            let (order, mt) = self.free.remove(&pfn).expect("a free head");
            let l = self.list(order, mt);
            let at = l.iter().position(|&p| p == pfn).expect("listed");
            l.remove(at);
            (order, mt)
        }

        fn retag(&mut self, pfn: u64, order: u8, mt: MigrateType) {
            let (a, b) = (self.block_of(pfn), self.block_of(pfn + (1 << order) - 1));
            for t in &mut self.blocks[a..=b] {
                *t = mt;
            }
        }

        /// `expand`: the upper halves, largest first, to the list heads.
        fn expand(&mut self, pfn: u64, low: u8, high: u8, mt: MigrateType) {
            for o in (low..high).rev() {
                self.link(pfn + (1 << o), o, mt, false);
            }
        }

        /// `__free_one_page`: merge while the buddy is a free head of the same
        /// order (not across a HighAtomic pageblock and another type), then
        /// the tail of the list when the merged block's own buddy's parent is
        /// free (merge likely, never at the top two orders), else the head.
        fn free_one(&mut self, mut pfn: u64, mut order: u8, mt: MigrateType) {
            while order < self.max_order {
                let buddy = pfn ^ (1 << order);
                match self.free.get(&buddy) {
                    Some(&(o, bmt))
                        if o == order
                            && (bmt == mt
                                || (bmt != MigrateType::HighAtomic
                                    && mt != MigrateType::HighAtomic)) =>
                    {
                        self.unlink(buddy);
                        if bmt != mt {
                            self.retag(buddy, order, mt);
                        }
                        pfn = pfn.min(buddy);
                        order += 1;
                    }
                    _ => break,
                }
            }
            let likely = self.tail_if_merge_likely && order + 1 < self.max_order && {
                let parent_buddy = (pfn & !(1 << order)) ^ (1 << (order + 1));
                matches!(self.free.get(&parent_buddy), Some(&(o, _)) if o == order + 1)
            };
            self.link(pfn, order, mt, likely);
        }

        pub fn add_free_range(&mut self, pfn: u64, count: u64) -> Result<(), FreeError> {
            let end = pfn.checked_add(count).ok_or(FreeError::Invalid)?;
            if count == 0 || pfn < self.start || end > self.end {
                return Err(FreeError::Invalid);
            }
            let (a, b) = ((pfn - self.start) as usize, (end - self.start) as usize);
            if self.present[a..b].iter().any(|&p| p) {
                return Err(FreeError::Invalid);
            }
            self.present[a..b].iter_mut().for_each(|p| *p = true);
            let mut p = pfn;
            while p < end {
                // The largest aligned block at p, at most a pageblock, inside.
                let mut o = 0;
                while o < self.pb && p % (2 << o) == 0 && p + (2 << o) <= end {
                    o += 1;
                }
                let mt = self.blocks[self.block_of(p)];
                self.free_one(p, o, mt);
                p += 1 << o;
            }
            Ok(())
        }

        pub fn alloc(&mut self, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
            if order > self.max_order {
                return Err(AllocError::Invalid);
            }
            let pfn = self
                .smallest(order, mt)
                .or_else(|| (mt != MigrateType::HighAtomic).then(|| self.claim(order, mt)).flatten())
                .or_else(|| (mt != MigrateType::HighAtomic).then(|| self.steal(order, mt)).flatten())
                .ok_or(AllocError::NoSpace)?;
            self.used.insert(pfn, (order, mt));
            Ok(pfn)
        }

        /// `__rmqueue_smallest`.
        fn smallest(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
            let o = (order..=self.max_order).find(|&o| self.has(o, mt))?;
            let pfn = *self.list(o, mt).front().unwrap();
            self.unlink(pfn);
            self.expand(pfn, order, o, mt);
            Some(pfn)
        }

        /// The claim half of `__rmqueue_fallback`: from the largest order
        /// down while the kernel's `should_try_claim_block` allows.
        fn claim(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
            let pb = self.pb;
            for o in (order..=self.max_order).rev() {
                let may = o >= pb
                    || o >= pb / 2
                    || matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable);
                if !may {
                    break;
                }
                let Some(&ft) = kernel_fallbacks(mt).iter().find(|&&f| self.has(o, f)) else {
                    continue;
                };
                let pfn = *self.list(o, ft).front().unwrap();
                if o >= pb {
                    self.unlink(pfn);
                    self.retag(pfn, o, mt);
                    self.expand(pfn, order, o, mt);
                    return Some(pfn);
                }
                let bs = pfn & !((1 << pb) - 1);
                let pages = 1u64 << pb;
                if bs < self.start || bs + pages > self.end {
                    continue; // a pageblock across the zone's edge is not moved
                }
                let free: u64 = self.free.range(bs..bs + pages).map(|(_, &(o, _))| 1u64 << o).sum();
                let movable: u64 = self
                    .used
                    .range(bs..bs + pages)
                    .filter(|(_, &(_, t))| t == MigrateType::Movable)
                    .map(|(_, &(o, _))| 1u64 << o)
                    .sum();
                let alike = if mt == MigrateType::Movable {
                    movable
                } else if ft == MigrateType::Movable {
                    pages.saturating_sub(free + movable)
                } else {
                    0
                };
                if free + alike < pages / 2 {
                    continue;
                }
                self.move_block(bs, mt);
                return self.smallest(order, mt);
            }
            None
        }

        /// The steal half: the smallest order with a fallback block, split;
        /// its halves and the pageblock keep their type.
        fn steal(&mut self, order: u8, mt: MigrateType) -> Option<u64> {
            for o in order..=self.max_order {
                let Some(&ft) = kernel_fallbacks(mt).iter().find(|&&f| self.has(o, f)) else {
                    continue;
                };
                let pfn = *self.list(o, ft).front().unwrap();
                self.unlink(pfn);
                self.expand(pfn, order, o, ft);
                return Some(pfn);
            }
            None
        }

        /// `move_freepages_block`: the pageblock takes `mt`, and its free blocks
        /// move, in address order, to the tails of the `mt` lists.
        fn move_block(&mut self, bs: u64, mt: MigrateType) {
            let bi = self.block_of(bs);
            self.blocks[bi] = mt;
            let heads: Vec<u64> = self
                .free
                .range(bs.max(self.start)..bs + (1 << self.pb))
                .map(|(&p, _)| p)
                .collect();
            for p in heads {
                let (o, _) = self.unlink(p);
                self.link(p, o, mt, true);
            }
        }

        pub fn free(&mut self, pfn: u64, order: u8) -> Result<(), FreeError> {
            if order > self.max_order || pfn < self.start || pfn >= self.end {
                return Err(FreeError::Invalid);
            }
            match self.used.get(&pfn) {
                Some(&(o, _)) if o == order => {}
                _ => return Err(FreeError::NotAllocated),
            }
            self.used.remove(&pfn);
            // Larger than a pageblock: a pageblock at a time, each of its type.
            let chunk = order.min(self.pb);
            for k in 0..1u64 << (order - chunk) {
                let p = pfn + (k << chunk);
                let mt = self.blocks[self.block_of(p)];
                self.free_one(p, chunk, mt);
            }
            Ok(())
        }

        pub fn set_type(&mut self, pfn: u64, mt: MigrateType) -> Result<(), AllocError> {
            if pfn < self.start || pfn >= self.end {
                return Err(AllocError::Invalid);
            }
            let pb = self.pb;
            let covering = (pb..=self.max_order).find_map(|o| {
                let head = pfn & !((1 << o) - 1);
                matches!(self.free.get(&head), Some(&(ho, _)) if ho == o).then_some(head)
            });
            match covering {
                Some(mut head) => {
                    // Split down to the pageblock: the other halves to the heads.
                    let (mut order, old) = self.unlink(head);
                    while order > pb {
                        order -= 1;
                        let upper = head + (1 << order);
                        if pfn >= upper {
                            self.link(head, order, old, false);
                            head = upper;
                        } else {
                            self.link(upper, order, old, false);
                        }
                    }
                    self.retag(head, pb, mt);
                    self.free_one(head, pb, mt);
                }
                None => self.move_block(pfn & !((1 << pb) - 1), mt),
            }
            Ok(())
        }

        /// The first difference between the allocator's lists and pageblock
        /// types and the kernel's, if any.
        pub fn differs(&self, b: &BuddyAllocator) -> Option<String> {
            for o in 0..=self.max_order {
                for mt in MigrateType::ALL {
                    let got: Vec<u64> = b.free_list(o, mt).collect();
                    let want: Vec<u64> = self
                        .lists
                        .get(&(o, mt))
                        .map_or_else(Vec::new, |l| l.iter().copied().collect());
                    if got != want {
                        return Some(format!("list ({o}, {mt:?}): {got:?}, kernel {want:?}"));
                    }
                }
            }
            let mut p = self.start & !((1 << self.pb) - 1);
            while p < self.end {
                let at = p.max(self.start);
                let want = self.blocks[self.block_of(at)];
                if b.pageblock_migratetype(at) != Some(want) {
                    return Some(format!("pageblock of {at:#x}: {:?}, kernel {want:?}", b.pageblock_migratetype(at)));
                }
                p += 1 << self.pb;
            }
            None
        }
    }
}
