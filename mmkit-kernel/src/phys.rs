//! Physical memory: the usable RAM of `hvm_start_info`'s memory map under
//! `mmkit::buddy`, behind per-CPU page lists (`LockedZone`) keyed by the
//! CPU id: each CPU's lists have their own spin lock, and the zone lock is
//! taken only to refill and drain them, as the kernel's `pcp->lock` and
//! `zone->lock`. The heap takes its region first (the buddy allocator's
//! tables live on it).

use core::ptr::read_volatile;

use mmkit::buddy::pcp::{LockedZone, PcpConfig};
use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
use spin::Once;

use crate::{boot, heap, println};

/// Bytes per page.
pub const PAGE: u64 = 4096;
/// Bytes of RAM the heap takes up to 1 GiB of RAM (at most a quarter of
/// it); above, an eighth of RAM (Linux's stock test sizes keep 10^5 areas
/// live on every CPU).
const HEAP_MAX: u64 = 48 << 20;

/// The zone with its per-CPU lists, each behind its own lock.
static ZONE: Once<LockedZone<spin::Mutex<()>>> = Once::new();

/// A usable RAM range from the boot memory map.
#[derive(Debug, Clone, Copy)]
pub struct Ram {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

fn read_u32(pa: u64) -> u32 {
    // SAFETY: `pa` lies in hvm_start_info or its memory map, which the boot
    // loader placed in identity-mapped RAM that nothing else writes.
    unsafe { read_volatile(pa as *const u32) }
}

fn read_u64(pa: u64) -> u64 {
    u64::from(read_u32(pa)) | u64::from(read_u32(pa + 4)) << 32
}

/// Reads the usable ranges (type 1) of the memory map: up to 32.
pub fn memory_map(info: u64) -> ([Ram; 32], usize) {
    assert_eq!(read_u32(info), 0x336e_c578, "hvm_start_info magic");
    let map = read_u64(info + 40);
    let n = read_u32(info + 48) as u64;
    let mut out = [Ram { start: 0, end: 0 }; 32];
    let mut k = 0;
    for i in 0..n {
        let e = map + i * 24;
        let (addr, size, ty) = (read_u64(e), read_u64(e + 8), read_u32(e + 16));
        if ty == 1 && k < out.len() {
            out[k] = Ram {
                start: addr,
                end: addr + size,
            };
            k += 1;
        }
    }
    (out, k)
}

/// The kernel command line (`-append`), up to `buf.len()` bytes.
pub fn cmdline(info: u64, buf: &mut [u8]) -> &str {
    let at = read_u64(info + 24);
    let mut n = 0;
    if at != 0 {
        while n < buf.len() {
            // SAFETY: the command line is a NUL-terminated string the boot
            // loader placed in identity-mapped RAM.
            let b = unsafe { read_volatile((at + n as u64) as *const u8) };
            if b == 0 {
                break;
            }
            buf[n] = b;
            n += 1;
        }
    }
    core::str::from_utf8(&buf[..n]).unwrap_or("")
}

/// Sets up the heap and the buddy allocator from the memory map at `info`.
/// Below 1 MiB and the kernel image stay out. Returns usable pages.
pub fn init(info: u64, cpus: usize) -> u64 {
    let (ram, n) = memory_map(info);
    let (_, kend) = boot::kernel_range();
    let floor = (kend + PAGE - 1) & !(PAGE - 1);
    let total: u64 = ram[..n].iter().map(|r| r.end - r.start).sum();
    let heap_size = if total > 1 << 30 {
        total / 8
    } else {
        HEAP_MAX.min(total / 4)
    } & !(PAGE - 1);
    let mut heap_at = None;
    for r in &ram[..n] {
        let s = r.start.max(floor);
        if heap_at.is_none() && r.end > s && r.end - s >= heap_size {
            heap_at = Some(s);
        }
    }
    let heap_start = heap_at.expect("a RAM range large enough for the heap");
    heap::init(heap_start, heap_start + heap_size);
    let end_pfn = ram[..n].iter().map(|r| r.end / PAGE).max().unwrap_or(0);
    let mut zone =
        BuddyAllocator::new(0, end_pfn, BuddyConfig::default()).expect("buddy allocator");
    let mut pages = 0;
    for r in &ram[..n] {
        let mut s = r.start.max(floor);
        if (heap_start..heap_start + heap_size).contains(&s) {
            s = heap_start + heap_size;
        }
        let s = s.div_ceil(PAGE);
        let e = r.end / PAGE;
        if e > s {
            zone.add_free_range(s, e - s)
                .expect("memory map ranges are disjoint");
            pages += e - s;
        }
    }
    println!(
        "phys: {} MiB usable, heap {} MiB at {:#x}, buddy {} pages, {} per-CPU lists",
        total >> 20,
        heap_size >> 20,
        heap_start,
        pages,
        cpus
    );
    let cfg = PcpConfig {
        cpus,
        high: pcp_high(pages + heap_size / PAGE, cpus),
        ..PcpConfig::default()
    };
    ZONE.call_once(|| LockedZone::new(zone, cfg).expect("per-CPU lists"));
    pages
}

/// Pages each CPU's lists may hold: an eighth of the zone's `pages` (the
/// buddy allocator's and the heap's: Linux's slab takes its pages from the
/// zone) split over the CPUs, the ceiling (`pcp->high_max`) Linux 6.12
/// gives its per-CPU lists.
/// Linux starts lower and raises `pcp->high` by a batch at every refill up
/// to that ceiling, so a run of allocations and then of frees (a test's
/// tens of thousands of one-page areas) stays on the lists there instead of
/// going back through the buddy allocator page by page. Never below the
/// default (six batches).
fn pcp_high(pages: u64, cpus: usize) -> u32 {
    let floor = PcpConfig::default().high;
    let share = pages / 8 / cpus.max(1) as u64;
    u32::try_from(share).unwrap_or(u32::MAX).max(floor)
}

fn zone() -> &'static LockedZone<spin::Mutex<()>> {
    ZONE.get().expect("phys::init ran")
}

/// An order-`order` block from `cpu`'s lists (or the zone), zeroed if
/// `zero`.
pub fn alloc(cpu: usize, order: u8, zero: bool) -> Option<u64> {
    let pfn = zone().alloc(cpu, order, MigrateType::Movable).ok()?;
    if zero {
        zero_frames(pfn, 1 << order);
    }
    Some(pfn)
}

/// Zeroes `n` frames from `pfn`, allocated and not yet handed to anyone:
/// one `rep stosq` over whole pages (the kernel's `clear_page_rep`),
/// without `memset`'s handling of unaligned heads and tails.
pub fn zero_frames(pfn: u64, n: u64) {
    // SAFETY: the frames were just allocated from the buddy allocator, so
    // nothing else refers to them; RAM is identity mapped and the range is
    // page aligned. `rep stosq` writes rcx words of rax from rdi upwards
    // (the direction flag is clear, as the ABI keeps it at every call) and
    // touches no flags and no stack.
    unsafe {
        core::arch::asm!(
            "rep stosq",
            inout("rcx") n * (PAGE / 8) => _,
            inout("rdi") pfn * PAGE => _,
            in("rax") 0u64,
            options(nostack, preserves_flags)
        );
    }
}

/// A frame of data, owned: the one way to write a frame's memory from
/// Rust. Page-table pages and AP stacks are allocated as bare frame
/// numbers ([`alloc`]) and never become one, so a write through it cannot
/// reach them. Not `Clone`: one owner writes it.
#[derive(Debug)]
pub struct DataFrame {
    pfn: u64,
}

impl DataFrame {
    /// An order-0 frame from `cpu`'s lists.
    pub fn alloc(cpu: usize) -> Option<DataFrame> {
        alloc(cpu, 0, false).map(|pfn| DataFrame { pfn })
    }

    /// Its frame number (to map it).
    pub fn pfn(&self) -> u64 {
        self.pfn
    }

    /// Writes the frame's first word through the identity map.
    pub fn write(&mut self, v: u64) {
        // SAFETY: the frame is this token's alone (allocated for it, never
        // a page table, a stack, the heap or the kernel image); RAM is
        // identity mapped; the volatile write is one aligned word. Other
        // CPUs reach it only through mappings, by instructions, not Rust
        // references.
        unsafe { core::ptr::write_volatile((self.pfn * PAGE) as *mut u64, v) };
    }

    /// Reads the frame's first word through the identity map (what a
    /// write through a mapping of the frame left there).
    pub fn read(&self) -> u64 {
        // SAFETY: as `write`: the frame is this token's, RAM is identity
        // mapped, and the volatile read is one aligned word.
        unsafe { core::ptr::read_volatile((self.pfn * PAGE) as *const u64) }
    }

    /// Returns the frame to `cpu`'s lists.
    pub fn free(self, cpu: usize) {
        free(cpu, self.pfn, 0);
    }
}

/// The first word of frame `pfn` through the identity map, if the buddy
/// allocator has the frame allocated.
pub fn read_frame(pfn: u64) -> Option<u64> {
    allocated_order(pfn)?;
    // SAFETY: the frame is an allocated buddy frame and RAM is identity
    // mapped; the volatile read is one aligned word of plain memory.
    Some(unsafe { core::ptr::read_volatile((pfn * PAGE) as *const u64) })
}

/// Frees a block to `cpu`'s lists.
pub fn free(cpu: usize, pfn: u64, order: u8) {
    zone()
        .free(cpu, pfn, order)
        .expect("freeing a block allocated here");
}

/// Order of the allocated block starting at `pfn` as the buddy allocator
/// sees it (pages on per-CPU lists count as allocated there).
pub fn allocated_order(pfn: u64) -> Option<u8> {
    zone().with_zone(|b| b.allocated_order(pfn))
}

/// Runs `check()` of the zone and its lists (no allocation or free may be
/// in flight on another CPU).
pub fn check() -> Result<(), mmkit::CheckError> {
    zone().check()
}

/// Returns every per-CPU list's pages to the zone.
pub fn drain_all() {
    zone().drain_all()
}

/// Traffic of `cpu`'s lists.
pub fn stats(cpu: usize) -> mmkit::buddy::pcp::PcpStats {
    zone().stats(cpu)
}
