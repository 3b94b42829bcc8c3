// The kernel's per-CPU page lists as plain data: `PcpModel`, included by
// `tests/buddy_pcp_model.rs` after `models/buddy_kernel.rs`, whose `Kernel`
// is the zone below the lists. A module of its own, so that its imports
// never clash with the includer's.

pub use pcp_model::{Events, PcpModel};

mod pcp_model {
    use std::collections::{BTreeMap, VecDeque};

    use mmkit::buddy::MigrateType;
    use mmkit::{AllocError, FreeError};

    use super::Kernel;

    /// `PAGE_ALLOC_COSTLY_ORDER`: every order up to it has lists.
    const COSTLY_ORDER: u8 = 3;
    /// The lists of the pageblock order start here (`NR_LOWORDER_PCP_LISTS`).
    const LOWORDER_LISTS: usize = 3 * (COSTLY_ORDER as usize + 1);
    /// `NR_PCP_LISTS`: three types (`MIGRATE_PCPTYPES`) at orders 0..=3
    /// and three at the pageblock order.
    const NR_LISTS: usize = LOWORDER_LISTS + 3;

    /// `order_to_pindex`: the list of `(order, mt)`, `3 × order + type` below
    /// the costly order, then the pageblock order's three; `None` for the
    /// orders `pcp_allowed_order` refuses and for HighAtomic, which has no
    /// list (`MIGRATE_HIGHATOMIC == MIGRATE_PCPTYPES`). When the pageblock
    /// order is itself at most 3 it is one of the small orders.
    fn pindex(order: u8, mt: MigrateType, pb: u8) -> Option<usize> {
        let t = match mt {
            MigrateType::Unmovable => 0,
            MigrateType::Movable => 1,
            MigrateType::Reclaimable => 2,
            MigrateType::HighAtomic => return None,
        };
        if order <= COSTLY_ORDER {
            Some(3 * usize::from(order) + t)
        } else if order == pb {
            Some(LOWORDER_LISTS + t)
        } else {
            None
        }
    }

    /// `pindex_to_order`.
    fn order_of(pindex: usize, pb: u8) -> u8 {
        if pindex < LOWORDER_LISTS {
            (pindex / 3) as u8
        } else {
            pb
        }
    }

    /// How often each path was taken, summed over a run: the test asserts
    /// that its runs reach every one.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Events {
        /// Allocations served from a non-empty list.
        pub hits: u64,
        /// Refills (`rmqueue_bulk`).
        pub refills: u64,
        /// Refills that got fewer blocks than asked, at least one.
        pub short_refills: u64,
        /// Refills that got nothing (the zone had no block).
        pub empty_refills: u64,
        /// Allocations served by the pageblock order's lists.
        pub pageblock_hits: u64,
        /// Allocations and frees without a list.
        pub direct: u64,
        /// Frees that pushed a CPU above `high`.
        pub high_drains: u64,
        /// High-water drains that took from two lists or more.
        pub multi_list_drains: u64,
        /// High-water drains that went past the last list to the first.
        pub wrapped_drains: u64,
        /// Drains of a CPU's every page (`drain`, `drain_all`).
        pub full_drains: u64,
        /// Allocations that the last-resort `drain_all` saved.
        pub rescued: u64,
        /// Allocations that failed even then.
        pub failed: u64,
        /// Steps after which the zone had a free block of every order.
        pub every_order: u64,
        /// The same in zones of the kernel's orders (10, pageblocks of 2^9).
        pub every_order_big: u64,
    }

    impl Events {
        /// Adds `o`'s counts to these.
        pub fn add(&mut self, o: &Events) {
            self.hits += o.hits;
            self.refills += o.refills;
            self.short_refills += o.short_refills;
            self.empty_refills += o.empty_refills;
            self.pageblock_hits += o.pageblock_hits;
            self.direct += o.direct;
            self.high_drains += o.high_drains;
            self.multi_list_drains += o.multi_list_drains;
            self.wrapped_drains += o.wrapped_drains;
            self.full_drains += o.full_drains;
            self.rescued += o.rescued;
            self.failed += o.failed;
            self.every_order += o.every_order;
            self.every_order_big += o.every_order_big;
        }
    }

    /// One CPU's `per_cpu_pages`.
    #[derive(Debug, Clone)]
    pub struct Cpu {
        /// The lists by pindex, as the kernel's `list_head`s: the head is
        /// the hottest page (a free is `list_add`ed there and an allocation
        /// takes `list_first_entry`), the tail the coldest (a refill is
        /// `list_add_tail`ed there, a drain takes `list_last_entry`).
        lists: Vec<VecDeque<u64>>,
        /// `pcp->count`: pages on the lists.
        pub count: u64,
        pub refills: u64,
        pub drains: u64,
        pub direct: u64,
    }

    /// The per-CPU lists in front of the kernel's zone, stated from
    /// `mm/page_alloc.c` with the sizes `PcpConfig` gives and sharing no
    /// code with `mmkit::buddy::pcp`:
    /// - allocation (`rmqueue_pcplist`): an order with a list takes its
    ///   head; an empty list is first refilled by `rmqueue_bulk` with
    ///   `max(batch >> order, 2)` blocks, taken from the zone one at a time
    ///   until it has none and added at the tail, so the first taken is
    ///   handed out first. Other orders and HighAtomic go to the zone;
    /// - when that finds nothing, every CPU is drained
    ///   (`__alloc_pages_direct_reclaim`'s `drain_all_pages`) and the zone
    ///   asked once more;
    /// - free (`free_unref_page_commit`): an order with a list adds the
    ///   block at the head of the list of the type it was allocated as;
    ///   others and HighAtomic go to the zone. A CPU then above `high`
    ///   gives back its coldest pages, `free_pcppages_bulk` from the list
    ///   just freed to, down to `high - batch` (0 when `high < batch`);
    /// - `drain` and `drain_all` give back every page, list 0 first.
    ///
    /// Where `mmkit`'s documented rules differ from the kernel's, the model
    /// states `mmkit`'s (its module docs) and this list the kernel's:
    /// - refill: the kernel asks for one block when `batch` is 1 (`if
    ///   (batch > 1) batch = max(batch >> order, 2)`; later kernels'
    ///   `nr_pcp_alloc` also when `high < batch`); `mmkit` for two;
    /// - high water: the kernel drains once `count >= high`, `mmkit` once
    ///   `count > high`; the kernel frees `nr_pcp_free` pages (1 when
    ///   `high < batch`, else `batch` scaled by `free_factor` and clamped
    ///   to `[batch, high - batch]`; 5.13 and before: `batch`), `mmkit` as
    ///   many as bring the CPU down to `high - batch`;
    /// - the pageblock order has one list in the kernel (two in later
    ///   kernels: Movable and the others) where `mmkit` has one per type;
    /// - a page of a HighAtomic pageblock goes on the Movable list in the
    ///   kernel (its pageblock's type is read at free time); in `mmkit` a
    ///   block keeps the type it was allocated as, and HighAtomic has no list.
    #[derive(Debug, Clone)]
    pub struct PcpModel {
        /// The zone below the lists.
        pub kern: Kernel,
        batch: u64,
        high: u64,
        pub cpus: Vec<Cpu>,
        /// Blocks in the caller's hands: pfn -> (order, type).
        pub held: BTreeMap<u64, (u8, MigrateType)>,
        pub ev: Events,
    }

    impl PcpModel {
        /// Lists for `cpus` CPUs, all empty, in front of `kern`.
        pub fn new(kern: Kernel, cpus: usize, batch: u32, high: u32) -> Self {
            let cpu = Cpu {
                lists: vec![VecDeque::new(); NR_LISTS],
                count: 0,
                refills: 0,
                drains: 0,
                direct: 0,
            };
            PcpModel {
                kern,
                batch: batch.into(),
                high: high.into(),
                cpus: vec![cpu; cpus],
                held: BTreeMap::new(),
                ev: Events::default(),
            }
        }

        /// `cpu`'s list of `(order, mt)`, head (next handed out) first;
        /// empty when there is no such list.
        pub fn list(&self, cpu: usize, order: u8, mt: MigrateType) -> Vec<u64> {
            match (self.cpus.get(cpu), pindex(order, mt, self.kern.pb)) {
                (Some(c), Some(p)) => c.lists[p].iter().copied().collect(),
                _ => Vec::new(),
            }
        }

        /// Every page on a list, with the CPU and the order.
        pub fn listed(&self) -> Vec<(usize, u64, u8)> {
            let pb = self.kern.pb;
            let mut out = Vec::new();
            for (cpu, c) in self.cpus.iter().enumerate() {
                for (p, l) in c.lists.iter().enumerate() {
                    out.extend(l.iter().map(|&pfn| (cpu, pfn, order_of(p, pb))));
                }
            }
            out
        }

        /// The block an allocation of `(order, mt)` on `cpu` gets.
        pub fn alloc(&mut self, cpu: usize, order: u8, mt: MigrateType) -> Result<u64, AllocError> {
            if cpu >= self.cpus.len() || order > self.kern.max_order {
                return Err(AllocError::Invalid);
            }
            let got = match pindex(order, mt, self.kern.pb) {
                Some(p) => self.rmqueue_pcplist(cpu, p, order, mt),
                None => {
                    self.cpus[cpu].direct += 1;
                    self.ev.direct += 1;
                    self.kern.alloc(order, mt).ok()
                }
            };
            let pfn = match got {
                Some(pfn) => pfn,
                None => {
                    self.drain_all();
                    match self.kern.alloc(order, mt) {
                        Ok(pfn) => {
                            self.ev.rescued += 1;
                            pfn
                        }
                        Err(e) => {
                            self.ev.failed += 1;
                            return Err(e);
                        }
                    }
                }
            };
            self.held.insert(pfn, (order, mt));
            Ok(pfn)
        }

        /// `__rmqueue_pcplist` with `rmqueue_bulk` for an empty list.
        fn rmqueue_pcplist(&mut self, cpu: usize, p: usize, order: u8, mt: MigrateType) -> Option<u64> {
            let c = &mut self.cpus[cpu];
            if c.lists[p].is_empty() {
                let want = (self.batch >> order).max(2);
                let mut got = 0u64;
                while got < want {
                    let Ok(pfn) = self.kern.alloc(order, mt) else {
                        break;
                    };
                    c.lists[p].push_back(pfn);
                    got += 1;
                }
                c.count += got << order;
                c.refills += 1;
                self.ev.refills += 1;
                match got {
                    0 => self.ev.empty_refills += 1,
                    g if g < want => self.ev.short_refills += 1,
                    _ => {}
                }
            } else {
                self.ev.hits += 1;
            }
            let pfn = c.lists[p].pop_front()?;
            c.count -= 1 << order;
            if p >= LOWORDER_LISTS {
                self.ev.pageblock_hits += 1;
            }
            Some(pfn)
        }

        /// The answer to a free of `(pfn, order)` on `cpu`.
        pub fn free(&mut self, cpu: usize, pfn: u64, order: u8) -> Result<(), FreeError> {
            let k = &self.kern;
            if order > k.max_order || cpu >= self.cpus.len() || !(k.start..k.end).contains(&pfn) {
                return Err(FreeError::Invalid);
            }
            let mt = match self.held.get(&pfn) {
                Some(&(o, mt)) if o == order => mt,
                _ => return Err(FreeError::NotAllocated),
            };
            self.held.remove(&pfn);
            let Some(p) = pindex(order, mt, self.kern.pb) else {
                self.cpus[cpu].direct += 1;
                self.ev.direct += 1;
                self.kern.free(pfn, order).expect("a block the zone handed out");
                return Ok(());
            };
            let c = &mut self.cpus[cpu];
            c.lists[p].push_front(pfn);
            c.count += 1 << order;
            if c.count > self.high {
                let keep = self.high.saturating_sub(self.batch);
                let n = c.count - keep;
                self.ev.high_drains += 1;
                let lists = self.free_pcppages_bulk(cpu, n, p);
                if lists.len() > 1 {
                    self.ev.multi_list_drains += 1;
                }
                if lists.windows(2).any(|w| w[1] < w[0]) {
                    self.ev.wrapped_drains += 1;
                }
            }
            Ok(())
        }

        /// `free_pcppages_bulk`: `n` pages back to the zone, from list
        /// `pindex` on round the lists in index order (past the last to the
        /// first), each from its tail while pages remain to be freed; a
        /// block counts whole, so the last may overshoot `n`. Returns the
        /// lists taken from, in order.
        fn free_pcppages_bulk(&mut self, cpu: usize, n: u64, pindex: usize) -> Vec<usize> {
            let pb = self.kern.pb;
            let c = &mut self.cpus[cpu];
            let mut left = n.min(c.count) as i64;
            let mut p = (pindex + NR_LISTS - 1) % NR_LISTS;
            let mut taken = Vec::new();
            while left > 0 {
                p = (p + 1) % NR_LISTS;
                if c.lists[p].is_empty() {
                    continue;
                }
                taken.push(p);
                let order = order_of(p, pb);
                while left > 0 {
                    let Some(pfn) = c.lists[p].pop_back() else {
                        break;
                    };
                    left -= 1 << order;
                    c.count -= 1 << order;
                    self.kern.free(pfn, order).expect("a pcp block is allocated");
                }
            }
            c.drains += 1;
            taken
        }

        /// `drain_pages_zone`: every page of `cpu` back, list 0 first; a
        /// CPU without pages is passed over (no drain counted).
        pub fn drain(&mut self, cpu: usize) -> Result<(), FreeError> {
            let count = self.cpus.get(cpu).ok_or(FreeError::Invalid)?.count;
            if count > 0 {
                self.ev.full_drains += 1;
                self.free_pcppages_bulk(cpu, count, 0);
            }
            Ok(())
        }

        /// `drain_all_pages`: every CPU in turn.
        pub fn drain_all(&mut self) {
            for cpu in 0..self.cpus.len() {
                let _ = self.drain(cpu);
            }
        }
    }
}
