//! [`VmError`]: why a call of the layer failed. Every variant says what
//! was wrong and where; a call that fails changes nothing, except where its
//! doc says what it kept (a map that failed half way is taken down).

use core::fmt;

/// Why a layer operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VmError {
    /// A request for no pages or no bytes.
    Empty,
    /// More pages than the call takes (`vm_map_ram`'s limit).
    TooManyPages {
        /// Pages asked for.
        pages: u64,
        /// The most the call maps.
        max: u64,
    },
    /// A size whose page count, or span with its guard page, overflows.
    TooLarge {
        /// Bytes asked for.
        bytes: u64,
    },
    /// An alignment that is not a power of two of at least a page.
    BadAlign {
        /// The alignment asked for.
        align: u64,
    },
    /// The range allocator does not place ranges by the layer's placement
    /// ([`Vmalloc::set_placement`](crate::Vmalloc::set_placement)): it
    /// places lowest fit only.
    PlacementRefused,
    /// A CPU number the front end has no queue for.
    BadCpu {
        /// The CPU asked for.
        cpu: usize,
        /// CPUs the front end serves.
        cpus: usize,
    },
    /// No address space of that size is left, after a purge.
    NoSpace {
        /// Bytes asked for (guard page included).
        bytes: u64,
    },
    /// The frame source has no frames left, after a purge.
    NoFrames {
        /// Frames asked for.
        pages: u64,
    },
    /// The MMU could not map `va` (no page-table memory, or the machine
    /// refused), after a purge.
    MapFailed {
        /// The first page it could not map.
        va: u64,
    },
    /// A `vmap` whose map failed, and the flush that took down the pages it
    /// mapped was refused: some CPU may still reach the first `held` frames
    /// given, so the layer holds them (under
    /// [`FramePolicy::AfterFlush`](crate::FramePolicy::AfterFlush)) and
    /// gives them to the frame source once a flush releases them. The
    /// caller keeps the others.
    FramesHeld {
        /// Leading frames the layer holds.
        held: u64,
    },
    /// Nothing starts at `va`: never allocated, or freed long ago.
    NotMapped {
        /// The address given.
        va: u64,
    },
    /// `va` starts an area that was freed already (it waits for its flush,
    /// or was released lately).
    DoubleFree {
        /// The address given.
        va: u64,
    },
    /// `va` is inside the live area that starts at `start`, not its start.
    Interior {
        /// The address given.
        va: u64,
        /// The live area's start.
        start: u64,
    },
    /// A mapping starts at `va`, but not one of `pages` pages.
    WrongPageCount {
        /// The address given.
        va: u64,
        /// The page count given.
        pages: u64,
    },
    /// `va` is a `vmap` area: unmap it with `vunmap`, its frames are the
    /// caller's.
    NotVmalloc {
        /// The address given.
        va: u64,
    },
    /// `va` is a `vmalloc` area: free it with `vfree`, its frames are the
    /// layer's.
    NotVmap {
        /// The address given.
        va: u64,
    },
    /// `va` is in use (a live area, a `vm_map_ram` block, or freed and
    /// waiting for its flush): it cannot be given back or written over.
    InUse {
        /// The address given.
        va: u64,
    },
    /// `va` is not a range [`reserve`](crate::Vmalloc::reserve) handed out
    /// (or [`take`](crate::Vmalloc::take) took out of the books).
    NotReserved {
        /// The address given.
        va: u64,
    },
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use VmError::*;
        match *self {
            Empty => f.write_str("a request for no pages"),
            TooManyPages { pages, max } => {
                write!(f, "{pages} pages asked for, at most {max} in one call")
            }
            TooLarge { bytes } => write!(f, "{bytes:#x} bytes overflow the address space"),
            BadAlign { align } => {
                write!(
                    f,
                    "alignment {align:#x} is not a power of two of a page or more"
                )
            }
            PlacementRefused => f.write_str("the range allocator does not place by this policy"),
            BadCpu { cpu, cpus } => write!(f, "CPU {cpu} asked for, the front end has {cpus}"),
            NoSpace { bytes } => write!(f, "no {bytes:#x} bytes of address space left"),
            NoFrames { pages } => write!(f, "no {pages} frames left in the frame source"),
            MapFailed { va } => write!(f, "the MMU could not map {va:#x}"),
            FramesHeld { held } => write!(
                f,
                "the map failed and its takedown flush was refused: the layer holds the first {held} frames until a flush releases them"
            ),
            NotMapped { va } => write!(f, "nothing is mapped at {va:#x}"),
            DoubleFree { va } => write!(f, "{va:#x} was freed already"),
            Interior { va, start } => {
                write!(f, "{va:#x} is inside the area at {start:#x}, not its start")
            }
            WrongPageCount { va, pages } => {
                write!(f, "the mapping at {va:#x} is not {pages} pages long")
            }
            NotVmalloc { va } => write!(f, "{va:#x} is a vmap area: vunmap it"),
            NotVmap { va } => write!(f, "{va:#x} is a vmalloc area: vfree it"),
            InUse { va } => write!(
                f,
                "{va:#x} is in use (live, a block, or awaiting its flush)"
            ),
            NotReserved { va } => write!(f, "{va:#x} is not a reserved range"),
        }
    }
}

impl core::error::Error for VmError {}
