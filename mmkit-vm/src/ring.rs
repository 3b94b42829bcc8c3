//! [`MirrorRing`]: a ring buffer mapped twice back to back.

use crate::error::VmError;
use crate::vm::Vm;

/// A byte ring buffer whose frames are mapped twice, one copy right after
/// the other, so every readable or writable run is one contiguous slice:
/// nothing wraps, nothing is copied to straighten it.
///
/// ```text
///   addr                addr + cap           addr + 2 cap
///   | frames 0..n       | frames 0..n again  |guard|
///        ^head ....... tail^   (a run may cross the middle)
/// ```
///
/// ```
/// use mmkit_vm::{MirrorRing, Vm};
/// let vm = Vm::new(Default::default())?;
/// let mut ring = MirrorRing::new(&vm, 4096)?;
/// ring.push(&[1; 3000]);
/// ring.consume(3000);
/// assert_eq!(ring.push(&[2; 2000]), 2000);   // crosses the end: no wrap
/// assert_eq!(ring.readable(), &[2; 2000][..]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MirrorRing {
    vm: Vm,
    addr: u64,
    cap: u64,
    /// Bytes consumed and produced since creation; `tail - head <= cap`.
    head: u64,
    tail: u64,
}

// SAFETY: the ring owns its area exclusively (only its drop frees it), the
// bytes are plain data, and `Vm` is Send + Sync.
unsafe impl Send for MirrorRing {}
// SAFETY: `&MirrorRing` only gives `&[u8]`.
unsafe impl Sync for MirrorRing {}

impl MirrorRing {
    /// A ring of at least `size` bytes (rounded up to whole pages).
    ///
    /// # Errors
    /// As [`Vm::vmalloc`].
    pub fn new(vm: &Vm, size: usize) -> Result<Self, VmError> {
        let page = vm.page_size();
        let cap = (size as u64)
            .checked_next_multiple_of(page)
            .ok_or(VmError::Invalid("size overflows"))?;
        let addr = vm.alloc_handle(cap, true)?;
        Ok(MirrorRing {
            vm: vm.clone(),
            addr,
            cap,
            head: 0,
            tail: 0,
        })
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// Bytes ready to read.
    pub fn len(&self) -> usize {
        (self.tail - self.head) as usize
    }

    /// Whether nothing is ready to read.
    pub fn is_empty(&self) -> bool {
        self.tail == self.head
    }

    /// Every readable byte, as one slice.
    pub fn readable(&self) -> &[u8] {
        let at = self.addr + self.head % self.cap;
        // SAFETY: `at` is in the first copy and `len <= cap`, so the run
        // lies in the mapped `[addr, addr + 2 cap)`, live while `self` is.
        unsafe { std::slice::from_raw_parts(at as usize as *const u8, self.len()) }
    }

    /// Every writable byte, as one slice; [`commit`](Self::commit) what
    /// was written.
    pub fn writable(&mut self) -> &mut [u8] {
        let at = self.addr + self.tail % self.cap;
        let n = (self.cap - (self.tail - self.head)) as usize;
        // SAFETY: as in `readable`: the run lies in the mapped double copy,
        // does not overlap the readable bytes, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(at as usize as *mut u8, n) }
    }

    /// Marks `n` written bytes readable (at most the writable length).
    pub fn commit(&mut self, n: usize) {
        let free = self.cap - (self.tail - self.head);
        self.tail += (n as u64).min(free);
    }

    /// Drops `n` read bytes (at most the readable length).
    pub fn consume(&mut self, n: usize) {
        self.head += (n as u64).min(self.tail - self.head);
    }

    /// Copies as much of `data` as fits; returns the bytes written.
    pub fn push(&mut self, data: &[u8]) -> usize {
        let w = self.writable();
        let n = w.len().min(data.len());
        w[..n].copy_from_slice(&data[..n]);
        self.commit(n);
        n
    }

    /// Copies up to `out.len()` readable bytes out and consumes them.
    pub fn pop(&mut self, out: &mut [u8]) -> usize {
        let r = self.readable();
        let n = r.len().min(out.len());
        out[..n].copy_from_slice(&r[..n]);
        self.consume(n);
        n
    }
}

impl Drop for MirrorRing {
    fn drop(&mut self) {
        let freed = self.vm.free_handle(self.addr);
        debug_assert!(freed.is_ok(), "a handle's area is live");
    }
}

impl std::fmt::Debug for MirrorRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorRing")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("cap", &self.cap)
            .field("len", &self.len())
            .finish()
    }
}
