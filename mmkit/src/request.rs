//! Allocation requests that cannot be mixed up: [`Request`], [`Policy`],
//! and the error that says what was asked and why it failed,
//! [`RequestError`].
//!
//! The [`RangeAllocator`](crate::range::RangeAllocator) calls take four
//! positional `u64`s (size, align, window start, window end), which are
//! easy to swap. A `Request` names each one, makes a zero size
//! unrepresentable (`NonZeroU64`), takes the window as a `Range<u64>` and
//! adds a placement [`Policy`]:
//!
//! ```
//! use core::num::NonZeroU64;
//! use mmkit::request::{Policy, Request};
//! use mmkit::vmap::VmapAllocator;
//!
//! let mut va = VmapAllocator::new(0, 1 << 20).unwrap();
//! let size = NonZeroU64::new(0x2000).unwrap();
//! // Lowest fit (the default) in a window:
//! let a = va.allocate(Request::new(size).align(0x1000).within(0x4000..0x8000)).unwrap();
//! assert_eq!(a, 0x4000);
//! // Top down:
//! let b = va.allocate(Request::new(size).align(0x1000).policy(Policy::Highest)).unwrap();
//! assert_eq!(b, (1 << 20) - 0x2000);
//! // Exactly here, or an error that says why not:
//! let c = va.allocate(Request::new(size).at(0x10_000)).unwrap();
//! assert_eq!(c, 0x10_000);
//! let err = va.allocate(Request::new(size).at(0x10_000)).unwrap_err();
//! assert_eq!(err.to_string(), "[0x10000, 0x12000) is not wholly free");
//! ```

use core::alloc::Layout;
use core::fmt;
use core::num::NonZeroU64;
use core::ops::Range;

use crate::error::AllocError;

/// Where in its window a request is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Policy {
    /// The lowest fitting address (the [`RangeAllocator`] contract; the
    /// kernel's vmalloc).
    ///
    /// [`RangeAllocator`]: crate::range::RangeAllocator
    #[default]
    Lowest,
    /// The highest fitting address: the space fills from the top of the
    /// window down (vm-allocator's `LastMatch`, a top-down mmap layout).
    Highest,
    /// The best fit: the shortest free block that holds the request
    /// (aligned, inside the window), and in it the lowest fitting address;
    /// among free blocks of that length, the lowest one. Leaves the long
    /// blocks whole for the requests that need them (range-alloc's and
    /// TLSF's placement, made exact with alignment and window).
    ///
    /// ```
    /// use mmkit::request::{Policy, Request};
    /// use mmkit::vmap::VmapAllocator;
    ///
    /// let mut va = VmapAllocator::new(0, 0x100).unwrap();
    /// for (a, size) in [(0, 0x10), (0x10, 0x20), (0x30, 0x08), (0x38, 0x40)] {
    ///     assert_eq!(va.alloc(size, 1), Ok(a));
    /// }
    /// va.free(0x10).unwrap(); // free: [0x10, 0x30), [0x78, 0x100)
    /// let best = Request::bytes(0x18).unwrap().policy(Policy::BestFit);
    /// assert_eq!(va.allocate(best.clone()), Ok(0x10)); // the 0x20 block
    /// assert_eq!(va.allocate(best), Ok(0x78)); // the 0x88 one
    /// ```
    BestFit,
    /// Exactly this address, or an error (vm-allocator's `ExactMatch`; a
    /// fixed MMIO window, `MAP_FIXED_NOREPLACE`). The address must be a
    /// multiple of the alignment.
    Exact(u64),
    /// Linux 6.12's choice (`find_vmap_lowest_match`): the lowest fit, but
    /// for an alignment above [`LINUX_PAGE_SIZE`] (and a window wider than
    /// the size) only in a free block at least `size + align - 1` long, the
    /// length that holds an aligned fit wherever the block starts. A
    /// shorter block that holds an aligned fit is passed over, so the
    /// answer can lie above the exact lowest fit; it is never lower. As in
    /// Linux, the first such block decides: when its fit ends past the
    /// window, the request fails.
    ///
    /// Linux's descent also takes a shorter block that happens to lie on
    /// its search path (an ancestor in its red-black tree of a long
    /// enough block, with no long enough block in its left subtree); which
    /// blocks those are depends on the tree's shape, which this policy
    /// does not model. See `docs/linux-replay.md`.
    Linux,
}

/// The page size [`Policy::Linux`] assumes: alignments up to it need no
/// extra length (every block starts on a page).
pub const LINUX_PAGE_SIZE: u64 = 4096;

impl Policy {
    /// The shortest free block [`Policy::Linux`] searches for `size` bytes
    /// aligned to `align` in a window `window_len` bytes long: `size +
    /// align - 1` for an alignment above [`LINUX_PAGE_SIZE`] unless the
    /// window is exactly `size` long, else `size` (`None` on overflow:
    /// no block is that long).
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::Policy;
    /// assert_eq!(Policy::linux_search_len(0x9000, 0x1000, 1 << 30), Some(0x9000));
    /// assert_eq!(Policy::linux_search_len(0x9000, 0x200000, 1 << 30), Some(0x208fff));
    /// assert_eq!(Policy::linux_search_len(0x9000, 0x200000, 0x9000), Some(0x9000));
    /// assert_eq!(Policy::linux_search_len(u64::MAX, 0x2000, 1 << 40), None);
    /// ```
    pub const fn linux_search_len(size: u64, align: u64, window_len: u64) -> Option<u64> {
        if align <= LINUX_PAGE_SIZE || window_len == size {
            return Some(size);
        }
        size.checked_add(align - 1)
    }
}

/// An allocation request: size, alignment, window and policy.
///
/// Built with [`new`](Self::new) and refined with the builder methods; every
/// one is `const`, so requests can be constants. Defaults: alignment 1, the
/// whole managed space, [`Policy::Lowest`].
///
/// # Examples
/// ```
/// use core::num::NonZeroU64;
/// use mmkit::request::{Policy, Request};
///
/// const PAGE: NonZeroU64 = NonZeroU64::new(4096).unwrap();
/// const GUARDED: Request = Request::new(PAGE).align(4096).policy(Policy::Highest);
/// assert_eq!(GUARDED.size(), 4096);
/// assert_eq!(GUARDED.alignment(), 4096);
/// assert_eq!(GUARDED.window(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Request {
    size: NonZeroU64,
    align: u64,
    window: Option<(u64, u64)>,
    policy: Policy,
}

impl Request {
    /// `size` bytes, alignment 1, anywhere, lowest fit.
    ///
    /// # Examples
    /// ```
    /// use core::num::NonZeroU64;
    /// use mmkit::request::{Policy, Request};
    /// let r = Request::new(NonZeroU64::new(64).unwrap());
    /// assert_eq!((r.size(), r.alignment(), r.window(), r.placement()), (64, 1, None, Policy::Lowest));
    /// ```
    pub const fn new(size: NonZeroU64) -> Self {
        Request {
            size,
            align: 1,
            window: None,
            policy: Policy::Lowest,
        }
    }

    /// `size` bytes, or `None` for 0.
    ///
    /// ```
    /// use mmkit::request::Request;
    /// assert!(Request::bytes(0).is_none());
    /// assert_eq!(Request::bytes(8).unwrap().size(), 8);
    /// ```
    pub const fn bytes(size: u64) -> Option<Self> {
        match NonZeroU64::new(size) {
            Some(s) => Some(Request::new(s)),
            None => None,
        }
    }

    /// The request for a [`Layout`]: its size and alignment.
    ///
    /// # Errors
    /// [`RequestError::ZeroSize`] for a zero-sized layout.
    ///
    /// ```
    /// use core::alloc::Layout;
    /// use mmkit::request::Request;
    /// let r = Request::from_layout(Layout::new::<[u64; 4]>()).unwrap();
    /// assert_eq!((r.size(), r.alignment()), (32, 8));
    /// assert!(Request::from_layout(Layout::new::<()>()).is_err());
    /// ```
    pub const fn from_layout(layout: Layout) -> Result<Self, RequestError> {
        match NonZeroU64::new(layout.size() as u64) {
            Some(s) => Ok(Request::new(s).align(layout.align() as u64)),
            None => Err(RequestError::ZeroSize),
        }
    }

    /// Aligns the address to `align`, a power of two (checked when the
    /// request is made: [`RequestError::BadAlign`]).
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::Request;
    /// assert_eq!(Request::bytes(64).unwrap().align(16).alignment(), 16);
    /// ```
    pub const fn align(mut self, align: u64) -> Self {
        self.align = align;
        self
    }

    /// Confines the allocation to `window` (clamped to the managed space):
    /// the whole allocation lies inside it.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::Request;
    /// let r = Request::bytes(64).unwrap().within(0x1000..0x2000);
    /// assert_eq!(r.window(), Some(0x1000..0x2000));
    /// ```
    pub const fn within(mut self, window: Range<u64>) -> Self {
        self.window = Some((window.start, window.end));
        self
    }

    /// Places the allocation by `policy`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::{Policy, Request};
    /// let r = Request::bytes(64).unwrap().policy(Policy::Highest);
    /// assert_eq!(r.placement(), Policy::Highest);
    /// ```
    pub const fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Shorthand for `.policy(Policy::Exact(addr))`.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::{Policy, Request};
    /// let r = Request::bytes(64).unwrap().at(0x4000);
    /// assert_eq!(r.placement(), Policy::Exact(0x4000));
    /// ```
    pub const fn at(self, addr: u64) -> Self {
        self.policy(Policy::Exact(addr))
    }

    /// The size in bytes.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::Request;
    /// assert_eq!(Request::bytes(64).unwrap().size(), 64);
    /// ```
    pub const fn size(&self) -> u64 {
        self.size.get()
    }

    /// The alignment.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::Request;
    /// assert_eq!(Request::bytes(64).unwrap().alignment(), 1); // the default
    /// ```
    pub const fn alignment(&self) -> u64 {
        self.align
    }

    /// The window, if one was set.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::Request;
    /// assert_eq!(Request::bytes(64).unwrap().window(), None); // the whole space
    /// ```
    pub const fn window(&self) -> Option<Range<u64>> {
        match self.window {
            Some((s, e)) => Some(s..e),
            None => None,
        }
    }

    /// The placement policy.
    ///
    /// # Examples
    /// ```
    /// use mmkit::request::{Policy, Request};
    /// assert_eq!(Request::bytes(64).unwrap().placement(), Policy::Lowest);
    /// ```
    pub const fn placement(&self) -> Policy {
        self.policy
    }

    /// Validates the request against the space `[start, end)` and returns
    /// the window clamped to it.
    pub(crate) fn clamp(&self, space: (u64, u64)) -> Result<(u64, u64), RequestError> {
        if !self.align.is_power_of_two() {
            return Err(RequestError::BadAlign { align: self.align });
        }
        let (ws, we) = self.window.unwrap_or(space);
        if ws >= we {
            return Err(RequestError::EmptyWindow { start: ws, end: we });
        }
        if let Policy::Exact(addr) = self.policy {
            if addr & (self.align - 1) != 0 {
                return Err(RequestError::Misaligned {
                    addr,
                    align: self.align,
                });
            }
        }
        Ok((ws.max(space.0), we.min(space.1)))
    }
}

/// Why a [`Request`] (or a change of the managed space) was refused, with
/// what was asked. Nothing changed.
///
/// Converts into the coarser [`AllocError`] (`Into`), for code that uses
/// both APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum RequestError {
    /// A zero-sized [`Layout`].
    ZeroSize,
    /// The alignment is not a power of two.
    BadAlign {
        /// The alignment asked for.
        align: u64,
    },
    /// The window is empty or inverted.
    EmptyWindow {
        /// Window start asked for.
        start: u64,
        /// Window end asked for.
        end: u64,
    },
    /// An exact address that is not a multiple of the alignment.
    Misaligned {
        /// The address asked for.
        addr: u64,
        /// The alignment asked for.
        align: u64,
    },
    /// No free range holds the request in its window, also after purging
    /// the lazily freed areas once.
    NoFit {
        /// The size asked for.
        size: u64,
        /// The alignment asked for.
        align: u64,
        /// The window searched (clamped to the managed space; empty when
        /// the window lies outside it).
        window: (u64, u64),
        /// The largest free block of the whole space after the purge (a
        /// fit may still fail on alignment or on the window).
        largest_free: u64,
    },
    /// [`Policy::Exact`]: `[start, end)` is not wholly free (busy, lazily
    /// freed, or outside the window or the managed space).
    NotFree {
        /// The address asked for.
        start: u64,
        /// One past the last byte asked for (saturated at `u64::MAX`).
        end: u64,
    },
    /// A new managed space that is empty, does not contain the current one
    /// (grow), or is not contained by it (shrink).
    BadSpace {
        /// The current space.
        space: (u64, u64),
        /// The space asked for.
        asked: (u64, u64),
    },
    /// Shrinking would drop `[start, end)`, which is in use (live or
    /// lazily freed).
    InUse {
        /// First byte in use in the part to drop.
        start: u64,
        /// One past the end of that part.
        end: u64,
    },
    /// The allocator keeps its metadata in fixed storage, which has no room
    /// for what the request would need.
    StorageFull,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RequestError::ZeroSize => f.write_str("zero-sized request"),
            RequestError::BadAlign { align } => {
                write!(f, "alignment {align:#x} is not a power of two")
            }
            RequestError::EmptyWindow { start, end } => {
                write!(f, "window [{start:#x}, {end:#x}) is empty")
            }
            RequestError::Misaligned { addr, align } => {
                write!(f, "address {addr:#x} is not aligned to {align:#x}")
            }
            RequestError::NoFit {
                size,
                align,
                window: (s, e),
                largest_free,
            } => write!(
                f,
                "no free range holds {size:#x} bytes aligned to {align:#x} in \
                 [{s:#x}, {e:#x}) (largest free block {largest_free:#x})"
            ),
            RequestError::NotFree { start, end } => {
                write!(f, "[{start:#x}, {end:#x}) is not wholly free")
            }
            RequestError::BadSpace {
                space: (s, e),
                asked: (as_, ae),
            } => write!(
                f,
                "cannot change the space [{s:#x}, {e:#x}) to [{as_:#x}, {ae:#x})"
            ),
            RequestError::InUse { start, end } => {
                write!(f, "[{start:#x}, {end:#x}) is in use")
            }
            RequestError::StorageFull => f.write_str("the allocator's fixed storage is full"),
        }
    }
}

impl From<RequestError> for AllocError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::NoFit { .. } | RequestError::NotFree { .. } => AllocError::NoSpace,
            RequestError::InUse { .. } => AllocError::NoSpace,
            RequestError::StorageFull => AllocError::StorageFull,
            _ => AllocError::Invalid,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RequestError {}
