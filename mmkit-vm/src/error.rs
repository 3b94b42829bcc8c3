//! The one error type of mmkit-vm.

use std::fmt;

/// Why an operation failed. Every failing call leaves the [`Vm`](crate::Vm)
/// as it was: no area, frame or mapping is leaked or half made.
///
/// ```
/// use mmkit_vm::VmError;
/// let e = VmError::LimitReached { limit: 1 << 30 };
/// assert_eq!(e.to_string(), "physical memory limit reached (1073741824 bytes)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VmError {
    /// A bad argument: a size of 0, a size that overflows, an empty frame
    /// list, a bad configuration. The text says which.
    Invalid(&'static str),
    /// No free range of `size` bytes in the virtual space, even after a
    /// purge of lazily freed areas.
    NoVirtualSpace {
        /// Bytes asked for (with the guard page).
        size: u64,
    },
    /// The physical memory limit is reached: the memfd cannot grow and no
    /// free frame is left, even after a purge.
    LimitReached {
        /// The configured limit in bytes.
        limit: u64,
    },
    /// The mapping budget is spent: the call would need more mappings
    /// (VMAs: about two for each run of consecutive frames it maps) than
    /// the `Vm` may use, even after a purge. The budget comes from
    /// [`VmConfig::max_maps`](crate::VmConfig::max_maps), by default from
    /// `/proc/sys/vm/max_map_count`; the kernel refuses beyond it.
    MapLimit {
        /// The budget in mappings.
        limit: u64,
    },
    /// The heap refused a table the `Vm` needs (under `RLIMIT_AS`, or out
    /// of memory).
    NoMemory {
        /// Which table.
        what: &'static str,
        /// Its size in bytes.
        bytes: u64,
    },
    /// The memfd cannot grow: the process's file-size limit
    /// (`RLIMIT_FSIZE`, `ulimit -f`) is below the length it needs.
    FileSizeLimit {
        /// The limit in bytes.
        limit: u64,
    },
    /// The operating system refused memory or a mapping.
    Os {
        /// What was being done (`"mmap"`, `"ftruncate"`, ...).
        op: &'static str,
        /// The `errno` value.
        errno: i32,
    },
    /// A frame list names a frame that is not allocated by
    /// [`Vm::alloc_pages`](crate::Vm::alloc_pages), or is out of range.
    BadFrame {
        /// The offending page frame number.
        pfn: u64,
    },
    /// No live area or mapping starts at `addr` with that size (double
    /// free, interior or foreign address, wrong page count).
    NotAllocated {
        /// The address (or pfn, for frame frees) given.
        addr: u64,
    },
    /// The area at `addr` belongs to an owning handle
    /// ([`VBuf`](crate::VBuf), [`MirrorRing`](crate::MirrorRing)) and is
    /// freed by dropping it.
    OwnedByHandle {
        /// The area's address.
        addr: u64,
    },
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::Invalid(why) => write!(f, "invalid argument: {why}"),
            VmError::NoVirtualSpace { size } => {
                write!(f, "no free virtual range of {size} bytes")
            }
            VmError::LimitReached { limit } => {
                write!(f, "physical memory limit reached ({limit} bytes)")
            }
            VmError::MapLimit { limit } => {
                write!(f, "mapping budget reached ({limit} mappings)")
            }
            VmError::NoMemory { what, bytes } => write!(
                f,
                "the heap refused {what} ({bytes} bytes): RLIMIT_AS or memory"
            ),
            VmError::FileSizeLimit { limit } => write!(
                f,
                "the file-size limit (RLIMIT_FSIZE, {limit} bytes) stops physical memory from growing"
            ),
            VmError::Os { op, errno } => write!(
                f,
                "{op} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            VmError::BadFrame { pfn } => write!(f, "frame {pfn} is not an allocated frame"),
            VmError::NotAllocated { addr } => write!(f, "nothing allocated at {addr:#x}"),
            VmError::OwnedByHandle { addr } => {
                write!(f, "the area at {addr:#x} is owned by a handle: drop it")
            }
        }
    }
}

impl std::error::Error for VmError {}

impl VmError {
    /// An operating-system error from `op`.
    pub(crate) fn os(op: &'static str, e: std::io::Error) -> Self {
        VmError::Os {
            op,
            errno: e.raw_os_error().unwrap_or(0),
        }
    }
}
