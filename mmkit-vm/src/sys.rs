//! The operating system behind one small interface: a memfd that plays the
//! machine's RAM, and one reserved range of address space that plays the
//! vmalloc area. Every `unsafe` block of the crate that makes a system call
//! is here; the rest of the crate calls these safe wrappers.
//!
//! The reservation is never given back piecewise: "unmapping" an area
//! replaces it with fresh `PROT_NONE` reserved memory in one `mmap` call,
//! which drops the memfd pages and flushes their TLB entries (the kernel's
//! `vunmap_range` + `flush_tlb_kernel_range`) while no other `mmap` of the
//! process can land inside our range.

use std::io;
use std::ptr;

use rustix::fd::OwnedFd;
use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
use rustix::mm::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};

/// The system page size in bytes.
pub(crate) fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// The CPU the calling thread runs on (`sched_getcpu`).
pub(crate) fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

/// Converts a rustix error into `std::io::Error`.
fn os(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// An anonymous memory file: the machine's "physical memory". Page frame
/// `pfn` is the file's bytes `[pfn * page, (pfn + 1) * page)`.
#[derive(Debug)]
pub(crate) struct Memfd {
    fd: OwnedFd,
}

impl Memfd {
    /// A new, empty memfd (close-on-exec).
    pub(crate) fn new(name: &str) -> io::Result<Self> {
        let fd = memfd_create(name, MemfdFlags::CLOEXEC).map_err(os)?;
        Ok(Memfd { fd })
    }

    /// Sets the file's length; new bytes read as zero and use no memory
    /// until touched.
    pub(crate) fn set_len(&self, bytes: u64) -> io::Result<()> {
        ftruncate(&self.fd, bytes).map_err(os)
    }
}

/// One reserved range of address space, `PROT_NONE` and `MAP_NORESERVE`
/// (no memory or swap is committed), unmapped whole on drop.
///
/// Invariant: `[base, base + len)` is ours for the reservation's lifetime.
/// Every page in it is either reserved (`PROT_NONE`) or maps memfd pages
/// read-write, and only this crate changes which.
#[derive(Debug)]
pub(crate) struct Reservation {
    base: usize,
    len: usize,
}

impl Reservation {
    /// Reserves `len` bytes (a multiple of the page size) anywhere.
    pub(crate) fn new(len: u64) -> io::Result<Self> {
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        // SAFETY: a null hint lets the kernel choose an unused range, so no
        // existing memory (and no Rust reference) is affected.
        let p = unsafe { mmap_anonymous(ptr::null_mut(), len, ProtFlags::empty(), flags) }
            .map_err(os)?;
        Ok(Reservation {
            base: p as usize,
            len,
        })
    }

    /// First address of the range.
    pub(crate) fn base(&self) -> u64 {
        self.base as u64
    }

    /// Length of the range in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len as u64
    }

    /// The pointer and length for `[addr, addr + len)`, which the caller
    /// (this crate's allocators) guarantees lies inside the reservation.
    fn span(&self, addr: u64, len: u64) -> (*mut std::ffi::c_void, usize) {
        debug_assert!(addr >= self.base() && addr + len <= self.base() + self.len());
        (addr as usize as *mut std::ffi::c_void, len as usize)
    }

    /// Maps the memfd's bytes `[offset, offset + len)` read-write and shared
    /// at `addr`, with page tables populated at once (vmalloc maps eagerly).
    ///
    /// The caller must own `[addr, addr + len)`: an allocated area of the
    /// range allocator that nothing references yet.
    pub(crate) fn map(&self, addr: u64, len: u64, mem: &Memfd, offset: u64) -> io::Result<()> {
        let (p, n) = self.span(addr, len);
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        let flags = MapFlags::SHARED | MapFlags::FIXED | MapFlags::POPULATE;
        // SAFETY: `[p, p + n)` lies in our reservation and belongs to an area
        // just allocated to the caller, so no Rust reference points into it;
        // MAP_FIXED replaces only our own reserved pages.
        unsafe { mmap(p, n, prot, flags, &mem.fd, offset) }.map_err(os)?;
        Ok(())
    }

    /// Unmaps `[addr, addr + len)` by putting reserved memory back: one
    /// system call that removes the pages and flushes their TLB entries.
    ///
    /// The caller must guarantee that nothing references the range any more
    /// (its areas were freed and their handles dropped).
    pub(crate) fn unmap(&self, addr: u64, len: u64) -> io::Result<()> {
        let (p, n) = self.span(addr, len);
        let flags = MapFlags::PRIVATE | MapFlags::FIXED | MapFlags::NORESERVE;
        // SAFETY: the range lies in our reservation and the caller freed
        // every area in it, so no live Rust reference points into it.
        unsafe { mmap_anonymous(p, n, ProtFlags::empty(), flags) }.map_err(os)?;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: the reservation is being dropped, and every handle that
        // points into it holds a reference to its owner, so none is alive.
        let r = unsafe { munmap(self.base as *mut std::ffi::c_void, self.len) };
        debug_assert!(r.is_ok(), "munmap of our own reservation");
    }
}
