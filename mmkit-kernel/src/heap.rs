//! The kernel heap behind `alloc` (the allocators' trees, vectors and
//! maps): power-of-two size classes with a free list each, carved by a bump
//! pointer from one physical region reserved at boot, before the buddy
//! allocator exists (the buddy allocator's own tables live here).

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::null_mut;

use spin::Mutex;

/// Size classes: 16 bytes << 0..CLASSES.
const CLASSES: usize = 24;

struct Heap {
    next: u64,
    end: u64,
    free: [u64; CLASSES],
    used: u64,
}

/// The global allocator.
pub struct KernelHeap(Mutex<Heap>);

#[global_allocator]
static HEAP: KernelHeap = KernelHeap(Mutex::new(Heap {
    next: 0,
    end: 0,
    free: [0; CLASSES],
    used: 0,
}));

/// Hands the heap the identity-mapped region `[start, end)`.
pub fn init(start: u64, end: u64) {
    let mut h = HEAP.0.lock();
    h.next = start;
    h.end = end;
}

/// Bytes handed out and not freed.
pub fn used() -> u64 {
    HEAP.0.lock().used
}

fn class(l: Layout) -> Option<usize> {
    if l.align() > 4096 {
        return None;
    }
    let size = l
        .size()
        .max(l.align())
        .max(16)
        .checked_next_power_of_two()?;
    let c = (size.trailing_zeros() - 4) as usize;
    (c < CLASSES).then_some(c)
}

// SAFETY: blocks of one class never overlap (each comes once from the bump
// region or from the free list it was pushed on), are at least as large and
// as aligned as the layout asks (natural alignment up to 4096), and the lock
// serialises the lists.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let Some(c) = class(l) else { return null_mut() };
        let size = 16u64 << c;
        let mut h = self.0.lock();
        let head = h.free[c];
        if head != 0 {
            // SAFETY: `head` is a free block of this class; its first word
            // holds the next free block (written by dealloc).
            h.free[c] = unsafe { (head as *const u64).read() };
            h.used += size;
            return head as *mut u8;
        }
        let align = size.min(4096);
        let at = (h.next + align - 1) & !(align - 1);
        if at + size > h.end {
            return null_mut();
        }
        h.next = at + size;
        h.used += size;
        at as *mut u8
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let Some(c) = class(l) else { return };
        let mut h = self.0.lock();
        // SAFETY: `p` came from alloc with this layout, so it is a block of
        // class `c` (at least 16 bytes, 8-aligned) that nobody uses now.
        unsafe { (p as *mut u64).write(h.free[c]) };
        h.free[c] = p as u64;
        h.used -= 16u64 << c;
    }
}
