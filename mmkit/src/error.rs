//! Typed errors shared by every allocator in mmkit.
//!
//! Every fallible operation returns one of these and, when it does, leaves the
//! allocator exactly as it was: an error never means "half done".
//!
//! ```
//! use mmkit::range::RangeAllocator;
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
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::Invalid => f.write_str("invalid allocation request"),
            AllocError::NoSpace => f.write_str("no free space satisfies the request"),
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
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::NotAllocated => f.write_str("address is not a live allocation"),
            FreeError::Invalid => f.write_str("invalid free request"),
        }
    }
}

/// An invariant violation found by a `check()` method. Seeing one is a bug in
/// mmkit; the message names the invariant and the place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError(pub String);

impl CheckError {
    /// Builds a `CheckError` from anything printable.
    pub fn new(msg: impl Into<String>) -> Self {
        CheckError(msg.into())
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant violated: {}", self.0)
    }
}

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
impl std::error::Error for CheckError {}

/// Returns `Err(CheckError)` with a formatted message when `cond` is false.
/// Used by the `check()` methods.
#[macro_export]
#[doc(hidden)]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::CheckError($crate::__format!($($arg)+)));
        }
    };
}
