//! Per-CPU variables on `mmkit::percpu`: the allocator hands out an offset
//! valid in every CPU's unit of a chunk; the kernel backs each chunk with
//! one unit of frames per CPU, so CPU `c`'s copy of a variable lives at
//! `base[chunk][c] + offset`. A chunk's units stay once backed (chunk ids
//! are reused by the allocator).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use mmkit::percpu::{PcpuPtr, PercpuAlloc, PercpuAllocator};
use spin::Mutex;

use crate::{arch, percpu, phys};

/// Bytes per unit: 16 KiB, an order-2 block per CPU per chunk.
const UNIT: u64 = 16 << 10;
const UNIT_ORDER: u8 = 2;

struct Areas {
    alloc: PercpuAllocator,
    /// Per chunk id, the physical base of each CPU's unit.
    bases: Vec<Vec<u64>>,
}

static AREAS: Mutex<Option<Areas>> = Mutex::new(None);

/// Sets up the allocator (after the CPUs are counted).
pub fn init() {
    let alloc = PercpuAllocator::new(UNIT).expect("a valid unit size");
    *AREAS.lock() = Some(Areas {
        alloc,
        bases: Vec::new(),
    });
}

/// A per-CPU 64-bit counter: one word in every CPU's unit.
pub struct Counter {
    p: PcpuPtr,
    /// Each CPU's word, physical (identity-mapped) addresses.
    words: Vec<u64>,
}

impl Counter {
    /// Allocates a counter, zero on every CPU; `None` when no memory.
    pub fn new() -> Option<Counter> {
        let cpus = percpu::online();
        let mut g = AREAS.lock();
        let a = g.as_mut()?;
        let p = a.alloc.alloc(8, 8).ok()?;
        let chunk = p.chunk as usize;
        if a.bases.len() <= chunk {
            a.bases.resize(chunk + 1, Vec::new());
        }
        while a.bases[chunk].len() < cpus {
            let Some(pfn) = phys::alloc(0, UNIT_ORDER, true) else {
                // The offset is ours: freeing it succeeds.
                let _ = a.alloc.free(p);
                return None;
            };
            a.bases[chunk].push(pfn * phys::PAGE);
        }
        let words: Vec<u64> = a.bases[chunk]
            .iter()
            .map(|b| b + u64::from(p.offset))
            .collect();
        let c = Counter { p, words };
        for cpu in 0..cpus {
            c.word(cpu).store(0, Ordering::Relaxed);
        }
        Some(c)
    }

    fn word(&self, cpu: usize) -> &AtomicU64 {
        // SAFETY: the word lies in a unit of frames this module took from
        // the buddy allocator and never frees, at an 8-aligned offset the
        // percpu allocator gave this counter alone (until drop); RAM is
        // identity mapped and AtomicU64 has u64's layout.
        unsafe { &*(self.words[cpu] as *const AtomicU64) }
    }

    /// Adds `v` to this CPU's copy.
    pub fn add(&self, v: u64) {
        self.word(arch::cpu_id()).fetch_add(v, Ordering::Relaxed);
    }

    /// CPU `cpu`'s copy.
    pub fn get(&self, cpu: usize) -> u64 {
        self.word(cpu).load(Ordering::Relaxed)
    }

    /// The sum over every CPU.
    pub fn sum(&self) -> u64 {
        (0..self.words.len()).map(|c| self.get(c)).sum()
    }

    /// The address of CPU `cpu`'s copy (tests: the copies are distinct).
    pub fn addr(&self, cpu: usize) -> u64 {
        self.words[cpu]
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if let Some(a) = AREAS.lock().as_mut() {
            // Allocated by Counter::new and freed once, here.
            let _ = a.alloc.free(self.p);
        }
    }
}

/// The percpu allocator's `check()`, and its live allocations.
pub fn check() -> Result<u64, mmkit::CheckError> {
    let g = AREAS.lock();
    match g.as_ref() {
        Some(a) => a.alloc.check().map(|()| a.alloc.stats().live),
        None => Ok(0),
    }
}
