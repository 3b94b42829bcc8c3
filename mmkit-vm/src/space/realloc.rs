//! `vrealloc`: an area grows in place when the range after it is free
//! (the new range is a *piece* of the area, freed with it), or its frames
//! are mapped into a new area and the old mapping retired like a freed
//! area. Nothing is copied either way.

use std::sync::atomic::Ordering;

use super::{is_map_refusal, Area, Space};
use crate::error::VmError;
use crate::phys::Block;

impl Space {
    /// Grows or shrinks the area at `addr` to `len` bytes without copying:
    /// in place when the range after it is free, otherwise by mapping its
    /// frames into a new area. Returns the (possibly new) address. A
    /// refused mapping purges and retries.
    pub(crate) fn realloc(&self, addr: u64, len: u64, by_handle: bool) -> Result<u64, VmError> {
        self.with_purge_retry(is_map_refusal, || self.try_realloc(addr, len, by_handle))
    }

    fn try_realloc(&self, addr: u64, len: u64, by_handle: bool) -> Result<u64, VmError> {
        let (pages, _) = self.pages_for(len)?;
        let mut st = self.state();
        let mut area = match st.layer.area_mut(addr) {
            None => return Err(VmError::NotAllocated { addr }),
            Some(a) if a.handle && !by_handle => return Err(VmError::OwnedByHandle { addr }),
            Some(a) if !a.owns_frames || a.mirror => {
                return Err(VmError::Invalid("only vmalloc areas can be resized"))
            }
            Some(a) if pages <= a.pages => {
                a.len = len;
                return Ok(addr);
            }
            Some(_) => match st.layer.take(addr) {
                Some(a) => a,
                None => return Err(VmError::NotAllocated { addr }),
            },
        };
        let extra = pages - area.pages;
        let grow = extra * self.page;
        let end = addr + area.span;
        let in_place = end
            .checked_add(grow)
            .and_then(|hi| st.layer.reserve(grow, self.page, (end, hi)).ok());
        drop(st);
        let result = match in_place {
            Some(piece) => self.grow_in_place(addr, &mut area, piece, extra),
            None => self.move_area(addr, &mut area, pages),
        };
        let at = *result.as_ref().unwrap_or(&addr);
        if result.is_ok() {
            area.len = len;
        }
        let recorded = self.state().layer.insert(at, area);
        debug_assert!(recorded.is_ok(), "our reserved range {at:#x}");
        result
    }

    /// Maps `extra` more pages after the area, in the range `piece` just
    /// allocated after its guard. When the map fails half way, the pages
    /// it did map join the area (which then has more pages than its length
    /// needs, as after a shrink): nothing is left to undo.
    fn grow_in_place(
        &self,
        addr: u64,
        area: &mut Area,
        piece: u64,
        extra: u64,
    ) -> Result<u64, VmError> {
        let mut more = Vec::new();
        if let Err(e) = self.alloc_frames(extra, &mut more) {
            self.free_va(&[piece]);
            return Err(e);
        }
        let (done, result) = match self.map_frames(addr + area.pages * self.page, &more) {
            Ok(runs) => (more.len(), Ok(runs)),
            Err(p) => (p.blocks, Err(p)),
        };
        let runs = match &result {
            Ok(r) => *r,
            Err(p) => p.runs,
        };
        if runs == 0 {
            self.phys.release(&more);
            self.free_va(&[piece]);
            return Err(result
                .err()
                .map_or(VmError::Invalid("empty growth"), |p| p.err));
        }
        self.phys.release(&more[done..]);
        more.truncate(done);
        area.pieces.push(piece);
        area.span += extra * self.page;
        area.pages += more.iter().map(|b| b.pages()).sum::<u64>();
        area.frames.extend(more);
        area.runs += runs;
        result.map_err(|p| p.err)?;
        self.counters
            .realloc_in_place
            .fetch_add(1, Ordering::Relaxed);
        Ok(addr)
    }

    fn move_area(&self, addr: u64, area: &mut Area, pages: u64) -> Result<u64, VmError> {
        let (_, span) = self.pages_for(pages * self.page)?;
        let to = self.alloc_span(span, self.page)?;
        let mut more = Vec::new();
        if let Err(e) = self.alloc_frames(pages - area.pages, &mut more) {
            self.free_va(&[to]);
            return Err(e);
        }
        let kept = match self.map_frames(to, &area.frames) {
            Ok(r) => r,
            Err(p) => {
                self.undo(to, span, area.frames[..p.blocks].to_vec(), p.runs);
                self.phys.release(&more);
                return Err(p.err);
            }
        };
        let added = match self.map_frames(to + area.pages * self.page, &more) {
            Ok(r) => r,
            Err(p) => {
                let mut mapped = area.frames.clone();
                mapped.extend_from_slice(&more[..p.blocks]);
                self.undo(to, span, mapped, kept + p.runs);
                self.phys.release(&more);
                return Err(p.err);
            }
        };
        // The old mapping is retired like a freed area, keeping its frames.
        let old = Area {
            len: area.len,
            pages: area.pages,
            span: area.span,
            pieces: std::mem::take(&mut area.pieces),
            frames: area.frames.clone(),
            owns_frames: false,
            handle: false,
            mirror: false,
            runs: area.runs,
            page: self.page,
        };
        area.span = span;
        area.pages = pages;
        area.frames.extend(more);
        area.runs = kept + added;
        let copied = self.moved_bytes(&old.frames, &area.frames);
        self.counters
            .realloc_copied_bytes
            .fetch_add(copied, Ordering::Relaxed);
        self.counters
            .remapped_pages
            .fetch_add(old.pages, Ordering::Relaxed);
        self.counters.realloc_moved.fetch_add(1, Ordering::Relaxed);
        self.retire(addr, old, false);
        Ok(to)
    }

    /// Bytes of the old area whose page is not in the same frame in the
    /// new one (both lists in address order): what a move had to copy.
    fn moved_bytes(&self, old: &[Block], new: &[Block]) -> u64 {
        let kept: u64 = old
            .iter()
            .zip(new)
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a.pages())
            .sum();
        let total: u64 = old.iter().map(|b| b.pages()).sum();
        (total - kept) * self.page
    }
}
