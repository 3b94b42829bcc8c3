//! Typed errors shared by every allocator in mmkit.
//!
//! Every fallible operation returns one of these and, when it does, leaves the
//! allocator exactly as it was: an error never means "half done".
//!
//! ```
//! use mmkit::vmap::VmapAllocator;
//! use mmkit::{AllocError, FreeError};
//!
//! let mut va = VmapAllocator::new(0, 4096).unwrap();
//! assert_eq!(va.alloc(0, 1), Err(AllocError::Invalid)); // size 0
//! assert_eq!(va.alloc(8, 3), Err(AllocError::Invalid)); // align not a power of two
//! assert_eq!(va.alloc(8192, 1), Err(AllocError::NoSpace));
//! assert_eq!(va.free(7), Err(FreeError::NotAllocated));
//! assert_eq!(AllocError::NoSpace.to_string(), "no free space satisfies the request");
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Why an allocation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllocError {
    /// The request itself is malformed: size 0, an alignment that is not a
    /// power of two, an empty or inverted window, an order or size above the
    /// allocator's maximum.
    Invalid,
    /// The request is well formed but no free space satisfies it (also after
    /// any purge or retry the allocator is documented to attempt). From a
    /// constructor: the heap refused the metadata for the size asked.
    NoSpace,
    /// The allocator keeps its metadata in fixed storage (no heap), and
    /// that storage has no room for what the allocation would need.
    StorageFull,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::Invalid => f.write_str("invalid allocation request"),
            AllocError::NoSpace => f.write_str("no free space satisfies the request"),
            AllocError::StorageFull => f.write_str("the allocator's fixed storage is full"),
        }
    }
}

/// Why a free was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FreeError {
    /// The address (or address and size/order) does not name a live
    /// allocation: a double free, an interior address, or one never handed
    /// out.
    NotAllocated,
    /// The request is malformed before any lookup: an order above the
    /// maximum, a zero page count, an address outside the managed space.
    Invalid,
    /// A free that carries a size (`free_sized`) names a live area of
    /// another size.
    SizeMismatch,
    /// The allocator's fixed storage has no room for the metadata the free
    /// needs (a free block that merges with nothing takes a slot).
    StorageFull,
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::NotAllocated => f.write_str("address is not a live allocation"),
            FreeError::Invalid => f.write_str("invalid free request"),
            FreeError::SizeMismatch => f.write_str("size does not match the live area"),
            FreeError::StorageFull => f.write_str("the allocator's fixed storage is full"),
        }
    }
}

/// Why free space from a memory map was refused
/// ([`VmapAllocator::add_free`](crate::vmap::VmapAllocator::add_free)).
/// Nothing changed.
///
/// # Examples
/// ```
/// use mmkit::error::AddFreeError;
/// use mmkit::vmap::VmapAllocator;
/// let mut va = VmapAllocator::new_empty();
/// va.add_free(0x1000, 0x8000).unwrap();
/// assert_eq!(
///     va.add_free(0x7000, 0x9000),
///     Err(AddFreeError::Overlaps { start: 0x7000, end: 0x8000 })
/// );
/// assert_eq!(va.add_free(5, 5), Err(AddFreeError::Empty { start: 5, end: 5 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddFreeError {
    /// The range is empty or inverted (`start >= end`).
    Empty {
        /// Start asked for.
        start: u64,
        /// End asked for.
        end: u64,
    },
    /// Part of the range is managed already (free, live or lazily freed):
    /// `[start, end)` is the first such part.
    Overlaps {
        /// First managed byte inside the range asked for.
        start: u64,
        /// One past the last byte of that managed part inside the range.
        end: u64,
    },
    /// The allocator keeps its metadata in fixed storage, which has no room
    /// for the new range.
    StorageFull,
}

impl fmt::Display for AddFreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AddFreeError::Empty { start, end } => {
                write!(f, "range [{start:#x}, {end:#x}) is empty")
            }
            AddFreeError::Overlaps { start, end } => {
                write!(f, "[{start:#x}, {end:#x}) is managed already")
            }
            AddFreeError::StorageFull => f.write_str("the allocator's fixed storage is full"),
        }
    }
}

/// The kind of invariant a `check()` found broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum Invariant {
    /// A counter (free, live, lazy bytes; list lengths; page counts)
    /// disagrees with what the structure holds when recounted.
    Accounting,
    /// Ranges, areas or blocks are out of order, overlap, leave a gap, or
    /// are not merged where they must be.
    Layout,
    /// A link, index, list membership, owner tag or tree balance is broken.
    Structure,
    /// A cached hint (a subtree maximum, an alignment summary, a contiguity
    /// hint, a search cache) disagrees with a recomputation.
    Hint,
    /// A value lies outside its limits: past the space or span, misaligned,
    /// above a maximum order or threshold.
    Bounds,
}

impl Invariant {
    /// A short lowercase name (`"accounting"`, `"layout"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Invariant::Accounting => "accounting",
            Invariant::Layout => "layout",
            Invariant::Structure => "structure",
            Invariant::Hint => "hint",
            Invariant::Bounds => "bounds",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An invariant violation found by a `check()` method. Seeing one is a bug in
/// mmkit (or in the caller of a `pub(crate)`-level structure it checks).
///
/// It says which allocator ([`component`](Self::component), the module
/// path), which kind of invariant ([`invariant`](Self::invariant)), where
/// ([`at`](Self::at): the address, pfn, bit, slot or index involved, when
/// there is one) and what exactly ([`detail`](Self::detail)).
///
/// # Examples
/// ```
/// use mmkit::error::{CheckError, Invariant};
/// let e = CheckError::new("mmkit::vmap", Invariant::Accounting, Some(0x4000), "free bytes 8 != counter 16");
/// assert_eq!(e.invariant(), Invariant::Accounting);
/// assert_eq!(e.at(), Some(0x4000));
/// assert_eq!(
///     e.to_string(),
///     "mmkit::vmap: accounting invariant violated at 0x4000: free bytes 8 != counter 16"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError {
    component: &'static str,
    invariant: Invariant,
    at: Option<u64>,
    detail: String,
}

impl CheckError {
    /// A violation of `invariant` in `component` (a module path, e.g.
    /// `"mmkit::vmap"`), at `at` when a place is known.
    pub fn new(
        component: &'static str,
        invariant: Invariant,
        at: Option<u64>,
        detail: impl Into<String>,
    ) -> Self {
        CheckError {
            component,
            invariant,
            at,
            detail: detail.into(),
        }
    }

    /// Where the checker that found it lives (a module path).
    pub fn component(&self) -> &'static str {
        self.component
    }

    /// Which kind of invariant is broken.
    pub fn invariant(&self) -> Invariant {
        self.invariant
    }

    /// The address, pfn, bit, slot or index involved, if the check knows one.
    pub fn at(&self) -> Option<u64> {
        self.at
    }

    /// The message: what was found, and what was expected.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The same error with `outer` (e.g. `"chunk 3"`) prefixed to the detail,
    /// for a checker that runs a sub-checker per element.
    #[must_use]
    pub fn within(mut self, outer: impl fmt::Display) -> Self {
        self.detail = alloc::format!("{outer}: {}", self.detail);
        self
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} invariant violated",
            self.component, self.invariant
        )?;
        if let Some(at) = self.at {
            write!(f, " at {at:#x}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// A place for [`CheckError::at`] from any unsigned integer type.
#[doc(hidden)]
pub trait CheckAt {
    fn check_at(self) -> u64;
}

macro_rules! check_at {
    ($($t:ty),*) => {$(
        impl CheckAt for $t {
            #[inline]
            fn check_at(self) -> u64 {
                self as u64
            }
        }
    )*};
}
check_at!(u8, u16, u32, u64, usize);

/// `n` copies of `value`, or [`AllocError::NoSpace`] when the heap refuses
/// them: metadata sized by a caller's argument must not abort the process.
pub(crate) fn try_vec<T: Clone>(n: usize, value: T) -> Result<Vec<T>, AllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| AllocError::NoSpace)?;
    v.resize(n, value);
    Ok(v)
}

#[cfg(feature = "std")]
impl std::error::Error for AllocError {}
#[cfg(feature = "std")]
impl std::error::Error for FreeError {}
#[cfg(feature = "std")]
impl std::error::Error for AddFreeError {}
#[cfg(feature = "std")]
impl std::error::Error for CheckError {}

/// Returns `Err(CheckError)` when `cond` is false: `ensure!(cond, Kind,
/// "message", args..)` or, naming the place, `ensure!(cond, Kind @ at,
/// "message", args..)`, where `Kind` is an [`Invariant`] variant. Used by
/// the `check()` methods.
#[macro_export]
#[doc(hidden)]
macro_rules! ensure {
    ($cond:expr, $kind:ident @ $at:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::CheckError::new(
                module_path!(),
                $crate::error::Invariant::$kind,
                Some($crate::error::CheckAt::check_at($at)),
                $crate::__format!($($arg)+),
            ));
        }
    };
    ($cond:expr, $kind:ident, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::CheckError::new(
                module_path!(),
                $crate::error::Invariant::$kind,
                None,
                $crate::__format!($($arg)+),
            ));
        }
    };
}
