//! The names most programs need, in one import: `use mmkit::prelude::*;`.
//!
//! ```
//! use mmkit::prelude::*;
//!
//! let mut va = VmapAllocator::new(0, 1 << 20).unwrap();
//! let a = va.allocate(Request::bytes(4096).unwrap().align(4096)).unwrap();
//! assert_eq!(a, 0);
//! let mut zone = BuddyAllocator::new(0, 1024, BuddyConfig::default()).unwrap();
//! zone.add_free_range(0, 1024).unwrap();
//! assert_eq!(zone.alloc(0, MigrateType::Movable), Ok(0));
//! ```

pub use crate::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
pub use crate::error::{AddFreeError, AllocError, CheckError, FreeError};
#[cfg(feature = "lock_api")]
pub use crate::lock::Guarded;
pub use crate::percpu::{PcpuPtr, PercpuAllocator};
pub use crate::range::RangeAllocator;
pub use crate::request::{Policy, Request, RequestError};
pub use crate::vblock::VblockAllocator;
pub use crate::vmap::VmapAllocator;
