//! [`VBuf`]: a safe, owning handle to a vmalloc area.

use std::ops::{Deref, DerefMut};

use crate::error::VmError;
use crate::vm::{zero, Vm};

/// Virtually contiguous memory from a [`Vm`], as a byte slice: it derefs
/// to `[u8]`, frees its area lazily on drop, and grows without copying.
///
/// The area can only be freed by dropping the handle (`Vm::vfree` on its
/// address fails with [`VmError::OwnedByHandle`]), so the slice stays valid
/// for the handle's lifetime.
///
/// ```
/// use mmkit_vm::{VBuf, Vm};
/// let vm = Vm::new(Default::default())?;
/// let mut buf = VBuf::zeroed(&vm, 3 * 4096)?;
/// buf[4096] = 9;
/// buf.resize(64 << 20)?;                  // no byte copied
/// assert_eq!((buf.len(), buf[4096], buf[64 << 20 - 1]), (64 << 20, 9, 0));
/// drop(buf);                               // lazily freed
/// assert_eq!(vm.stats().space.lazy_areas + vm.stats().space.purges.min(1), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct VBuf {
    vm: Vm,
    addr: u64,
    len: usize,
}

// SAFETY: a VBuf owns its area exclusively (no other handle or address-based
// call can free or resize it), the memory is plain bytes, and `Vm` is Send +
// Sync; moving or sharing the handle between threads is like a Box<[u8]>.
unsafe impl Send for VBuf {}
// SAFETY: as above; `&VBuf` only gives `&[u8]`.
unsafe impl Sync for VBuf {}

impl VBuf {
    /// `len` bytes, not zeroed (reused frames keep old contents).
    ///
    /// # Errors
    /// As [`Vm::vmalloc`].
    pub fn new(vm: &Vm, len: usize) -> Result<Self, VmError> {
        let addr = vm.alloc_handle(len as u64, false)?;
        Ok(VBuf {
            vm: vm.clone(),
            addr,
            len,
        })
    }

    /// `len` zeroed bytes.
    ///
    /// # Errors
    /// As [`Vm::vmalloc`].
    pub fn zeroed(vm: &Vm, len: usize) -> Result<Self, VmError> {
        let b = Self::new(vm, len)?;
        zero(b.addr, len as u64);
        Ok(b)
    }

    /// The area's address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Resizes to `len` bytes without copying (see [`Vm::vrealloc`]); new
    /// bytes are zeroed. The address may change.
    ///
    /// # Errors
    /// As [`Vm::vrealloc`]; the buffer is unchanged then.
    pub fn resize(&mut self, len: usize) -> Result<(), VmError> {
        let addr = self.vm.realloc_handle(self.addr, len as u64)?;
        if len > self.len {
            zero(addr + self.len as u64, (len - self.len) as u64);
        }
        self.addr = addr;
        self.len = len;
        Ok(())
    }
}

impl Deref for VBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `[addr, addr + len)` is mapped read-write for as long as
        // this handle lives (only its drop or resize change the area), and
        // `&self` makes this borrow shared.
        unsafe { std::slice::from_raw_parts(self.addr as usize as *const u8, self.len) }
    }
}

impl DerefMut for VBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.addr as usize as *mut u8, self.len) }
    }
}

impl Drop for VBuf {
    fn drop(&mut self) {
        let freed = self.vm.free_handle(self.addr);
        debug_assert!(freed.is_ok(), "a handle's area is live");
    }
}

impl std::fmt::Debug for VBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VBuf")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}
