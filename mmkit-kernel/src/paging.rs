//! The kernel's 4-level page tables for the vmalloc area. The boot PML4
//! (identity map of 0-4 GiB in 2 MiB pages) gets one more entry: a PDPT
//! for the higher-half vmalloc area, mapped in 4 KiB pages whose
//! intermediate tables come from the buddy allocator on demand and stay.
//! PTEs are atomic words: CPUs map disjoint areas concurrently; table
//! creation takes a lock.

use core::sync::atomic::{AtomicU64, Ordering};

use spin::Mutex;

use crate::phys::PAGE;
use crate::{boot, phys};

/// Start of the vmalloc area (the kernel's `VMALLOC_START` of 4-level
/// paging).
pub const VMALLOC_START: u64 = 0xffff_c900_0000_0000;
/// Bytes of vmalloc area (within one PML4 entry).
pub const VMALLOC_SIZE: u64 = 128 << 30;

const PRESENT: u64 = 1;
const WRITABLE: u64 = 2;
const HUGE: u64 = 1 << 7;
const NX: u64 = 1 << 63;
const ADDR: u64 = 0x000f_ffff_ffff_f000;

/// Page-table pages allocated for the vmalloc area.
pub static TABLE_PAGES: AtomicU64 = AtomicU64::new(0);
static GROW: Mutex<()> = Mutex::new(());

type Table = [AtomicU64; 512];

fn table(pa: u64) -> &'static Table {
    debug_assert_eq!(pa & 0xfff, 0);
    // SAFETY: `pa` is a page-table page: the boot PML4 or a zeroed frame
    // this module took from the buddy allocator and never frees. RAM is
    // identity mapped, the page is 4 KiB aligned, and AtomicU64 has u64's
    // layout, so a shared reference of atomics is sound with other CPUs
    // and the MMU reading and writing it.
    unsafe { &*(pa as *const Table) }
}

#[inline(always)]
fn idx(va: u64, level: u32) -> usize {
    ((va >> (12 + 9 * level)) & 511) as usize
}

/// The vmalloc area's PDPT (physical address; 0 before [`init`]): the
/// whole area lies under one PML4 entry, so every walk starts here, one
/// level below the top.
static PDPT: AtomicU64 = AtomicU64::new(0);

/// Creates the vmalloc area's PDPT (boot CPU, before any mapping).
pub fn init() {
    let pml4 = table(boot::pml4_phys());
    let pdpt = new_table().expect("a page for the vmalloc area's PDPT at boot");
    pml4[idx(VMALLOC_START, 3)].store(pdpt | PRESENT | WRITABLE, Ordering::Release);
    PDPT.store(pdpt, Ordering::Release);
}

fn new_table() -> Option<u64> {
    let pfn = phys::alloc(crate::arch::cpu_id(), 0, true)?;
    TABLE_PAGES.fetch_add(1, Ordering::Relaxed);
    Some(pfn * phys::PAGE)
}

/// The next-level table under `e`; when absent, created if `create`
/// (`None` when not, or when no frame is left for it).
#[inline(always)]
fn next(e: &AtomicU64, create: bool) -> Option<u64> {
    let v = e.load(Ordering::Acquire);
    if v & PRESENT != 0 {
        Some(v & ADDR)
    } else if create {
        grow(e)
    } else {
        None
    }
}

/// Creates the table under `e` unless another CPU just did.
#[cold]
fn grow(e: &AtomicU64) -> Option<u64> {
    let _g = GROW.lock();
    let v = e.load(Ordering::Acquire);
    if v & PRESENT != 0 {
        return Some(v & ADDR);
    }
    let t = new_table()?;
    e.store(t | PRESENT | WRITABLE, Ordering::Release);
    Some(t)
}

#[inline(always)]
fn in_area(va: u64) -> bool {
    (VMALLOC_START..VMALLOC_START + VMALLOC_SIZE).contains(&va)
}

/// The page table (last level) that holds the PTE of `va`, its upper
/// tables created when `create`: two loads from the area's PDPT.
#[inline(always)]
fn pt(va: u64, create: bool) -> Option<&'static Table> {
    let pdpt = PDPT.load(Ordering::Acquire);
    if !in_area(va) || pdpt == 0 {
        return None;
    }
    let pd = next(&table(pdpt)[idx(va, 2)], create)?;
    let pt = next(&table(pd)[idx(va, 1)], create)?;
    Some(table(pt))
}

fn pte(va: u64, create: bool) -> Option<&'static AtomicU64> {
    pt(va, create).map(|t| &t[idx(va, 0)])
}

/// How many of `pages` pages from `at` have their PTEs in `at`'s page
/// table.
#[inline(always)]
fn run_at(at: u64, pages: u64) -> u64 {
    ((512 - idx(at, 0)) as u64).min(pages)
}

/// Maps `pfns` at consecutive pages from `va` (page aligned), writable,
/// not executable, walking the tables once per page table, not once per
/// page, as the kernel's range walkers do. Returns how many were mapped,
/// from the first: fewer than all when the range leaves the area or no
/// frame is left for a page-table page.
pub fn map_run(va: u64, pfns: &[u64]) -> u64 {
    // One page (most areas of the tests): one walk and one store, without
    // the run loop's bookkeeping.
    if let [pfn] = pfns {
        return u64::from(map(va, *pfn));
    }
    let (mut at, mut done) = (va, 0);
    while done < pfns.len() {
        let Some(t) = pt(at, true) else { break };
        let first = idx(at, 0);
        let n = run_at(at, (pfns.len() - done) as u64) as usize;
        for (e, &pfn) in t[first..first + n].iter().zip(&pfns[done..]) {
            e.store((pfn << 12) | PRESENT | WRITABLE | NX, Ordering::Release);
        }
        done += n;
        // n <= 512 pages: the product fits; the sum may leave the space.
        match at.checked_add(n as u64 * PAGE) {
            Some(next) => at = next,
            None => break,
        }
    }
    done as u64
}

/// Clears the PTEs of `pages` consecutive pages from `va` (page aligned),
/// walking the tables once per page table; a page without a table is
/// clear already. Stops where the range leaves the area.
pub fn clear_run(va: u64, pages: u64) {
    if pages == 1 {
        if let Some(e) = pte(va, false) {
            e.store(0, Ordering::Release);
        }
        return;
    }
    let (mut at, mut left) = (va, pages);
    while left > 0 && in_area(at) {
        let n = run_at(at, left);
        if let Some(t) = pt(at, false) {
            let first = idx(at, 0);
            t[first..first + n as usize]
                .iter()
                .for_each(|e| e.store(0, Ordering::Release));
        }
        left -= n;
        match at.checked_add(n * PAGE) {
            Some(next) => at = next,
            None => return,
        }
    }
}

/// Maps the page at `va` (in the vmalloc area) to frame `pfn`, writable,
/// not executable. False when `va` is outside the area or no frame is left
/// for a page-table page.
#[must_use]
pub fn map(va: u64, pfn: u64) -> bool {
    let Some(e) = pte(va, true) else { return false };
    e.store((pfn << 12) | PRESENT | WRITABLE | NX, Ordering::Release);
    true
}

/// Clears the PTE of `va`; returns the frame it mapped.
pub fn clear(va: u64) -> Option<u64> {
    let old = pte(va, false)?.swap(0, Ordering::AcqRel);
    (old & PRESENT != 0).then_some((old & ADDR) >> 12)
}

/// The frame `va` maps, if any.
pub fn translate(va: u64) -> Option<u64> {
    let v = pte(va, false)?.load(Ordering::Acquire);
    (v & PRESENT != 0).then_some((v & ADDR) >> 12)
}

/// Whether the PTE of `va` is writable and not executable, as mapped here.
pub fn flags_ok(va: u64) -> bool {
    pte(va, false).is_some_and(|e| {
        let v = e.load(Ordering::Acquire);
        v & (PRESENT | WRITABLE | NX | HUGE) == PRESENT | WRITABLE | NX
    })
}

/// Calls `f(va, pfn)` for every present PTE of the vmalloc area, walking
/// the tables (not the allocators' records).
pub fn walk(f: &mut dyn FnMut(u64, u64)) {
    let pml4 = table(boot::pml4_phys());
    let top = pml4[idx(VMALLOC_START, 3)].load(Ordering::Acquire);
    let pdpt = table(top & ADDR);
    for (i3, e3) in pdpt.iter().enumerate() {
        let v3 = e3.load(Ordering::Acquire);
        if v3 & PRESENT == 0 {
            continue;
        }
        let pd = table(v3 & ADDR);
        for (i2, e2) in pd.iter().enumerate() {
            let v2 = e2.load(Ordering::Acquire);
            if v2 & PRESENT == 0 {
                continue;
            }
            let pt = table(v2 & ADDR);
            for (i1, e1) in pt.iter().enumerate() {
                let v1 = e1.load(Ordering::Acquire);
                if v1 & PRESENT != 0 {
                    let va = VMALLOC_START
                        + ((i3 as u64) << 30)
                        + ((i2 as u64) << 21)
                        + ((i1 as u64) << 12);
                    f(va, (v1 & ADDR) >> 12);
                }
            }
        }
    }
}
