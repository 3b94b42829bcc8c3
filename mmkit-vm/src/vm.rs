//! [`Vm`]: the system the kernel patches describe, over real memory.

use std::sync::Arc;

use mmkit::range::{RangeStats, DEFAULT_LAZY_MAX};
use mmkit::vblock::Counters;
use mmkit_vmalloc::VmError as LayerError;

use crate::budget::{MapBudget, HEADROOM, PER_RUN};
use crate::error::VmError;
use crate::phys::{Phys, PhysStats};
use crate::space::{
    is_map_refusal, Kind, MapRam, MemfdMmu, PhysFrames, Space, SpaceParts, SpaceStats,
};
use crate::sys::{self, Reservation};

/// How a [`Vm`] is laid out.
///
/// ```
/// let cfg = mmkit_vm::VmConfig::default();
/// assert_eq!(cfg.virt_size, 64 << 30);
/// assert!(cfg.lazy_unmap);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmConfig {
    /// Bytes of address space to reserve (the vmalloc area). Reserved
    /// `PROT_NONE` without backing: it costs page tables only when used.
    pub virt_size: u64,
    /// Most bytes of "physical memory" (the memfd) to use; it grows a
    /// pageblock (2 MiB) at a time up to this.
    pub phys_limit: u64,
    /// Lazily freed bytes above which a purge runs (the kernel's
    /// `lazy_max_pages`, 32 MiB for one CPU).
    pub lazy_max: u64,
    /// `true`: freed areas are unmapped in batches by purges (the kernel
    /// since 2008). `false`: every free unmaps at once and `vm_map_ram`
    /// uses whole areas, no per-CPU blocks (the design before; the
    /// experiments' baseline).
    pub lazy_unmap: bool,
    /// Per-CPU queues of the `vm_map_ram` front end; 0 means one per CPU
    /// this process may use.
    pub cpus: usize,
    /// Geometry of the per-CPU blocks (`page_size` must be the system's).
    pub vblock: mmkit::vblock::Config,
    /// The mapping budget: how many mappings (VMAs) this `Vm` may hold.
    /// Each run of consecutive frames mapped is charged two; a request
    /// that would pass the budget (less a headroom of 64 kept for
    /// unmappings, which may split a mapping) purges and retries, then
    /// fails with [`VmError::MapLimit`]. 0 means `/proc/sys/vm/max_map_count`
    /// less the mappings the process holds when the `Vm` is made, less an
    /// eighth of the limit (at least 256) for the rest of the process. See
    /// the crate docs for how many areas fit.
    pub max_maps: u64,
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            virt_size: 64 << 30,
            phys_limit: 1 << 30,
            lazy_max: DEFAULT_LAZY_MAX,
            lazy_unmap: true,
            cpus: 0,
            vblock: mmkit::vblock::Config::KERNEL,
            max_maps: 0,
        }
    }
}

/// Everything [`Vm::stats`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmStats {
    /// Areas, mappings, system calls, purges.
    pub space: SpaceStats,
    /// The memfd and its buddy.
    pub phys: PhysStats,
    /// The vmap allocator under everything (areas and blocks).
    pub vmap: RangeStats,
    /// The per-CPU `vm_map_ram` front end.
    pub vblock: Counters,
}

struct Inner {
    cfg: VmConfig,
    cpus: usize,
    space: Arc<Space>,
    /// The driver's `vm_map_ram` front end (none with `lazy_unmap` off).
    ram: Option<MapRam>,
}

/// A virtual memory system in user space: a memfd as physical memory
/// (frames managed by the buddy allocator), one address-space reservation
/// as the vmalloc area (managed by the vmap range allocator), real
/// mappings, and lazy unmapping batched into purges.
///
/// `Vm` is a cheap handle (an `Arc`): clone it into threads. Addresses are
/// plain `u64`s, as in the kernel; [`VBuf`](crate::VBuf) and
/// [`MirrorRing`](crate::MirrorRing) are the safe owning handles.
///
/// ```
/// use mmkit_vm::{Vm, VmConfig};
/// let vm = Vm::new(VmConfig::default())?;
/// let a = vm.vmalloc(10_000)?;           // 3 pages + a guard page
/// vm.vfree(a)?;                          // lazy: unmapped by a purge
/// assert!(vm.purge());
/// assert_eq!(vm.stats().space.unmap_calls, 1);
/// vm.check()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Vm {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("cfg", &self.inner.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Vm {
    /// Reserves the address space and creates the (empty) memfd.
    ///
    /// # Errors
    /// [`VmError::Invalid`] for a bad configuration (sizes not page
    /// multiples, a limit below one pageblock or above 2^31 frames, a
    /// vblock geometry for another page size, a mapping budget below its
    /// headroom); [`VmError::NoMemory`] when the heap refuses the frame
    /// tables (about 17 bytes a frame of `phys_limit`, under `RLIMIT_AS`
    /// say); [`VmError::Os`] when the system refuses the reservation or
    /// the memfd.
    pub fn new(cfg: VmConfig) -> Result<Vm, VmError> {
        let page = sys::page_size();
        if page != mmkit_vmalloc::PAGE {
            return Err(VmError::Invalid(
                "a page size other than the driver's 4 KiB",
            ));
        }
        // max_alloc first: the driver's front end maps at most MAX_PAGES.
        let vb_ok = cfg.vblock.max_alloc <= mmkit_vmalloc::MAX_PAGES as u64
            && cfg.vblock.page_size == page
            && cfg.vblock.validate().is_ok();
        if !vb_ok {
            return Err(VmError::Invalid("vblock geometry (page size, max_alloc)"));
        }
        if cfg.virt_size == 0 || cfg.virt_size % cfg.vblock.block_size() != 0 {
            return Err(VmError::Invalid(
                "virt_size is not a multiple of the block size",
            ));
        }
        if cfg.phys_limit / page >= 1 << 31 {
            return Err(VmError::Invalid("phys_limit above 2^31 frames"));
        }
        let cpus = match cfg.cpus {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n if n > 4096 => return Err(VmError::Invalid("more than 4096 cpus")),
            n => n,
        };
        let max_maps = match cfg.max_maps {
            0 => MapBudget::default_limit(),
            n => n,
        };
        if max_maps < HEADROOM + PER_RUN {
            return Err(match cfg.max_maps {
                // The process already holds nearly all its mappings.
                0 => VmError::MapLimit { limit: max_maps },
                _ => VmError::Invalid("max_maps leaves no mapping above the headroom"),
            });
        }
        let phys = Phys::new(cfg.phys_limit, page)?;
        let res = Reservation::new(cfg.virt_size).map_err(|e| VmError::os("mmap", e))?;
        let space = Arc::new(Space::new(SpaceParts {
            res,
            phys,
            page,
            lazy_max: cfg.lazy_max,
            lazy_unmap: cfg.lazy_unmap,
            max_maps,
        })?);
        let ram = if cfg.lazy_unmap {
            let ram = MapRam::with_geometry(Arc::clone(&space), cpus, cfg.vblock)
                .map_err(|_| VmError::Invalid("vblock configuration"))?;
            Some(ram)
        } else {
            None
        };
        Ok(Vm {
            inner: Arc::new(Inner {
                cfg,
                cpus,
                space,
                ram,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> VmConfig {
        self.inner.cfg
    }

    /// The page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.inner.space.page
    }

    /// The reserved virtual range `[start, end)`.
    pub fn virt_range(&self) -> (u64, u64) {
        let r = &self.inner.space.res;
        (r.base(), r.base() + r.len())
    }

    pub(crate) fn space(&self) -> &Space {
        &self.inner.space
    }

    // -----------------------------------------------------------------
    // vmalloc
    // -----------------------------------------------------------------

    /// Allocates `size` bytes of virtually contiguous memory: a range of
    /// the virtual space (with a guard page after it), frames from the
    /// buddy (high orders while there are some), mapped with one `mmap` per
    /// run of consecutive frames. The memory is not zeroed (frames are
    /// reused); see [`vzalloc`](Self::vzalloc).
    ///
    /// # Errors
    /// [`VmError::Invalid`] for 0 or an overflowing size;
    /// [`VmError::NoVirtualSpace`], [`VmError::LimitReached`],
    /// [`VmError::MapLimit`] (each after one purge and retry);
    /// [`VmError::FileSizeLimit`] when `RLIMIT_FSIZE` stops the memory file
    /// from growing; [`VmError::Os`] (a refused `mmap` is retried once
    /// after a purge too).
    ///
    /// ```
    /// # let vm = mmkit_vm::Vm::new(Default::default())?;
    /// let a = vm.vmalloc(4096)?;
    /// // SAFETY: the area is live and 4096 bytes long.
    /// unsafe { (a as *mut u8).write(7) };
    /// vm.vfree(a)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vmalloc(&self, size: u64) -> Result<u64, VmError> {
        self.space().create_area(size, 0, Kind::Vmalloc, false)
    }

    /// [`vmalloc`](Self::vmalloc) at an address aligned to `align` (a power
    /// of two; below a page means a page), as the kernel's
    /// `__vmalloc_node(size, align, ...)`.
    ///
    /// # Errors
    /// [`VmError::Invalid`] when `align` is not a power of two; otherwise as
    /// [`vmalloc`](Self::vmalloc).
    ///
    /// ```
    /// # let vm = mmkit_vm::Vm::new(Default::default())?;
    /// let a = vm.vmalloc_aligned(8192, 1 << 21)?;
    /// assert_eq!(a % (1 << 21), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vmalloc_aligned(&self, size: u64, align: u64) -> Result<u64, VmError> {
        if !align.is_power_of_two() {
            return Err(VmError::Invalid("alignment is not a power of two"));
        }
        self.space().create_area(size, align, Kind::Vmalloc, false)
    }

    /// [`vmalloc`](Self::vmalloc), then zeroes the memory.
    ///
    /// # Errors
    /// As [`vmalloc`](Self::vmalloc).
    pub fn vzalloc(&self, size: u64) -> Result<u64, VmError> {
        let a = self.vmalloc(size)?;
        zero(a, size);
        Ok(a)
    }

    /// Frees the vmalloc area at `addr`. Lazy: the area stays mapped, and
    /// its range and frames are not reused, until a purge unmaps it.
    ///
    /// # Errors
    /// [`VmError::NotAllocated`] when no vmalloc area starts at `addr`
    /// (double free, interior address, a `vmap` area);
    /// [`VmError::OwnedByHandle`] for the area of a [`VBuf`](crate::VBuf).
    /// Nothing changes then.
    pub fn vfree(&self, addr: u64) -> Result<(), VmError> {
        self.space().free_area(addr, true, false)
    }

    /// Resizes the vmalloc area at `addr` to `size` bytes without copying a
    /// byte (the driver's `vrealloc`): a size its pages hold keeps the area;
    /// a larger one grows it in place when the range after it is free, and
    /// otherwise maps its frames, and new ones after them, at a new area
    /// (the old mapping is freed lazily). Returns the area's address.
    ///
    /// # Errors
    /// As [`vmalloc`](Self::vmalloc) and [`vfree`](Self::vfree); on error
    /// the area is unchanged at `addr`.
    ///
    /// ```
    /// # let vm = mmkit_vm::Vm::new(Default::default())?;
    /// let a = vm.vmalloc(4096)?;
    /// let b = vm.vrealloc(a, 1 << 20)?;   // grown, in place here
    /// assert_eq!(a, b);
    /// assert_eq!(vm.stats().space.realloc_in_place, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vrealloc(&self, addr: u64, size: u64) -> Result<u64, VmError> {
        self.space().realloc(addr, size, false)
    }

    /// The size the live area at `addr` was allocated (or resized) with.
    pub fn area_len(&self, addr: u64) -> Option<u64> {
        self.space().area_len(addr)
    }

    // -----------------------------------------------------------------
    // Frames, vmap, vm_map_ram
    // -----------------------------------------------------------------

    /// Allocates `2^order` contiguous frames and returns the first pfn
    /// (`alloc_pages`). Map them with [`vm_map_ram`](Self::vm_map_ram) or
    /// [`vmap`](Self::vmap).
    ///
    /// # Errors
    /// [`VmError::Invalid`] for an order above the buddy's `max_order`;
    /// [`VmError::LimitReached`] (after one purge); [`VmError::Os`].
    pub fn alloc_pages(&self, order: u8) -> Result<u64, VmError> {
        self.space().alloc_user(order)
    }

    /// Frees frames from [`alloc_pages`](Self::alloc_pages). Frames that a
    /// stale mapping still shows go back to the buddy after the purge that
    /// removes it.
    ///
    /// # Errors
    /// [`VmError::NotAllocated`] when `pfn` does not start a block of that
    /// order from `alloc_pages` (double free, wrong order, a vmalloc frame).
    pub fn free_pages(&self, pfn: u64, order: u8) -> Result<(), VmError> {
        self.space().phys.free_user(pfn, order)
    }

    /// Pins each frame of `pfns` (see [`Phys::pin_user`]) so that a
    /// concurrent `free_pages` defers it instead of freeing it under the
    /// mapping being made. Unpin with [`Phys::unpin_user`].
    fn pin(&self, pfns: &[u64]) -> Result<(), VmError> {
        if pfns.is_empty() {
            return Err(VmError::Invalid("empty frame list"));
        }
        let phys = &self.space().phys;
        for (i, &pfn) in pfns.iter().enumerate() {
            if !phys.pin_user(pfn) {
                phys.unpin_user(&pfns[..i]);
                return Err(VmError::BadFrame { pfn });
            }
        }
        Ok(())
    }

    /// Maps the caller's frames (from [`alloc_pages`](Self::alloc_pages))
    /// into a new area, in order (`vmap`). A frame freed by another thread
    /// meanwhile is either refused here or freed once this mapping goes,
    /// as if the two calls had run one after the other.
    ///
    /// # Errors
    /// [`VmError::BadFrame`] for a frame not allocated by `alloc_pages`,
    /// [`VmError::Invalid`] for an empty list, and as
    /// [`vmalloc`](Self::vmalloc): a list of many runs of consecutive
    /// frames (`[p; 100_000]` is 100,000 runs) can pass the mapping budget
    /// ([`VmError::MapLimit`]).
    pub fn vmap(&self, pfns: &[u64]) -> Result<u64, VmError> {
        self.pin(pfns)?;
        let r = self.vmap_pinned(pfns);
        self.space().phys.unpin_user(pfns);
        r
    }

    fn vmap_pinned(&self, pfns: &[u64]) -> Result<u64, VmError> {
        let len = (pfns.len() as u64)
            .checked_mul(self.page_size())
            .ok_or(VmError::Invalid("size overflows"))?;
        self.space().create_area(len, 0, Kind::Vmap(pfns), false)
    }

    /// Unmaps an area from [`vmap`](Self::vmap) (lazily, as
    /// [`vfree`](Self::vfree)); the frames stay the caller's.
    ///
    /// # Errors
    /// [`VmError::NotAllocated`] when no vmap area starts at `addr`.
    pub fn vunmap(&self, addr: u64) -> Result<(), VmError> {
        self.space().free_area(addr, false, false)
    }

    /// Maps the caller's frames at a new address, fast (`vm_map_ram`): up to
    /// `vblock.max_alloc` pages come from the calling CPU's block
    /// (`sched_getcpu`), without the global lock; more go through
    /// [`vmap`](Self::vmap).
    ///
    /// # Errors
    /// As [`vmap`](Self::vmap).
    ///
    /// ```
    /// # let vm = mmkit_vm::Vm::new(Default::default())?;
    /// let pfn = vm.alloc_pages(2)?;                  // 4 frames
    /// let pfns: Vec<u64> = (pfn..pfn + 4).collect();
    /// let a = vm.vm_map_ram(&pfns)?;
    /// let b = vm.vm_map_ram(&pfns)?;                 // a second alias
    /// // SAFETY: both mappings are live and 4 pages long.
    /// unsafe {
    ///     (a as *mut u8).write(42);
    ///     assert_eq!((b as *const u8).read(), 42);  // same frames
    /// }
    /// vm.vm_unmap_ram(a, 4)?;
    /// vm.vm_unmap_ram(b, 4)?;
    /// vm.vm_unmap_aliases();                         // no stale mapping left
    /// vm.free_pages(pfn, 2)?;
    /// vm.check()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn vm_map_ram(&self, pfns: &[u64]) -> Result<u64, VmError> {
        let Some(ram) = self.small(pfns.len() as u64) else {
            return self.vmap(pfns);
        };
        self.pin(pfns)?;
        let r = match self.map_small(ram, pfns) {
            Err(e) if is_map_refusal(&e) => {
                self.vm_unmap_aliases();
                self.map_small(ram, pfns)
            }
            r => r,
        };
        self.space().phys.unpin_user(pfns);
        r
    }

    /// Maps `pfns` in a slot of the calling CPU's block, through the
    /// driver's front end (which clears what a failed map reached).
    fn map_small(&self, ram: &MapRam, pfns: &[u64]) -> Result<u64, VmError> {
        let space = self.space();
        let (mut mmu, mut src) = (MemfdMmu::new(space), PhysFrames::new(&space.phys));
        let cpu = sys::current_cpu() % self.inner.cpus;
        ram.map(&mut mmu, &mut src, cpu, pfns).map_err(|e| match e {
            LayerError::NoSpace { bytes } => VmError::NoVirtualSpace { size: bytes },
            _ => mmu.err.take().unwrap_or(VmError::Os {
                op: "mmap",
                errno: rustix::io::Errno::NOMEM.raw_os_error(),
            }),
        })
    }

    /// The front end, when it serves `pages` pages.
    fn small(&self, pages: u64) -> Option<&MapRam> {
        let ram = self.inner.ram.as_ref()?;
        (1..=self.inner.cfg.vblock.max_alloc)
            .contains(&pages)
            .then_some(ram)
    }

    /// Unmaps what [`vm_map_ram`](Self::vm_map_ram) mapped at `addr`
    /// (`pages` pages), from any thread. A block mapping stays until its
    /// block is purged or [`vm_unmap_aliases`](Self::vm_unmap_aliases)
    /// runs: touching it after this call is a bug, as in the kernel.
    ///
    /// # Errors
    /// [`VmError::NotAllocated`] when no mapping of `pages` pages starts at
    /// `addr`; [`VmError::Invalid`] for 0 pages. Nothing changes then.
    pub fn vm_unmap_ram(&self, addr: u64, pages: u64) -> Result<(), VmError> {
        if pages == 0 {
            return Err(VmError::Invalid("0 pages"));
        }
        let Some(ram) = self.small(pages) else {
            let len = pages.checked_mul(self.page_size());
            if self.space().area_len(addr) != len {
                return Err(VmError::NotAllocated { addr });
            }
            return self.vunmap(addr);
        };
        let space = self.space();
        let (mut mmu, mut src) = (MemfdMmu::new(space), PhysFrames::new(&space.phys));
        let cpu = sys::current_cpu() % self.inner.cpus;
        ram.unmap(&mut mmu, &mut src, cpu, addr, pages as usize)
            .map_err(|_| VmError::NotAllocated { addr })
    }

    /// Removes every stale mapping at once (`vm_unmap_aliases`): stale
    /// pages of live blocks, released blocks, lazily freed areas, and every
    /// range whose unmapping failed before, in one flush. After it, no
    /// frame is reachable through an address that was freed, except
    /// through ranges the kernel still refuses to unmap: those stay counted
    /// in [`SpaceStats::stuck_ranges`], their frames and addresses unused.
    pub fn vm_unmap_aliases(&self) {
        let space = self.space();
        match &self.inner.ram {
            Some(ram) => {
                let (mut mmu, mut src) = (MemfdMmu::new(space), PhysFrames::new(&space.phys));
                ram.unmap_aliases(&mut mmu, &mut src);
            }
            None => {
                space.purge();
            }
        }
        space.phys.retry_deferred();
    }

    /// Purges now: unmaps every lazily freed area and block (one call per
    /// run of adjacent ones) and retries every stuck one, returns their
    /// frames and addresses. Returns whether anything was unmapped.
    pub fn purge(&self) -> bool {
        self.space().purge().is_some()
    }

    /// Sets the lazy purge threshold in bytes.
    pub fn set_lazy_max(&self, bytes: u64) {
        self.space().set_lazy_max(bytes);
    }

    // -----------------------------------------------------------------
    // Handles' entry points
    // -----------------------------------------------------------------

    pub(crate) fn alloc_handle(&self, size: u64, mirror: bool) -> Result<u64, VmError> {
        let kind = if mirror { Kind::Mirror } else { Kind::Vmalloc };
        self.space().create_area(size, 0, kind, true)
    }

    pub(crate) fn free_handle(&self, addr: u64) -> Result<(), VmError> {
        self.space().free_area(addr, true, true)
    }

    pub(crate) fn realloc_handle(&self, addr: u64, size: u64) -> Result<u64, VmError> {
        self.space().realloc(addr, size, true)
    }

    // -----------------------------------------------------------------
    // Stats and check
    // -----------------------------------------------------------------

    /// Counters of every layer.
    pub fn stats(&self) -> VmStats {
        let space = self.space();
        VmStats {
            space: space.stats(),
            phys: space.phys.stats(),
            vmap: space.vmap_stats(),
            vblock: self
                .inner
                .ram
                .as_ref()
                .map(|r| r.counters())
                .unwrap_or_default(),
        }
    }

    /// Verifies that the vmap allocator, the buddy, the per-CPU blocks and
    /// the mappings agree: every allocated range is a live area, a lazily
    /// freed one, a stuck one or a block; every frame's map count equals
    /// the mappings that show it; no free frame is mapped; the mapping
    /// budget holds two mappings per run mapped. In debug builds it also
    /// runs [`check_mappings`](Self::check_mappings). For tests: call it
    /// when no other thread is using the `Vm`.
    ///
    /// # Errors
    /// A [`mmkit::CheckError`] naming the first disagreement.
    pub fn check(&self) -> Result<(), mmkit::CheckError> {
        let in_blocks = self.space().check().map_err(structure)?;
        let live = match &self.inner.ram {
            Some(ram) => {
                ram.check()?;
                ram.live_pages()
            }
            None => 0,
        };
        if in_blocks != live {
            return Err(structure(format!(
                "{in_blocks} pages mapped in vm_map_ram blocks, the front end says {live}"
            )));
        }
        if cfg!(debug_assertions) {
            self.check_mappings()?;
        }
        Ok(())
    }

    /// Compares the real mappings inside the reservation, as
    /// `/proc/self/maps` lists them, with the records: every page mapped
    /// must belong to a live, lazily freed or stuck area or to a
    /// `vm_map_ram` block, show the frame recorded (its offset in the
    /// memory file) read-write; every other page must be reserved
    /// (`PROT_NONE`). Anything mapped that no record explains is an error.
    /// [`check`](Self::check) runs it in debug builds. For tests: call it
    /// when no other thread is using the `Vm`.
    ///
    /// # Errors
    /// A [`mmkit::CheckError`] naming the first difference (or saying why
    /// the mappings could not be read).
    pub fn check_mappings(&self) -> Result<(), mmkit::CheckError> {
        self.space().check_mappings().map_err(structure)
    }
}

/// A disagreement of the records with the allocators or page tables.
fn structure(e: String) -> mmkit::CheckError {
    let kind = mmkit::error::Invariant::Structure;
    mmkit::CheckError::new(module_path!(), kind, None, e)
}

/// Zeroes `[addr, addr + len)`, a live area just allocated.
pub(crate) fn zero(addr: u64, len: u64) {
    // SAFETY: the caller just allocated and mapped `[addr, addr + len)`
    // read-write, and no reference to it exists yet.
    unsafe { std::ptr::write_bytes(addr as usize as *mut u8, 0, len as usize) };
}
