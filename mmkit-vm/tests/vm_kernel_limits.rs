//! The kernel's own limits, each reached for real in a child process (this
//! test binary re-executes itself with `MMKIT_VM_LIMIT` naming the case),
//! since they hold for the whole process:
//! - `vm.max_map_count`: the process's mappings filled up to the limit, so
//!   that an unmapping that must split a mapping, and any new `mmap`, fail
//!   with `ENOMEM`; nothing may stay mapped that the records do not
//!   explain, and everything is unmapped once the limit clears;
//! - `RLIMIT_AS`: the frame tables of a large `phys_limit` are refused;
//! - `RLIMIT_FSIZE`: the memory file cannot grow (no `SIGXFSZ`).
#![cfg(target_os = "linux")]

use std::process::Command;

use mmkit_vm::{VBuf, Vm, VmConfig, VmError};
use rustix::mm::{mmap_anonymous, mprotect, munmap, MapFlags, MprotectFlags, ProtFlags};
use rustix::process::{setrlimit, Resource, Rlimit};

const PAGE: u64 = 4096;
const ENOMEM: i32 = 12;

/// Runs case `case` in a child; it must exit 0 after printing "case ok".
fn in_child(case: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("MMKIT_VM_LIMIT", case)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("case ok"),
        "case {case}: {:?}\n{stdout}\n{stderr}",
        out.status
    );
}

/// The child's side; does nothing in a normal test run.
#[test]
fn child() {
    let Ok(case) = std::env::var("MMKIT_VM_LIMIT") else {
        return;
    };
    match case.as_str() {
        "map_count" => at_max_map_count(),
        "merged_block" => a_merged_block_at_max_map_count(),
        "address_space" => under_rlimit_as(),
        "file_size" => under_rlimit_fsize(),
        other => panic!("unknown case {other}"),
    }
    println!("case ok");
}

#[test]
fn nothing_is_forgotten_at_max_map_count() {
    in_child("map_count");
}

#[test]
fn a_block_merged_with_its_neighbour_stays_until_it_unmaps() {
    in_child("merged_block");
}

#[test]
fn frame_tables_refused_under_rlimit_as() {
    in_child("address_space");
}

#[test]
fn the_memory_file_stops_at_rlimit_fsize() {
    in_child("file_size");
}

/// Pages of one anonymous reservation, every other one made readable:
/// each such page is a mapping of its own, so `fill` can raise the
/// process's mapping count one split at a time.
struct Filler {
    base: *mut std::ffi::c_void,
    pages: usize,
    next: usize,
}

impl Filler {
    fn new(pages: usize) -> Self {
        let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        // SAFETY: a fresh range chosen by the kernel; nothing refers to it.
        let base = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                pages * 4096,
                ProtFlags::empty(),
                flags,
            )
        }
        .unwrap();
        Filler {
            base,
            pages,
            next: 1,
        }
    }

    fn protect(&self, page: usize, flags: MprotectFlags) -> bool {
        // SAFETY: the page lies in our own reservation, which nothing reads.
        let p = unsafe { self.base.add(page * 4096) };
        // SAFETY: as above; only the protection of our own page changes.
        unsafe { mprotect(p, 4096, flags) }.is_ok()
    }

    /// Splits until the kernel refuses: the process is at its limit.
    fn fill(&mut self) {
        while self.next + 1 < self.pages && self.protect(self.next, MprotectFlags::READ) {
            self.next += 2;
        }
        assert!(self.next + 1 < self.pages, "the filler is too small");
    }

    /// Joins the last split back: two mappings free.
    fn give_back_two(&mut self) {
        self.next -= 2;
        assert!(self.protect(self.next, MprotectFlags::empty()));
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        // SAFETY: our own reservation, unused by anything else.
        unsafe { munmap(self.base, self.pages * 4096) }.unwrap();
    }
}

fn is_refusal(e: &VmError) -> bool {
    matches!(e, VmError::MapLimit { .. })
        || *e
            == VmError::Os {
                op: "mmap",
                errno: ENOMEM,
            }
}

fn at_max_map_count() {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap();
    let max: usize = max.trim().parse().unwrap();
    let vm = Vm::new(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        lazy_max: 1 << 30,
        cpus: 1,
        ..VmConfig::default()
    })
    .unwrap();
    let check = || {
        vm.check().unwrap();
        vm.check_mappings().unwrap();
    };
    // Three adjacent vm_map_ram mappings of consecutive frames: the kernel
    // merges them into one mapping.
    let p = vm.alloc_pages(3).unwrap();
    let q = vm.alloc_pages(3).unwrap();
    let a: Vec<u64> = (0..3).map(|i| vm.vm_map_ram(&[p + i]).unwrap()).collect();
    assert_eq!((a[1] - a[0], a[2] - a[1]), (PAGE, PAGE));
    // Lazily freed areas, still mapped.
    for _ in 0..3 {
        let x = vm.vmalloc(PAGE).unwrap();
        vm.vfree(x).unwrap();
    }
    let mut filler = Filler::new(2 * max + 64);
    filler.fill();

    // A refused mmap purges the lazy areas and retries.
    let purges = vm.stats().space.purges;
    let live = vm.vmalloc(PAGE).unwrap();
    assert_eq!(vm.stats().space.purges, purges + 1);
    filler.fill();

    // Unmapping the middle mapping must split the merged one: refused.
    // The run stays mapped and recorded, its frames in use.
    vm.vm_unmap_ram(a[1], 1).unwrap();
    vm.vm_unmap_aliases();
    let s = vm.stats();
    assert!(s.space.unmap_failures >= 1, "{s:?}");
    assert_eq!(s.space.stuck_ranges, 1, "{s:?}");
    vm.free_pages(p, 3).unwrap();
    assert_eq!(
        vm.stats().phys.deferred_blocks,
        1,
        "p waits for its mapping"
    );
    let err = VBuf::new(&vm, 4096).unwrap_err();
    assert!(is_refusal(&err), "{err:?}");
    let err = vm.vm_map_ram(&[q, q + 5, q + 2]).unwrap_err();
    assert!(is_refusal(&err), "{err:?}");
    check();

    // Room for one run only: the second of three fails and the first is
    // undone.
    filler.give_back_two();
    let err = vm.vm_map_ram(&[q, q + 5, q + 2]).unwrap_err();
    assert!(is_refusal(&err), "{err:?}");
    check();

    // The limit clears: the stuck run goes (p's block waits for a[0] and
    // a[2], still live).
    drop(filler);
    vm.vm_unmap_aliases();
    let s = vm.stats();
    assert_eq!(s.space.stuck_ranges, 0, "{s:?}");
    assert_eq!(s.phys.deferred_blocks, 1, "{s:?}");
    let mut buf = VBuf::new(&vm, 4096).unwrap();
    buf.fill(9);
    check();
    drop(buf);
    vm.vm_unmap_ram(a[0], 1).unwrap();
    vm.vm_unmap_ram(a[2], 1).unwrap();
    vm.vfree(live).unwrap();
    vm.free_pages(q, 3).unwrap();
    vm.vm_unmap_aliases();
    vm.purge();
    check();
    let s = vm.stats();
    assert_eq!(s.space.maps_charged, 0, "{s:?}");
    assert_eq!(s.phys.deferred_blocks, 0, "{s:?}");
    assert_eq!(s.phys.free_pages * PAGE, s.phys.grown_bytes, "{s:?}");
    let (lo, hi) = vm.virt_range();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let inside = maps.lines().filter(|l| {
        let (range, rest) = l.split_once(' ').unwrap();
        let start = u64::from_str_radix(range.split_once('-').unwrap().0, 16).unwrap();
        (lo..hi).contains(&start) && !rest.starts_with("---p")
    });
    assert_eq!(inside.count(), 0, "something is still mapped:\n{maps}");
}

/// A released per-CPU block between two live ones, all three mapping
/// consecutive frames at consecutive addresses (the kernel merges them into
/// one mapping). Purging the middle block must split that mapping on both
/// sides; at the limit the kernel refuses, and the block stays mapped,
/// recorded and reserved until a later purge succeeds.
fn a_merged_block_at_max_map_count() {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap();
    let max: usize = max.trim().parse().unwrap();
    let vm = Vm::new(VmConfig {
        virt_size: 1 << 30,
        phys_limit: 64 << 20,
        lazy_max: 1 << 30,
        cpus: 1,
        vblock: mmkit::vblock::Config {
            page_size: PAGE,
            max_alloc: 16,
            bits: 32,
        },
        ..VmConfig::default()
    })
    .unwrap();
    let q = vm.alloc_pages(7).unwrap(); // 128 consecutive frames
                                        // Six mappings of 16 pages fill three blocks, frames in address order.
    let maps: Vec<u64> = (0..6)
        .map(|i| {
            let pfns: Vec<u64> = (q + 16 * i..q + 16 * (i + 1)).collect();
            vm.vm_map_ram(&pfns).unwrap()
        })
        .collect();
    for w in maps.windows(2) {
        assert_eq!(w[1], w[0] + 16 * PAGE, "three adjacent blocks");
    }
    vm.vm_unmap_ram(maps[2], 16).unwrap();
    vm.vm_unmap_ram(maps[3], 16).unwrap(); // the middle block is released
    let mut filler = Filler::new(2 * max + 64);
    filler.fill();
    vm.purge();
    let s = vm.stats().space;
    assert!(s.unmap_failures >= 1, "{s:?}");
    assert_eq!(s.stuck_ranges, 1, "{s:?}");
    vm.free_pages(q, 7).unwrap();
    assert_eq!(vm.stats().phys.deferred_blocks, 1, "the blocks show q");
    vm.check().unwrap();
    vm.check_mappings().unwrap();
    drop(filler);
    vm.purge();
    assert_eq!(vm.stats().space.stuck_ranges, 0);
    for &m in &[maps[0], maps[1], maps[4], maps[5]] {
        vm.vm_unmap_ram(m, 16).unwrap();
    }
    vm.vm_unmap_aliases();
    vm.check().unwrap();
    vm.check_mappings().unwrap();
    let s = vm.stats();
    assert_eq!(
        (s.space.maps_charged, s.phys.deferred_blocks),
        (0, 0),
        "{s:?}"
    );
}

fn limit(resource: Resource, bytes: u64) {
    let keep = rustix::process::getrlimit(resource).maximum;
    setrlimit(
        resource,
        Rlimit {
            current: Some(bytes),
            maximum: keep,
        },
    )
    .unwrap();
}

fn under_rlimit_as() {
    limit(Resource::As, 2 << 30);
    let err = Vm::new(VmConfig {
        phys_limit: 180_000_000 * PAGE,
        ..VmConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, VmError::NoMemory { .. }), "{err:?}");
    println!("{err}");
    limit(Resource::As, 1 << 30);
    let err = Vm::new(VmConfig {
        phys_limit: 1 << 42,
        ..VmConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, VmError::NoMemory { .. }), "{err:?}");
    println!("{err}");
}

fn under_rlimit_fsize() {
    limit(Resource::Fsize, 4 << 20);
    let vm = Vm::new(VmConfig {
        virt_size: 1 << 30,
        ..VmConfig::default()
    })
    .unwrap();
    let small = vm.vmalloc(1 << 20).unwrap();
    let err = vm.vmalloc(8 << 20).unwrap_err();
    assert_eq!(err, VmError::FileSizeLimit { limit: 4 << 20 });
    vm.check().unwrap();
    vm.check_mappings().unwrap();
    vm.vfree(small).unwrap();
    vm.purge();
    vm.check().unwrap();
}
