//! The second trait a machine implements: where `vmalloc`'s frames come
//! from ([`FrameSource`]), and when a freed area's frames go back to it
//! ([`FramePolicy`]).

use alloc::vec::Vec;

/// Physical frames for `vmalloc` (a buddy allocator, per-CPU lists, a
/// memory file). Frames are numbered (pfn); the layer never touches their
/// memory except through [`zero`](Self::zero).
///
/// The layer calls it with its own lock held: it must not call back into
/// the layer, and when `vfree_atomic` is used from a context that cannot
/// wait, [`free`](Self::free) must not wait either.
pub trait FrameSource {
    /// Allocates a run of 1 to `max` physically contiguous frames and
    /// returns its first frame and length, or `None` when it has none left.
    /// A source without contiguous runs returns one frame at a time.
    fn alloc(&mut self, max: u64) -> Option<(u64, u64)>;
    /// Takes back `count` frames from `pfn`. Every frame was handed out by
    /// [`alloc`](Self::alloc) (or, for `vmap` areas the layer keeps until
    /// their flush, by whatever gave the caller its frames), but a run given
    /// back may join or split the runs handed out.
    fn free(&mut self, pfn: u64, count: u64);
    /// Zeroes `count` frames from `pfn` (for `vzalloc`).
    fn zero(&mut self, pfn: u64, count: u64);

    /// Fills `out` with frames, up to all of it, and returns how many it
    /// wrote (the first ones of `out`; a number past `out.len()` counts as
    /// `out.len()`). Any order, any runs; the layer gives a batch that
    /// came out short back through [`free_frames`](Self::free_frames).
    ///
    /// The layer takes an area's frames with one call of this. The default
    /// takes runs from [`alloc`](Self::alloc) until `out` is full or it
    /// returns `None`, and keeps nothing of a run that breaks its contract
    /// (empty, longer than asked, or reaching `u64::MAX`). A source that hands
    /// out many frames in one step (a buddy's high-order blocks under one
    /// lock, a per-CPU list taken in bulk) overrides it.
    fn alloc_frames(&mut self, out: &mut [u64]) -> usize {
        let mut filled = 0;
        while let Some(rest) = out.get_mut(filled..).filter(|r| !r.is_empty()) {
            let want = rest.len() as u64;
            match self.alloc(want) {
                Some((pfn, n)) if n >= 1 && n <= want && pfn.checked_add(n).is_some() => {
                    for (slot, p) in rest.iter_mut().zip(pfn..pfn + n) {
                        *slot = p;
                    }
                    filled += n as usize;
                }
                Some((pfn, n)) => {
                    self.free(pfn, n.min(u64::MAX - pfn));
                    break;
                }
                None => break,
            }
        }
        filled
    }

    /// Takes back `frames`, in any order, each handed out by this source
    /// (or, for `vmap` areas, by whatever gave the caller its frames).
    ///
    /// The layer gives an area's frames back with one call of this. The
    /// default makes one [`free`](Self::free) call per run of consecutive
    /// frames, ascending or descending.
    fn free_frames(&mut self, frames: &[u64]) {
        give_back(self, frames);
    }
}

/// When the frames of a freed area go back to the frame source (or, for
/// `vmap`, to the caller).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FramePolicy {
    /// As soon as the area's PTEs are cleared, before the flush (Linux's
    /// default): a CPU may still reach the frames through a stale TLB entry
    /// until the flush, which is harmless as long as nobody touches freed
    /// memory. An eager unmap whose flush the MMU refuses keeps its frames
    /// until a later flush succeeds.
    #[default]
    AtOnce,
    /// Only after the flush that removes every translation of them (Linux's
    /// `VM_FLUSH_RESET_PERMS`; what a machine needs whose `clear` leaves the
    /// mapping in place until the flush, as user space's `munmap`): no frame
    /// is handed out again while any CPU may still reach it.
    AfterFlush,
}

/// The runs of consecutive frames in `frames`, in order: `(first, count)`
/// (what a machine maps or frees with one call each).
///
/// ```
/// let runs: Vec<_> = mmkit_vmalloc::frame_runs(&[7, 8, 9, 3, 4, 8]).collect();
/// assert_eq!(runs, [(7, 3), (3, 2), (8, 1)]);
/// let ends: Vec<_> = mmkit_vmalloc::frame_runs(&[u64::MAX - 1, u64::MAX, 0]).collect();
/// assert_eq!(ends, [(u64::MAX - 1, 2), (0, 1)]);
/// ```
pub fn frame_runs(frames: &[u64]) -> impl Iterator<Item = (u64, u64)> + '_ {
    let mut rest = frames;
    core::iter::from_fn(move || {
        let (&first, tail) = rest.split_first()?;
        let mut last = first;
        // A run ends before a frame that does not follow the last one (and
        // at `u64::MAX`: nothing follows it, the next frame 0 wraps).
        let n = 1 + tail
            .iter()
            .take_while(|&&f| {
                let follows = f == last.wrapping_add(1) && f != 0;
                last = f;
                follows
            })
            .count();
        rest = &rest[n..];
        Some((first, n as u64))
    })
}

/// Gives `frames` back to `src`, one call per run of consecutive frames,
/// in either order (a source that hands out frames from the top of a list
/// gives them in descending order).
fn give_back<S: FrameSource + ?Sized>(src: &mut S, frames: &[u64]) {
    let Some((&first, rest)) = frames.split_first() else {
        return;
    };
    // The run [lo, lo + n), grown at either end.
    let (mut lo, mut n) = (first, 1);
    for &pfn in rest {
        if lo.checked_add(n) == Some(pfn) {
            n += 1;
        } else if pfn.checked_add(1) == Some(lo) {
            (lo, n) = (pfn, n + 1);
        } else {
            src.free(lo, n);
            (lo, n) = (pfn, 1);
        }
    }
    src.free(lo, n);
}

/// Frame vectors up to this long are allocated as any small allocation;
/// longer ones fallibly.
const SMALL: u64 = 64;

/// Takes `pages` frames from `src` into `out` (appended) with one batch
/// call. On failure gives back what it took and returns false.
#[inline]
pub(crate) fn take(src: &mut impl FrameSource, pages: u64, out: &mut Vec<u64>) -> bool {
    let first = out.len();
    let Ok(n) = usize::try_from(pages) else {
        return false;
    };
    if out.capacity() == 0 && pages <= SMALL {
        // As small as the layer's other allocations (the areas map's
        // nodes), and as infallible; the direct path costs less.
        *out = Vec::with_capacity(n);
    } else if out.try_reserve(n).is_err() {
        // A size that is bad input fails here, not in the allocator.
        return false;
    }
    out.resize(first + n, 0);
    let got = src.alloc_frames(&mut out[first..]).min(n);
    if got < n {
        src.free_frames(&out[first..first + got]);
        out.truncate(first);
        return false;
    }
    true
}
