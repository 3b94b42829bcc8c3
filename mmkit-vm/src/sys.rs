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
use rustix::fs::{fallocate, fstat, ftruncate, memfd_create, FallocateFlags, MemfdFlags};
use rustix::mm::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use rustix::process::{getrlimit, Resource};

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
    /// until touched. A length above the process's file-size limit
    /// (`RLIMIT_FSIZE`) is refused before the call: the kernel would send
    /// `SIGXFSZ`, whose default action kills the process.
    pub(crate) fn set_len(&self, bytes: u64) -> Result<(), Grow> {
        if let Some(limit) = getrlimit(Resource::Fsize).current {
            if bytes > limit {
                return Err(Grow::FileSizeLimit(limit));
            }
        }
        match ftruncate(&self.fd, bytes) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::FBIG) => Err(Grow::FileSizeLimit(bytes)),
            Err(e) => Err(Grow::Os(os(e))),
        }
    }

    /// Zeroes `[offset, offset + len)` of the file by punching a hole in
    /// it (the pages read as zero and hold no memory until written).
    pub(crate) fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        fallocate(&self.fd, flags, offset, len).map_err(os)
    }

    /// The file's inode number, as `/proc/self/maps` shows it.
    pub(crate) fn inode(&self) -> io::Result<u64> {
        Ok(fstat(&self.fd).map_err(os)?.st_ino)
    }
}

/// Why the memfd did not grow.
#[derive(Debug)]
pub(crate) enum Grow {
    /// The length would pass `RLIMIT_FSIZE` (its soft value, in bytes).
    FileSizeLimit(u64),
    /// Another refusal.
    Os(io::Error),
}

/// The kernel's limit on mappings (VMAs) per process,
/// `/proc/sys/vm/max_map_count`; `None` when unreadable.
pub(crate) fn max_map_count() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/sys/vm/max_map_count").ok()?;
    s.trim().parse().ok()
}

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapLine {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The four permission characters, such as `rw-s` or `---p`.
    pub(crate) perms: [u8; 4],
    pub(crate) offset: u64,
    pub(crate) inode: u64,
}

/// The process's mappings (VMAs), in address order.
pub(crate) fn mappings() -> io::Result<Vec<MapLine>> {
    let text = std::fs::read_to_string("/proc/self/maps")?;
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected /proc/self/maps line",
        )
    };
    text.lines()
        .map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, offset) = (f.next(), f.next(), f.next());
            let (_dev, inode) = (f.next(), f.next());
            let (start, end) = range.and_then(|r| r.split_once('-')).ok_or_else(bad)?;
            let hex = |t: &str| u64::from_str_radix(t, 16).map_err(|_| bad());
            let perms: [u8; 4] = perms
                .and_then(|p| p.as_bytes().try_into().ok())
                .ok_or_else(bad)?;
            Ok(MapLine {
                start: hex(start)?,
                end: hex(end)?,
                perms,
                offset: hex(offset.ok_or_else(bad)?)?,
                inode: inode.and_then(|i| i.parse().ok()).ok_or_else(bad)?,
            })
        })
        .collect()
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
        // Removing a whole range never splits a mapping, so the kernel has
        // no reason to refuse; if it still does, the range stays reserved
        // (inaccessible or mapping our memfd, which the mapping keeps
        // alive) and nothing else can be placed there: leaked, not unsafe.
        if let Err(e) = r {
            eprintln!("mmkit-vm: munmap of the reservation failed: {e}");
        }
    }
}
