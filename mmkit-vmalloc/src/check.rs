//! The layer's checkers: its books against the range allocator
//! ([`Vmalloc::check_books`]), against the MMU's translations
//! ([`Vmalloc::check`]) and against a walk of the page tables
//! ([`Vmalloc::check_walk`]).

use alloc::format;
use alloc::string::String;

use mmkit::range::RangeAllocator;

use super::lazy::Gone;
use super::maps::{AreaData, Vmalloc, Where};
use super::{Mmu, PAGE};

impl<R: RangeAllocator, A: AreaData> Vmalloc<R, A> {
    /// Checks the range allocator, and that every range it holds live or
    /// detached is a live area (or one of its pieces), a reserved range, a
    /// raw block, a freed range on the lazy or stuck list, or a pooled
    /// one; and that the lazy bytes add up.
    ///
    /// # Errors
    /// A description of the first disagreement.
    pub fn check_books(&self) -> Result<(), String> {
        self.range
            .check()
            .map_err(|e| format!("range allocator: {e}"))?;
        let pieces = |a: &A| 1 + a.pieces().len() as u64;
        let mut ours = self.blocks.len() as u64 + self.reserved.len() as u64;
        ours += self.pools.len() as u64;
        ours += self.areas.iter().map(|(_, a)| pieces(a)).sum::<u64>();
        for (r, _) in self.retired() {
            ours += match &r.what {
                Gone::Area(a) => pieces(a),
                Gone::Block => 1,
            };
        }
        // Retired ranges are live there, or detached.
        let st = self.range.stats();
        let held = st.live_areas + st.detached_areas;
        if held != ours {
            return Err(format!(
                "{} live and {} detached ranges; areas, blocks, lazy and stuck make {ours}",
                st.live_areas, st.detached_areas
            ));
        }
        self.retiring
            .check()
            .map_err(|e| format!("lazy list: {e}"))?;
        if let Some((s, _)) = (self.pools.iter()).find(|(s, _)| self.areas.contains(*s)) {
            return Err(format!("pooled range {s:#x} is a live area"));
        }
        for (s, a) in self.areas.iter() {
            if a.mapped_pages() * PAGE >= a.span() {
                return Err(format!("area {s:#x}: no guard page in its span"));
            }
        }
        Ok(())
    }

    /// [`check_books`](Self::check_books), and that every live area maps
    /// exactly its frames and its guard page is unmapped.
    ///
    /// # Errors
    /// A description of the first disagreement.
    pub fn check(&self, mmu: &impl Mmu) -> Result<(), String> {
        self.check_books()?;
        for (s, a) in self.areas.iter() {
            let mut off = 0;
            while off < a.span() {
                let (va, want) = (s + off, a.frame_at(off));
                if mmu.translate(va) != want {
                    return Err(format!(
                        "{va:#x} maps {:?}, the area says {want:?}",
                        mmu.translate(va)
                    ));
                }
                off += PAGE;
            }
        }
        Ok(())
    }

    /// Checks a walk of the page tables against the layer: every present
    /// `(va, pfn)` is a page of a live area mapping that frame, or a page
    /// of a raw block (counted in the result: the caller compares it with
    /// the `vm_map_ram` mappings it knows).
    ///
    /// # Errors
    /// The first PTE no live area or block explains.
    pub fn check_walk(&self, present: impl Iterator<Item = (u64, u64)>) -> Result<u64, String> {
        let mut in_blocks = 0;
        let mut in_areas = 0;
        let sorted = self.areas.sorted();
        for (va, pfn) in present {
            match self.lookup_in(&sorted, va) {
                Where::Mapped { pfn: p, .. } if p == pfn => in_areas += 1,
                Where::Block { .. } => in_blocks += 1,
                w => {
                    return Err(format!(
                        "PTE {va:#x} -> frame {pfn:#x} is mapped, but the layer says {w:?}"
                    ))
                }
            }
        }
        let want: u64 = self.areas.iter().map(|(_, a)| a.mapped_pages()).sum();
        if in_areas != want {
            return Err(format!("{in_areas} area pages mapped, {want} expected"));
        }
        Ok(in_blocks)
    }
}
