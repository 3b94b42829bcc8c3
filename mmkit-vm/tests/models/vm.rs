//! The byte-ownership model of `Vm`, shared by the model proptest
//! (`tests/vm_model.rs`), the seeded fuzz driver (`tests/vm_fuzz_driver.rs`)
//! and the cargo-fuzz target `vm` (`fuzz/`), which include this file by path.
//!
//! The model knows every vmalloc area's bytes, the caller's frame blocks
//! and their bytes, and every live mapping of those frames. `step` applies
//! one operation to the `Vm` and to the model (asserting the typed errors
//! of the double frees and wrong page counts it tries on the way);
//! `verify` reads every area and mapping back through real memory and runs
//! `Vm::check`; `finish` frees everything and asserts that every frame came
//! back.
#![allow(dead_code)]

use arbitrary::{Arbitrary, Unstructured};
use mmkit_vm::{Vm, VmConfig};

pub const PAGE: u64 = 4096;

#[derive(Debug, Clone, Arbitrary)]
pub enum Op {
    Vmalloc { pages: u64 },
    Vfree { pick: usize },
    Vrealloc { pick: usize, pages: u64 },
    Write { pick: usize, at: u64, byte: u8 },
    AllocFrames { order: u8 },
    MapRam { pick: usize, vmap: bool },
    UnmapRam { pick: usize },
    FreeFrames { pick: usize },
    Purge,
    Aliases,
}

/// What the model knows: vmalloc areas with their bytes, the caller's frame
/// blocks with their bytes, and the live mappings of those frames.
#[derive(Default)]
pub struct Model {
    pub areas: Vec<(u64, Vec<u8>)>,
    /// (first pfn, order, bytes)
    pub frames: Vec<(u64, u8, Vec<u8>)>,
    /// (address, index into frames, through vmap or vm_map_ram)
    pub maps: Vec<(u64, usize, bool)>,
}

pub fn read(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: the model only reads live areas and mappings, `len` bytes long.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
}

pub fn write(addr: u64, byte: u8) {
    // SAFETY: as in `read`: `addr` lies in a live area or mapping.
    unsafe { (addr as *mut u8).write_volatile(byte) };
}

impl Model {
    pub fn verify(&self, vm: &Vm) {
        for (a, bytes) in &self.areas {
            assert_eq!(&read(*a, bytes.len()), bytes, "area {a:#x}");
        }
        for &(a, f, _) in &self.maps {
            let bytes = &self.frames[f].2;
            assert_eq!(&read(a, bytes.len()), bytes, "mapping {a:#x}");
        }
        vm.check().unwrap();
    }

    pub fn step(&mut self, vm: &Vm, op: Op) {
        match op {
            Op::Vmalloc { pages } => {
                let a = vm.vzalloc(pages * PAGE).unwrap();
                self.areas.push((a, vec![0; (pages * PAGE) as usize]));
            }
            Op::Vfree { pick } if !self.areas.is_empty() => {
                let (a, _) = self.areas.swap_remove(pick % self.areas.len());
                vm.vfree(a).unwrap();
                assert!(vm.vfree(a).is_err(), "double free");
            }
            Op::Vrealloc { pick, pages } if !self.areas.is_empty() => {
                let i = pick % self.areas.len();
                let (a, bytes) = &mut self.areas[i];
                let b = vm.vrealloc(*a, pages * PAGE).unwrap();
                let keep = bytes.len().min((pages * PAGE) as usize);
                assert_eq!(read(b, keep), bytes[..keep], "moved without its bytes");
                bytes.truncate(keep);
                let grown = read(b + keep as u64, (pages * PAGE) as usize - keep);
                bytes.extend(grown);
                *a = b;
            }
            Op::Write { pick, at, byte } => self.write(pick, at, byte),
            Op::AllocFrames { order } => {
                let pfn = vm.alloc_pages(order).unwrap();
                let len = (PAGE << order) as usize;
                // Map once to learn the frames' current bytes.
                let pfns: Vec<u64> = (pfn..pfn + (1 << order)).collect();
                let a = vm.vmap(&pfns).unwrap();
                let bytes = read(a, len);
                vm.vunmap(a).unwrap();
                self.frames.push((pfn, order, bytes));
            }
            Op::MapRam { pick, vmap } if !self.frames.is_empty() => {
                let f = pick % self.frames.len();
                let (pfn, order, _) = self.frames[f];
                let pfns: Vec<u64> = (pfn..pfn + (1 << order)).collect();
                let a = if vmap {
                    vm.vmap(&pfns)
                } else {
                    vm.vm_map_ram(&pfns)
                };
                self.maps.push((a.unwrap(), f, vmap));
            }
            Op::UnmapRam { pick } if !self.maps.is_empty() => {
                let (a, f, vmap) = self.maps.swap_remove(pick % self.maps.len());
                let pages = 1u64 << self.frames[f].1;
                assert!(vm.vm_unmap_ram(a, pages + 1).is_err(), "wrong page count");
                if vmap {
                    vm.vunmap(a).unwrap();
                } else {
                    vm.vm_unmap_ram(a, pages).unwrap();
                }
                assert!(vm.vm_unmap_ram(a, pages).is_err(), "double unmap");
            }
            Op::FreeFrames { pick } if !self.frames.is_empty() => {
                let f = pick % self.frames.len();
                if self.maps.iter().all(|m| m.1 != f) {
                    let (pfn, order, _) = self.frames.remove(f);
                    vm.free_pages(pfn, order).unwrap();
                    assert!(vm.free_pages(pfn, order).is_err(), "double free");
                    for m in &mut self.maps {
                        m.1 -= usize::from(m.1 > f);
                    }
                }
            }
            Op::Purge => {
                vm.purge();
            }
            Op::Aliases => vm.vm_unmap_aliases(),
            _ => {}
        }
    }

    /// Writes one byte into an area or, through one of its mappings, into
    /// a frame block (every other alias must see it).
    fn write(&mut self, pick: usize, at: u64, byte: u8) {
        let n = self.areas.len() + self.maps.len();
        if n == 0 {
            return;
        }
        let i = pick % n;
        if i < self.areas.len() {
            let (a, bytes) = &mut self.areas[i];
            let off = at % bytes.len() as u64;
            write(*a + off, byte);
            bytes[off as usize] = byte;
        } else {
            let (a, f, _) = self.maps[i - self.areas.len()];
            let bytes = &mut self.frames[f].2;
            let off = at % bytes.len() as u64;
            write(a + off, byte);
            bytes[off as usize] = byte;
        }
    }
}

pub fn small_vm(lazy_unmap: bool) -> Vm {
    Vm::new(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        lazy_max: 256 << 10,
        lazy_unmap,
        cpus: 2,
        // Small blocks (16 pages), so blocks fill, go dirty and get purged.
        vblock: mmkit::vblock::Config {
            page_size: PAGE,
            max_alloc: 8,
            bits: 16,
        },
        ..VmConfig::default()
    })
    .unwrap()
}

/// Frees everything the model holds and asserts that every grown frame is
/// back in the buddy, nothing is deferred and nothing is live or lazy.
pub fn finish(vm: &Vm, model: &mut Model) {
    for (a, _) in model.areas.drain(..) {
        vm.vfree(a).unwrap();
    }
    for (a, f, vmap) in model.maps.drain(..) {
        if vmap {
            vm.vunmap(a).unwrap();
        } else {
            vm.vm_unmap_ram(a, 1 << model.frames[f].1).unwrap();
        }
    }
    for (pfn, order, _) in model.frames.drain(..) {
        vm.free_pages(pfn, order).unwrap();
    }
    vm.vm_unmap_aliases();
    vm.check().unwrap();
    let s = vm.stats();
    assert_eq!(s.phys.free_pages * PAGE, s.phys.grown_bytes);
    assert_eq!(s.phys.deferred_blocks, 0);
    assert_eq!(s.space.live_areas + s.space.lazy_areas, 0);
}

/// Brings a decoded operation into the ranges the proptest strategy draws
/// from (areas of 1..40 pages, growth to 1..80, frame orders 0..4).
fn shape(op: Op) -> Op {
    match op {
        Op::Vmalloc { pages } => Op::Vmalloc {
            pages: 1 + pages % 39,
        },
        Op::Vrealloc { pick, pages } => Op::Vrealloc {
            pick,
            pages: 1 + pages % 79,
        },
        Op::AllocFrames { order } => Op::AllocFrames { order: order % 4 },
        op => op,
    }
}

/// The fuzz target: bytes decode into lazy or eager unmapping and up to
/// 120 operations, each applied to a fresh small `Vm` and to the model,
/// with `verify` after every step and `finish` at the end.
pub fn fuzz(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let lazy = u.arbitrary().unwrap_or(true);
    let vm = small_vm(lazy);
    let mut model = Model::default();
    for _ in 0..120 {
        let Ok(op) = u.arbitrary::<Op>() else { break };
        model.step(&vm, shape(op));
        model.verify(&vm);
    }
    finish(&vm, &mut model);
}
