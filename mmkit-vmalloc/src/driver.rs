//! The call sequences of the plain layer, each with every failure path:
//! `vmalloc`/`vzalloc`/`vfree`/`vfree_atomic`, `vmap`/`vunmap`,
//! `vrealloc` and `purge`, over the machine's [`Mmu`] and
//! [`FrameSource`].
//!
//! ```text
//!  vmalloc: frames from the source ──(none: purge, retry)──> reserve a span
//!           ──(no space: purge, retry)──> map ──(fails: take the part mapped
//!           down, purge, retry once)──> live area
//!  vfree:   take out of the books ──> clear ──> flush now (eager) or lazy
//!           list ──> frames back at once or after the flush (FramePolicy)
//! ```
//!
//! Which calls flush: every call here but `vfree_atomic` may flush (send
//! IPIs and wait for them), with the layer's lock held by the caller.

use alloc::vec::Vec;

use mmkit::range::RangeAllocator;
use mmkit::AllocError;

use super::frames::take;
use super::lazy::{Gone, Released, When};
use super::maps::{Area, Pieces, Vmalloc};
use super::{Flush, FramePolicy, FrameSource, Mmu, VmError, PAGE};

/// Pages for `bytes`, and the span with a guard page.
fn pages_for(bytes: u64) -> Result<(u64, u64), VmError> {
    if bytes == 0 {
        return Err(VmError::Empty);
    }
    let pages = bytes.div_ceil(PAGE);
    let span = pages
        .checked_add(1)
        .and_then(|p| p.checked_mul(PAGE))
        .ok_or(VmError::TooLarge { bytes })?;
    Ok((pages, span))
}

/// Whether `span` bytes at `align` (a power of two) fit anywhere in the
/// space `[lo, hi)` with nothing else in it.
fn fits_empty((lo, hi): (u64, u64), span: u64, align: u64) -> bool {
    let mask = align.wrapping_sub(1);
    match lo.checked_add(mask) {
        Some(end) => hi.checked_sub(end & !mask).is_some_and(|room| room >= span),
        None => false,
    }
}

fn check_align(align: u64) -> Result<(), VmError> {
    if !align.is_power_of_two() || align < PAGE {
        return Err(VmError::BadAlign { align });
    }
    Ok(())
}

/// The plain layer: areas of frames from a [`FrameSource`] (`vmalloc`) or
/// from the caller (`vmap`).
impl<R: RangeAllocator> Vmalloc<R, Area> {
    /// `vmalloc`: `size` bytes (rounded up to pages) of frames from `src`,
    /// mapped at a new page-aligned area followed by a guard page. The
    /// memory is not zeroed ([`vzalloc`](Self::vzalloc) zeroes it).
    /// May flush (a purge when no space or frames are left).
    ///
    /// # Errors
    /// [`VmError::Empty`] for 0 bytes, [`VmError::TooLarge`];
    /// [`VmError::NoFrames`], [`VmError::NoSpace`] or the MMU's error
    /// ([`VmError::MapFailed`]) after a purge and a retry. Every frame taken
    /// goes back to `src` and every page mapped is taken down.
    ///
    /// # Examples
    /// See the crate docs.
    pub fn vmalloc(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        size: u64,
    ) -> Result<u64, VmError> {
        self.alloc_area(mmu, src, size, PAGE, false, (0, &mut []))
    }

    /// [`vmalloc`](Self::vmalloc) at an address aligned to `align` (a power
    /// of two, at least a page).
    ///
    /// # Errors
    /// [`VmError::BadAlign`], and as [`vmalloc`](Self::vmalloc).
    pub fn vmalloc_aligned(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        size: u64,
        align: u64,
    ) -> Result<u64, VmError> {
        self.alloc_area(mmu, src, size, align, false, (0, &mut []))
    }

    /// [`vmalloc_aligned`](Self::vmalloc_aligned) for a caller that keeps
    /// its own record of each area, as Linux keeps a `vm_struct` with its
    /// page array beside the `vmap_area`: `tag` (a handle of that record)
    /// stays with the area until [`vfree_tagged`](Self::vfree_tagged) hands
    /// it back, so that the free finds the record through the layer's own
    /// lookup, and `pages` gets the frames mapped in page order (the first
    /// `min(pages.len(), pages of the area)` of them).
    ///
    /// ```
    /// # use mmkit_vmalloc::*;
    /// # struct Table;
    /// # impl Mmu for Table {
    /// #     fn map(&mut self, _: u64, _: &[u64]) -> Result<(), MapFailed> { Ok(()) }
    /// #     fn clear(&mut self, _: u64, _: u64) {}
    /// #     fn flush(&mut self, _: u64, _: u64) -> Refused { Refused::new() }
    /// #     fn translate(&self, _: u64) -> Option<u64> { None }
    /// # }
    /// # struct Frames(u64);
    /// # impl FrameSource for Frames {
    /// #     fn alloc(&mut self, _: u64) -> Option<(u64, u64)> { self.0 += 1; Some((self.0, 1)) }
    /// #     fn free(&mut self, _: u64, _: u64) {}
    /// #     fn zero(&mut self, _: u64, _: u64) {}
    /// # }
    /// let range = mmkit::vmap::VmapAllocator::new(1 << 30, 1 << 31).unwrap();
    /// let mut v = Vmalloc::new(range, Flush::Lazy { max_bytes: 1 << 20 });
    /// let (mmu, src) = (&mut Table, &mut Frames(100));
    /// let mut pages = [0; 2];
    /// let va = v.vmalloc_tagged(mmu, src, 2 * PAGE, PAGE, 7, &mut pages).unwrap();
    /// assert_eq!(pages, [101, 102]);
    /// assert_eq!(v.vfree_tagged(mmu, src, va), Ok(7));
    /// ```
    ///
    /// # Errors
    /// As [`vmalloc_aligned`](Self::vmalloc_aligned); `pages` is then
    /// unchanged.
    pub fn vmalloc_tagged(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        size: u64,
        align: u64,
        tag: u64,
        pages: &mut [u64],
    ) -> Result<u64, VmError> {
        self.alloc_area(mmu, src, size, align, false, (tag, pages))
    }

    /// [`vmalloc`](Self::vmalloc) of zeroed memory (the frames are zeroed
    /// through [`FrameSource::zero`] before they are mapped).
    ///
    /// # Errors
    /// As [`vmalloc`](Self::vmalloc).
    pub fn vzalloc(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        size: u64,
    ) -> Result<u64, VmError> {
        self.alloc_area(mmu, src, size, PAGE, true, (0, &mut []))
    }

    /// The area's call sequence; `(tag, pages)`: the caller's word kept
    /// with the area, and where the frames mapped are copied.
    fn alloc_area(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        size: u64,
        align: u64,
        zero: bool,
        (tag, pages_out): (u64, &mut [u64]),
    ) -> Result<u64, VmError> {
        check_align(align)?;
        let (pages, _) = pages_for(size)?;
        let mut frames = Vec::new();
        self.take_frames(mmu, src, pages, &mut frames)?;
        if zero {
            for (pfn, n) in super::frame_runs(&frames) {
                src.zero(pfn, n);
            }
        }
        match self.install(mmu, src, &frames, align, 0) {
            Ok(va) => {
                let n = pages_out.len().min(frames.len());
                pages_out[..n].copy_from_slice(&frames[..n]);
                self.areas.insert(
                    va,
                    Area {
                        frames,
                        owned: true,
                        pieces: Pieces::default(),
                        tag,
                    },
                );
                self.stats.maps += 1;
                Ok(va)
            }
            Err((e, kept)) => {
                src.free_frames(&frames[kept..]);
                Err(e)
            }
        }
    }

    /// Takes `pages` frames from `src` into `out`, purging once (lazily
    /// freed areas may hold frames) when it has too few.
    fn take_frames(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        pages: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), VmError> {
        if take(src, pages, out) {
            return Ok(());
        }
        if self.purge(mmu, src) && take(src, pages, out) {
            return Ok(());
        }
        Err(VmError::NoFrames { pages })
    }

    /// Reserves a span for `frames` and maps them; when the map fails,
    /// purges once and tries again. The first `lent` frames belong to a
    /// live area (a growing `vrealloc`'s); the layer may give the others to
    /// `src`. On error, how many leading frames the layer holds: see
    /// [`try_install`](Self::try_install).
    fn install(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        frames: &[u64],
        align: u64,
        lent: usize,
    ) -> Result<u64, (VmError, usize)> {
        match self.try_install(mmu, src, frames, align, lent) {
            Err((VmError::MapFailed { .. }, 0)) if self.purgeable() => {
                self.purge(mmu, src);
                self.try_install(mmu, src, frames, align, lent)
            }
            r => r,
        }
    }

    /// One try of [`install`](Self::install). A map that fails half way is
    /// taken down and flushed at once. When that flush is refused under
    /// [`FramePolicy::AfterFlush`], some CPU may still reach the frames it
    /// mapped: the error then says how many leading frames the layer holds.
    /// They wait with the stuck range, and those past `lent` go to `src`
    /// once a flush releases it (the lent ones are shadowed until then).
    #[inline]
    fn try_install(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        frames: &[u64],
        align: u64,
        lent: usize,
    ) -> Result<u64, (VmError, usize)> {
        let (_, span) = pages_for(frames.len() as u64 * PAGE).map_err(|e| (e, 0))?;
        let va = match self.pools.take(span, align) {
            Some(va) => va,
            None => self
                .reserve_or_purge(mmu, src, span, align)
                .map_err(|e| (e, 0))?,
        };
        let Err(f) = mmu.map(va, frames) else {
            return Ok(va);
        };
        let mapped = (f.mapped as usize).min(frames.len());
        if mapped == 0 {
            let freed = self.range.free(va);
            debug_assert!(freed.is_ok(), "just reserved");
            return Err((f.err, 0));
        }
        let held = self.take_down(mmu, src, va, span, &frames[..mapped], lent);
        Err((f.err, held))
    }

    /// Takes down a map that failed after writing `mapped` from the start
    /// of the range reserved at `va` (`span` bytes): clears it, flushes it
    /// at once and frees it. Returns how many of `mapped` the layer holds:
    /// all of them when that flush is refused under
    /// [`FramePolicy::AfterFlush`] (they wait with the stuck range; those
    /// past `lent` go to `src` once a flush releases it, the first `lent`
    /// are shadowed until then), else none.
    fn take_down(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
        span: u64,
        mapped: &[u64],
        lent: usize,
    ) -> usize {
        let after = self.frames == FramePolicy::AfterFlush;
        let lent = lent.min(mapped.len());
        let shown = Area {
            frames: if after {
                mapped[lent..].to_vec()
            } else {
                Vec::new()
            },
            owned: true,
            pieces: Pieces::default(),
            tag: 0,
        };
        let mut out = self.retire_range(mmu, va, span, Gone::Area(shown), When::Now);
        let held = match out.released.iter().position(|r| r.start == va) {
            Some(i) => {
                // Flushed: nothing reaches the frames, the caller has them.
                drop(out.released.swap_remove(i));
                0
            }
            None if after => {
                if lent > 0 {
                    self.shadows.push((va, mapped[..lent].to_vec()));
                }
                mapped.len()
            }
            None => 0,
        };
        self.dispose(src, out.released);
        held
    }

    fn purgeable(&self) -> bool {
        !self.retiring.is_empty() || self.pools.len() > 0
    }

    /// Reserves `span` bytes at `align`, purging the lazy and stuck lists
    /// once when nothing fits (the kernel's retry). A request that no
    /// address of the empty space could hold fails without the purge: its
    /// flush would free nothing the request can use.
    fn reserve_or_purge(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        span: u64,
        align: u64,
    ) -> Result<u64, VmError> {
        let space = self.range.space();
        let r = match self.place_range(span, align, space) {
            Err(AllocError::NoSpace) if self.purgeable() && fits_empty(space, span, align) => {
                self.purge(mmu, src);
                self.place_range(span, align, space)
            }
            r => r,
        };
        r.map_err(|e| match e {
            AllocError::NoSpace => VmError::NoSpace { bytes: span },
            _ if !align.is_power_of_two() || align < PAGE => VmError::BadAlign { align },
            _ => VmError::PlacementRefused,
        })
    }

    /// `vmap`: maps the caller's `frames` at a new area aligned to `align`
    /// (a power of two, at least a page), followed by a guard page. The
    /// frames stay the caller's: [`vunmap`](Self::vunmap) hands them back.
    /// May flush (a purge when no space is left).
    ///
    /// # Errors
    /// [`VmError::Empty`], [`VmError::BadAlign`], [`VmError::NoSpace`] or
    /// the MMU's error after a purge and a retry; what was mapped is taken
    /// down, and the frames stay the caller's. [`VmError::FramesHeld`]
    /// under [`FramePolicy::AfterFlush`] when the flush of that takedown is
    /// refused: the layer holds the frames some CPU may still reach and
    /// gives them to `src` once a flush releases them; the caller keeps
    /// the others.
    pub fn vmap(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        frames: &[u64],
        align: u64,
    ) -> Result<u64, VmError> {
        check_align(align)?;
        if frames.is_empty() {
            return Err(VmError::Empty);
        }
        let va = self
            .install(mmu, src, frames, align, 0)
            .map_err(|(e, held)| match held {
                0 => e,
                held => VmError::FramesHeld { held: held as u64 },
            })?;
        let frames = frames.to_vec();
        self.areas.insert(
            va,
            Area {
                frames,
                owned: false,
                pieces: Pieces::default(),
                tag: 0,
            },
        );
        self.stats.maps += 1;
        Ok(va)
    }

    /// `vunmap`: clears the `vmap` area at `va` and frees its range, flushing
    /// now (eager) or at the next purge (lazy). Returns its frames when the
    /// caller may reuse them now (at once under [`FramePolicy::AtOnce`];
    /// after a flush that succeeded under the eager policy), else `None`:
    /// the layer keeps them until their flush and then gives them to `src`.
    /// May flush.
    ///
    /// # Errors
    /// [`VmError::NotVmap`] for a `vmalloc` area, and as
    /// [`vfree`](Self::vfree); nothing changes then.
    pub fn vunmap(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
    ) -> Result<Option<Vec<u64>>, VmError> {
        let area = self.take_live(va, false)?;
        Ok(self.unmap_area(mmu, src, va, area, When::Policy))
    }

    /// `vfree`: clears the `vmalloc` area at `va` and frees its range,
    /// flushing now (eager) or at the next purge (lazy, which runs here
    /// when the lazy list passes its threshold); its frames go back to
    /// `src` as the [`FramePolicy`] says. May flush.
    ///
    /// # Errors
    /// [`VmError::NotVmalloc`] for a `vmap` area; [`VmError::Interior`],
    /// [`VmError::DoubleFree`], [`VmError::InUse`] (a `vm_map_ram` block),
    /// [`VmError::NotMapped`] when `va` does not start a live area.
    /// Nothing changes then.
    pub fn vfree(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
    ) -> Result<(), VmError> {
        self.vfree_tagged(mmu, src, va).map(drop)
    }

    /// [`vfree`](Self::vfree) that hands back the area's tag (0 for an
    /// area that was given none): see
    /// [`vmalloc_tagged`](Self::vmalloc_tagged).
    ///
    /// # Errors
    /// As [`vfree`](Self::vfree); nothing changes then.
    pub fn vfree_tagged(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
    ) -> Result<u64, VmError> {
        let mut area = self.take_live(va, true)?;
        let tag = core::mem::take(&mut area.tag);
        let kept = self.unmap_area(mmu, src, va, area, When::Policy);
        debug_assert!(kept.is_none(), "a vmalloc area's frames are ours");
        Ok(tag)
    }

    /// The kernel's `vfree_atomic`: [`vfree`](Self::vfree) that never
    /// flushes and never purges, whatever the policy: the area's PTEs are
    /// cleared and it joins the lazy list, flushed by the next call that
    /// flushes. Usable with interrupts off or under a spin lock (as long as
    /// the MMU's `clear` and the source's `free` do not wait either).
    ///
    /// # Errors
    /// As [`vfree`](Self::vfree).
    pub fn vfree_atomic(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
    ) -> Result<(), VmError> {
        let area = self.take_live(va, true)?;
        let kept = self.unmap_area(mmu, src, va, area, When::Deferred);
        debug_assert!(kept.is_none(), "a vmalloc area's frames are ours");
        Ok(())
    }

    fn check_vmalloc(&self, va: u64) -> Result<(), VmError> {
        match self.areas.get(va) {
            Some(a) if a.owned => Ok(()),
            Some(_) => Err(VmError::NotVmalloc { va }),
            None => Err(self.not_an_area(va)),
        }
    }

    /// Takes the live area at `va` out of the books when it is of the kind
    /// asked for (`owned`: a `vmalloc` area), or says why not.
    fn take_live(&mut self, va: u64, owned: bool) -> Result<Area, VmError> {
        let kind = |a: &Area| if a.owned == owned { Ok(()) } else { Err(()) };
        match self.areas.remove_where(va, kind) {
            Some(Ok(a)) => Ok(a),
            Some(Err(())) if owned => Err(VmError::NotVmalloc { va }),
            Some(Err(())) => Err(VmError::NotVmap { va }),
            None => Err(self.not_an_area(va)),
        }
    }

    /// Unmaps `area`, just taken out of the books at `va`; returns the
    /// frames of a `vmap` area when the caller may have them now.
    fn unmap_area(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
        mut area: Area,
        when: When,
    ) -> Option<Vec<u64>> {
        self.stats.unmaps += 1;
        let span = area.span_bytes();
        let lazy = when == When::Deferred || matches!(self.flush, Flush::Lazy { .. });
        // Cleared: at once, the frames are the caller's or the source's.
        let mut mine =
            (lazy && self.frames == FramePolicy::AtOnce).then(|| core::mem::take(&mut area.frames));
        let owned = area.owned;
        let mut out = self.retire_range(mmu, va, span, Gone::Area(area), when);
        if let Some(i) = out.released.iter().position(|r| r.start == va) {
            if let Gone::Area(a) = out.released.swap_remove(i).what {
                mine.get_or_insert(a.frames);
            }
        }
        self.dispose(src, out.released);
        if out.purge_due {
            self.purge_lazy(mmu, src);
        }
        match mine {
            Some(frames) if owned => {
                self.release_frames(src, &frames);
                None
            }
            other => other,
        }
    }

    /// `vrealloc`, growing without copying. A size that fits in the area's
    /// pages keeps it. A larger one grows it in place when the range right
    /// after it is free (new frames from `src` mapped over its guard page
    /// and on; nothing is unmapped). Otherwise the area's frames and new
    /// ones are mapped at a new area, and the old one is freed as by
    /// `vfree` (its frames stay, in the new area). Returns the (possibly
    /// new) address. May flush.
    ///
    /// # Errors
    /// As [`vmalloc`](Self::vmalloc) and [`vfree`](Self::vfree); the area
    /// is at `va` then, unchanged: a growth in place whose map fails part
    /// way is taken down (its frames go back to `src`, after the flush of
    /// the takedown under [`FramePolicy::AfterFlush`]).
    pub fn vrealloc(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
        size: u64,
    ) -> Result<u64, VmError> {
        self.check_vmalloc(va)?;
        let (pages, _) = pages_for(size)?;
        let have = self.areas.get(va).map_or(0, |a| a.frames.len() as u64);
        if pages <= have {
            return Ok(va);
        }
        if self.grow_in_place(mmu, src, va, pages - have)? {
            return Ok(va);
        }
        let mut frames = self.areas.get(va).map(|a| a.frames.clone());
        let frames = frames.get_or_insert_with(Vec::new);
        self.take_frames(mmu, src, pages - have, frames)?;
        let to = match self.install(mmu, src, frames, PAGE, have as usize) {
            Ok(to) => to,
            Err((e, held)) => {
                src.free_frames(&frames[held.max(have as usize)..]);
                return Err(e);
            }
        };
        let frames = core::mem::take(frames);
        let mut tag = 0;
        if let Some(old) = self.areas.remove(va) {
            let span = old.span_bytes();
            tag = old.tag;
            let shown = Area {
                frames: Vec::new(),
                owned: false,
                pieces: old.pieces,
                tag: 0,
            };
            let out = self.retire_range(mmu, va, span, Gone::Area(shown), When::Policy);
            let released = out.released.iter().any(|r| r.start == va);
            if !released && self.frames == FramePolicy::AfterFlush {
                // The old range may still reach the frames the new area owns.
                self.shadows.push((va, frames[..have as usize].to_vec()));
            }
            self.dispose(src, out.released);
            if out.purge_due {
                self.purge_lazy(mmu, src);
            }
        }
        self.areas.insert(
            to,
            Area {
                frames,
                owned: true,
                pieces: Pieces::default(),
                tag,
            },
        );
        Ok(to)
    }

    /// Grows the `vmalloc` area at `va` by `more` pages in place when the
    /// range right after it is free: its new frames map over its guard page
    /// and on into that range, reserved as a piece of the area (freed with
    /// it), and the guard page moves to the new end. Flushes only to take
    /// down a map that failed part way. Returns whether it grew; `false`
    /// (and nothing changed) when the range is taken or the map wrote
    /// nothing.
    ///
    /// # Errors
    /// [`VmError::NoFrames`] after a purge; the MMU's error when the map
    /// failed part way, taken down: the area is as it was.
    fn grow_in_place(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        va: u64,
        more: u64,
    ) -> Result<bool, VmError> {
        let Some(end) = self.areas.get(va).map(|a| va + a.span_bytes()) else {
            return Ok(false);
        };
        let Some((bytes, hi)) = more
            .checked_mul(PAGE)
            .and_then(|b| Some((b, end.checked_add(b)?)))
        else {
            return Ok(false);
        };
        let Ok(piece) = self.range.alloc_placed(bytes, PAGE, (end, hi), self.place) else {
            return Ok(false);
        };
        let mut frames = Vec::new();
        if let Err(e) = self.take_frames(mmu, src, more, &mut frames) {
            let freed = self.range.free(piece);
            debug_assert!(freed.is_ok(), "just reserved");
            return Err(e);
        }
        // The pages in the piece first, the guard page last: a map that
        // fails has then written into the piece alone, which is taken down
        // as a failed install is, and the area's own pages stay as they are.
        let past = &frames[1..];
        let in_piece = match past {
            [] => Ok(()),
            _ => mmu.map(end, past),
        };
        let failed = match in_piece {
            Ok(()) => (mmu.map(end - PAGE, &frames[..1]).err()).map(|f| (f.err, past.len())),
            Err(f) => Some((f.err, (f.mapped as usize).min(past.len()))),
        };
        let Some((err, mapped)) = failed else {
            if let Some(a) = self.areas.get_mut(va) {
                a.frames.extend_from_slice(&frames);
                a.pieces.push(piece);
            }
            return Ok(true);
        };
        if mapped == 0 {
            let freed = self.range.free(piece);
            debug_assert!(freed.is_ok(), "just reserved");
            src.free_frames(&frames);
            return Ok(false);
        }
        let held = self.take_down(mmu, src, piece, bytes, &past[..mapped], 0);
        src.free_frames(&frames[..1]);
        src.free_frames(&past[held..]);
        Err(err)
    }

    /// Flushes the span of the lazy and stuck lists on every CPU, frees
    /// what the flush released and gives the frames that waited for it to
    /// `src`; gives every pooled area's range back to the range allocator
    /// ([`set_pools`](Self::set_pools)). Returns whether anything
    /// was flushed. Flushes.
    pub fn purge(&mut self, mmu: &mut impl Mmu, src: &mut impl FrameSource) -> bool {
        let flushed = self.purge_lazy(mmu, src);
        self.drain_pools();
        flushed
    }

    /// The purge the lazy list's threshold runs: [`purge`](Self::purge),
    /// but the pools keep what they hold and take the areas released.
    pub(crate) fn purge_lazy(&mut self, mmu: &mut impl Mmu, src: &mut impl FrameSource) -> bool {
        let p = self.purge_released(mmu);
        self.dispose(src, p.released);
        p.flushed.is_some()
    }

    /// [`purge`](Self::purge) with the flush widened to cover `[lo, hi)`
    /// too (a `vm_map_ram` front end's dirty pages, and those whose flush
    /// was refused before); flushes `[lo, hi)` alone when nothing waits.
    /// Returns whether it flushed.
    pub(crate) fn purge_widened(
        &mut self,
        mmu: &mut impl Mmu,
        src: &mut impl FrameSource,
        lo: u64,
        hi: u64,
    ) -> bool {
        let (lo, hi) = match self.alias_pending.take() {
            Some((s, e)) => (lo.min(s), hi.max(e)),
            None => (lo, hi),
        };
        let mut refused = false;
        let p = self.purge_through(&mut |s, e| {
            let r = mmu.flush(s.min(lo), e.max(hi));
            refused |= !r.is_empty();
            r
        });
        self.dispose(src, p.released);
        let flushed = p.flushed.is_some() || lo < hi;
        if p.flushed.is_none() && lo < hi {
            // Live blocks' dirty pages: they are not reused inside their
            // block, and the block's own release flushes them again.
            refused = !mmu.flush(lo, hi).is_empty();
            self.stats.flushes += 1;
            self.stats.pages_flushed += (hi - lo) / PAGE;
        }
        if refused && lo < hi {
            self.alias_pending = Some((lo, hi));
        }
        flushed
    }

    /// Adds `[lo, hi)` to the span the next `vm_unmap_aliases` flushes.
    pub(crate) fn alias_refused(&mut self, lo: u64, hi: u64) {
        self.alias_pending = Some(match self.alias_pending {
            Some((s, e)) => (s.min(lo), e.max(hi)),
            None => (lo, hi),
        });
    }

    /// Gives the frames the released areas kept to `src`, and those that
    /// waited for a released shadow. Inline: most frees release nothing.
    #[inline]
    fn dispose(&mut self, src: &mut impl FrameSource, released: Vec<Released<Area>>) {
        if !released.is_empty() {
            self.dispose_released(src, released);
        }
    }

    #[inline(never)]
    fn dispose_released(&mut self, src: &mut impl FrameSource, mut released: Vec<Released<Area>>) {
        let had_shadows = !self.shadows.is_empty();
        // Read in place, then dropped in place: a purge hands back
        // thousands, most of them holding no frames (given back at the
        // free).
        for r in &released {
            if had_shadows {
                self.shadows.retain(|s| s.0 != r.start);
            }
            match &r.what {
                Gone::Area(a) if !a.frames.is_empty() => self.release_frames(src, &a.frames),
                _ => {}
            }
        }
        released.clear();
        if had_shadows && !self.deferred.is_empty() {
            let waiting = core::mem::take(&mut self.deferred);
            self.release_frames(src, &waiting);
        }
        self.retiring.recycle(released);
    }

    /// Gives `frames` to `src`, but keeps those a shadow still shows.
    /// Inline: a shadow is rare (a failed map whose flush was refused).
    #[inline]
    fn release_frames(&mut self, src: &mut impl FrameSource, frames: &[u64]) {
        if self.shadows.is_empty() {
            src.free_frames(frames);
        } else {
            self.release_unshadowed(src, frames);
        }
    }

    fn release_unshadowed(&mut self, src: &mut impl FrameSource, frames: &[u64]) {
        let shown = |p: &u64| self.shadows.iter().any(|s| s.1.contains(p));
        let (held, free): (Vec<u64>, Vec<u64>) = frames.iter().partition(|p| shown(p));
        self.deferred.extend(held);
        src.free_frames(&free);
    }
}

impl Area {
    /// Bytes of the area, its guard page included.
    fn span_bytes(&self) -> u64 {
        (self.frames.len() as u64 + 1) * PAGE
    }
}
