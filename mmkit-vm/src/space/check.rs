//! The checkers: the allocators against each other ([`Space::check`]) and
//! against the page tables, as `/proc/self/maps` shows them
//! ([`Space::check_mappings`]).

use mmkit_vmalloc::Gone;

use super::{Area, Space, State};
use crate::budget::PER_RUN;
use crate::phys::Block;
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
    /// The runs that the records say are mapped: live areas, lazy and
    /// stuck areas, and the pages of `vm_map_ram` blocks.
    fn expected_runs(&self, st: &State) -> Vec<Run> {
        let mut runs = Vec::new();
        let mut put = |mut addr: u64, frames: &[Block], copies: u64| {
            for _ in 0..copies {
                for b in frames {
                    let (pfn, pages) = (b.pfn, b.pages());
                    runs.push(Run { addr, pages, pfn });
                    addr += pages * self.page;
                }
            }
        };
        for (a, area) in st.layer.areas() {
            put(a, &area.frames, area.maps_per_frame());
        }
        for (r, _) in st.layer.retired() {
            if let Gone::Area(area) = &r.what {
                put(r.start, &area.frames, area.maps_per_frame());
            }
        }
        self.records.each_mapped(|addr, pfn| {
            runs.push(Run {
                addr,
                pages: 1,
                pfn,
            })
        });
        runs
    }

    /// Compares what is mapped inside the reservation, as the kernel says
    /// (`/proc/self/maps`), with what the records say: every page that maps
    /// our memory file must be a page of a live, lazy or stuck area or of a
    /// `vm_map_ram` block, read-write and shared, at the frame recorded;
    /// everything else must be reserved (`---p`). For tests: no other
    /// thread may use the `Vm` meanwhile.
    pub(crate) fn check_mappings(&self) -> Result<(), String> {
        let _no_purge = lock(&self.purge_lock);
        let st = lock(&self.state);
        let mut want = self.expected_runs(&st);
        drop(st);
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

    /// Checks that the vmap allocator, the areas, the lazy and stuck lists
    /// (the layer's own check), the ranges recorded as cleared, the blocks,
    /// the frames' map counts and the mapping budget agree. `record_maps`
    /// is the mappings the block records hold.
    pub(crate) fn check(&self, record_maps: u64) -> Result<(), String> {
        let _no_purge = lock(&self.purge_lock);
        let st = self.state();
        st.layer.check_books().map_err(|e| format!("vmap: {e}"))?;
        let mut maps = record_maps;
        let mut runs = self.records.runs();
        for (a, area) in st.layer.areas() {
            if st.layer.range().area_size(a).is_none() {
                return Err(format!("area {a:#x} not allocated in vmap"));
            }
            check_area(a, area, self.page)?;
            maps += area.pages * area.maps_per_frame();
            runs += area.runs;
        }
        let mut retired = Vec::new();
        for (r, _) in st.layer.retired() {
            retired.push((r.start, r.start + r.span));
            if let Gone::Area(area) = &r.what {
                maps += area.pages * area.maps_per_frame();
                runs += area.runs;
            }
        }
        retired.sort_unstable();
        let mut cleared = st.cleared.clone();
        cleared.sort_unstable();
        if retired != cleared {
            return Err(format!(
                "{} ranges lazy or stuck, {} recorded as cleared",
                retired.len(),
                cleared.len()
            ));
        }
        let counted = self.phys.total_mapcount();
        if counted != maps {
            return Err(format!(
                "frames are mapped {counted} times, the areas say {maps}"
            ));
        }
        if self.budget.used() != runs * PER_RUN {
            return Err(format!(
                "the budget has {} mappings charged for {runs} runs",
                self.budget.used()
            ));
        }
        self.phys.check()
    }
}

/// An area's frames cover its pages, and its span holds them and a guard.
fn check_area(a: u64, area: &Area, page: u64) -> Result<(), String> {
    let frames: u64 = area.frames.iter().map(|b| b.pages()).sum();
    if frames != area.pages {
        return Err(format!(
            "area {a:#x}: {frames} frames for {} pages",
            area.pages
        ));
    }
    if (area.pages * area.maps_per_frame() + 1) * page > area.span {
        return Err(format!("area {a:#x}: no guard page in its span"));
    }
    Ok(())
}
