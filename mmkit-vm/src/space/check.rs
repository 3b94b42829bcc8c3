//! The checkers: the allocators against each other ([`Space::check`]) and
//! against the page tables, as `/proc/self/maps` shows them
//! ([`Space::check_mappings`]).

use mmkit_vmalloc::{Gone, Where};

use super::mmu::MemfdMmu;
use super::Space;
use crate::budget::PER_RUN;
use crate::sync::lock;
use crate::sys;

/// `n` pages mapped from `addr` showing frames `pfn..pfn + n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    addr: u64,
    pages: u64,
    pfn: u64,
}

/// Sorts `runs` and joins neighbours that continue each other in both
/// address and frame; fails when two overlap.
fn normalise(runs: &mut Vec<Run>, page: u64) -> Result<(), String> {
    runs.sort_unstable_by_key(|r| r.addr);
    let mut out: Vec<Run> = Vec::with_capacity(runs.len());
    for &r in runs.iter() {
        match out.last_mut() {
            Some(l) if l.addr + l.pages * page > r.addr => {
                return Err(format!("{:#x} is mapped twice", r.addr));
            }
            Some(l) if l.addr + l.pages * page == r.addr && l.pfn + l.pages == r.pfn => {
                l.pages += r.pages;
            }
            _ => out.push(r),
        }
    }
    *runs = out;
    Ok(())
}

impl Space {
    /// The runs that the page table says are mapped: live and cleared
    /// (areas, `vm_map_ram` mappings, lazy and stuck ranges).
    fn expected_runs(&self) -> Vec<Run> {
        lock(&self.table)
            .runs()
            .map(|(addr, pfn, pages)| Run { addr, pages, pfn })
            .collect()
    }

    /// Compares what is mapped inside the reservation, as the kernel says
    /// (`/proc/self/maps`), with what the records say: every page that maps
    /// our memory file must be a page of a live, lazy or stuck area or of a
    /// `vm_map_ram` block, read-write and shared, at the frame recorded;
    /// everything else must be reserved (`---p`). For tests: no other
    /// thread may use the `Vm` meanwhile.
    pub(crate) fn check_mappings(&self) -> Result<(), String> {
        let mut want = self.expected_runs();
        normalise(&mut want, self.page)?;
        let inode = self
            .phys
            .mem
            .inode()
            .map_err(|e| format!("fstat of the memfd: {e}"))?;
        let lines = sys::mappings().map_err(|e| format!("reading /proc/self/maps: {e}"))?;
        let (lo, hi) = (self.res.base(), self.res.base() + self.res.len());
        let mut have = Vec::new();
        for l in lines.iter().filter(|l| l.end > lo && l.start < hi) {
            let reserved = &l.perms == b"---p" && l.inode == 0;
            if reserved {
                continue;
            }
            let ours = &l.perms == b"rw-s" && l.inode == inode;
            if !ours || l.start < lo || l.end > hi {
                return Err(format!(
                    "unexplained mapping {:#x}-{:#x} {} inode {}",
                    l.start,
                    l.end,
                    String::from_utf8_lossy(&l.perms),
                    l.inode
                ));
            }
            let (addr, pages, pfn) = (l.start, (l.end - l.start) / self.page, l.offset / self.page);
            have.push(Run { addr, pages, pfn });
        }
        normalise(&mut have, self.page)?;
        if let Some(i) = (0..want.len().max(have.len())).find(|&i| want.get(i) != have.get(i)) {
            return Err(format!(
                "the kernel maps {:?} where the records say {:?} ({} runs mapped, {} recorded)",
                have.get(i),
                want.get(i),
                have.len(),
                want.len()
            ));
        }
        Ok(())
    }

    /// Checks that the driver's books (areas, blocks, lazy and stuck
    /// lists), the page table, the ranges recorded as cleared, the frames'
    /// map counts and the mapping budget agree. Returns the pages mapped
    /// live in `vm_map_ram` blocks, for the caller to compare with the
    /// front end.
    pub(crate) fn check(&self) -> Result<u64, String> {
        let st = self.state();
        let mmu = MemfdMmu::new(self);
        st.layer.check(&mmu).map_err(|e| format!("driver: {e}"))?;
        let table = lock(&self.table);
        let live = table.live.iter().flat_map(|(&va, &(pfn, n))| {
            (0..n).map(move |i| (va + i * mmkit_vmalloc::PAGE, pfn + i))
        });
        let in_blocks = st
            .layer
            .check_walk(live)
            .map_err(|e| format!("driver: {e}"))?;
        let (mut maps, mut runs) = (0, 0);
        for (_, _, pages) in table.runs() {
            maps += pages;
            runs += 1;
        }
        for (a, area) in st.layer.areas() {
            match st.meta.get(&a) {
                Some(m)
                    if m.len.div_ceil(self.page) * (1 + u64::from(m.mirror))
                        <= area.frames.len() as u64 => {}
                Some(_) => return Err(format!("area {a:#x} maps fewer pages than its length")),
                None => return Err(format!("area {a:#x} has no length recorded")),
            }
        }
        if st.meta.len() != st.layer.live_areas() {
            return Err(format!(
                "{} lengths recorded for {} live areas",
                st.meta.len(),
                st.layer.live_areas()
            ));
        }
        // Every area retired is cleared as one range; every other range
        // cleared is `vm_map_ram` pages, in a live or retired block.
        let mut areas: Vec<(u64, u64)> = Vec::new();
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for (r, _) in st.layer.retired() {
            let span = (r.start, r.start + r.span);
            match r.what {
                Gone::Block => blocks.push(span),
                _ => areas.push(span),
            }
        }
        areas.sort_unstable();
        let mut cleared = table.cleared.clone();
        cleared.sort_unstable();
        let mut in_areas = Vec::with_capacity(areas.len());
        let live: Vec<_> = st.layer.areas().collect();
        for c in cleared {
            if areas.binary_search(&c).is_ok() {
                in_areas.push(c);
                continue;
            }
            let in_block = matches!(st.layer.lookup_in(&live, c.0), Where::Block { start }
                    if c.1 <= start + st.layer.block_size(start).unwrap_or(0))
                || blocks.iter().any(|&(s, e)| s <= c.0 && c.1 <= e);
            if !in_block {
                return Err(format!(
                    "{:#x}-{:#x} is cleared, neither a retired area nor in a block",
                    c.0, c.1
                ));
            }
        }
        in_areas.dedup();
        if in_areas.len() != areas.len() {
            return Err(format!(
                "{} areas lazy or stuck, {} of them recorded as cleared",
                areas.len(),
                in_areas.len()
            ));
        }
        let counted = self.phys.total_mapcount();
        if counted != maps {
            return Err(format!(
                "frames are mapped {counted} times, the page table says {maps}"
            ));
        }
        if self.budget.used() != runs * PER_RUN {
            return Err(format!(
                "the budget has {} mappings charged for {runs} runs",
                self.budget.used()
            ));
        }
        self.phys.check()?;
        Ok(in_blocks)
    }
}
