//! Model test: random vmalloc / vfree / vrealloc / vm_map_ram / vmap /
//! purge sequences against a byte-ownership model, with real reads and
//! writes. Every live area must hold exactly the bytes the model says,
//! a pattern written through one alias must read back through every other,
//! and `Vm::check` must pass after every step.
#![cfg(target_os = "linux")]

use mmkit_vm::{MirrorRing, Vm, VmConfig};
use proptest::prelude::*;

const PAGE: u64 = 4096;

#[derive(Debug, Clone)]
enum Op {
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

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..40).prop_map(|pages| Op::Vmalloc { pages }),
        3 => any::<usize>().prop_map(|pick| Op::Vfree { pick }),
        2 => (any::<usize>(), 1u64..80).prop_map(|(pick, pages)| Op::Vrealloc { pick, pages }),
        4 => (any::<usize>(), any::<u64>(), any::<u8>())
            .prop_map(|(pick, at, byte)| Op::Write { pick, at, byte }),
        2 => (0u8..4).prop_map(|order| Op::AllocFrames { order }),
        3 => (any::<usize>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, vmap)| Op::MapRam { pick, vmap }),
        2 => any::<usize>().prop_map(|pick| Op::UnmapRam { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeFrames { pick }),
        1 => Just(Op::Purge),
        1 => Just(Op::Aliases),
    ]
}

/// What the model knows: vmalloc areas with their bytes, the caller's frame
/// blocks with their bytes, and the live mappings of those frames.
#[derive(Default)]
struct Model {
    areas: Vec<(u64, Vec<u8>)>,
    /// (first pfn, order, bytes)
    frames: Vec<(u64, u8, Vec<u8>)>,
    /// (address, index into frames, through vmap or vm_map_ram)
    maps: Vec<(u64, usize, bool)>,
}

fn read(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: the model only reads live areas and mappings, `len` bytes long.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
}

fn write(addr: u64, byte: u8) {
    // SAFETY: as in `read`: `addr` lies in a live area or mapping.
    unsafe { (addr as *mut u8).write_volatile(byte) };
}

impl Model {
    fn verify(&self, vm: &Vm) {
        for (a, bytes) in &self.areas {
            assert_eq!(&read(*a, bytes.len()), bytes, "area {a:#x}");
        }
        for &(a, f, _) in &self.maps {
            let bytes = &self.frames[f].2;
            assert_eq!(&read(a, bytes.len()), bytes, "mapping {a:#x}");
        }
        vm.check().unwrap();
    }

    fn step(&mut self, vm: &Vm, op: Op) {
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

fn small_vm(lazy_unmap: bool) -> Vm {
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
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn vm_matches_byte_model(ops in prop::collection::vec(op(), 1..120), lazy in any::<bool>()) {
        let vm = small_vm(lazy);
        let mut model = Model::default();
        for op in ops {
            model.step(&vm, op);
            model.verify(&vm);
        }
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
        // Everything went back: every grown frame is free again.
        prop_assert_eq!(s.phys.free_pages * 4096, s.phys.grown_bytes);
        prop_assert_eq!(s.phys.deferred_blocks, 0);
        prop_assert_eq!(s.space.live_areas + s.space.lazy_areas, 0);
    }
}

#[test]
fn mirror_ring_reads_every_byte_through_both_copies() {
    let vm = small_vm(true);
    let mut ring = MirrorRing::new(&vm, 2 * PAGE as usize).unwrap();
    let cap = ring.capacity();
    let mut next = 0u8;
    let mut expect = 0u8;
    for round in 0..50 {
        let chunk: Vec<u8> = (0..(round * 97) % cap + 1)
            .map(|_| {
                next = next.wrapping_add(1);
                next
            })
            .collect();
        assert_eq!(ring.push(&chunk), chunk.len());
        let mut out = vec![0; chunk.len()];
        assert_eq!(ring.pop(&mut out), chunk.len());
        for b in out {
            expect = expect.wrapping_add(1);
            assert_eq!(b, expect);
        }
        vm.check().unwrap();
    }
    // The second copy shows the first: a write at i reads back at cap + i.
    let w = ring.writable();
    w[0] = 0xab;
    let base = w.as_ptr() as u64;
    let mirror = read(base + cap as u64, 1);
    assert_eq!(mirror[0], 0xab);
    drop(ring);
    assert!(vm.purge());
    vm.check().unwrap();
}

#[test]
fn vrealloc_moves_mappings_not_bytes() {
    let vm = small_vm(true);
    let a = vm.vmalloc(4 * PAGE).unwrap();
    // Block the range after `a`, so growth must move.
    let blocker = vm.vmalloc(PAGE).unwrap();
    write(a, 1);
    let b = vm.vrealloc(a, 64 * PAGE).unwrap();
    assert_ne!(a, b);
    // Same frames, not a copy: until the purge, the old mapping still shows
    // a write made through the new one.
    write(b + 5, 9);
    assert_eq!(read(a + 5, 1)[0], 9);
    assert_eq!(read(b, 1)[0], 1);
    let s = vm.stats().space;
    assert_eq!((s.realloc_moved, s.remapped_pages), (1, 4));
    vm.check().unwrap();
    vm.vfree(blocker).unwrap();
    vm.vfree(b).unwrap();
    vm.purge();
    vm.check().unwrap();
}
