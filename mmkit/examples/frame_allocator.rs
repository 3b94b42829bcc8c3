//! A kernel-style physical frame allocator: a buddy allocator over the
//! usable ranges of a (fake) firmware memory map, with per-CPU page lists in
//! front for the order-0 traffic, as Linux's page allocator does.
//!
//! Run with `cargo run -p mmkit --example frame_allocator`.

use mmkit::buddy::pcp::{PcpConfig, PcpZone};
use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType, ZoneId};

const PAGE: u64 = 4096;

/// What the firmware says a physical range is (an e820 / UEFI memory map).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Usable,
    Reserved,
    AcpiReclaim,
}

/// A small machine with 64 MiB of RAM: a low reserved area (BIOS, legacy
/// VGA), the kernel image, an ACPI table, and a hole below 64 MiB.
const MEMORY_MAP: &[(u64, u64, Kind)] = &[
    (0x0000_0000, 0x0000_1000, Kind::Reserved), // real-mode IVT
    (0x0000_1000, 0x0009_f000, Kind::Usable),   // low memory
    (0x0009_f000, 0x0010_0000, Kind::Reserved), // EBDA, VGA, BIOS ROM
    (0x0010_0000, 0x0100_0000, Kind::Reserved), // kernel image + early data
    (0x0100_0000, 0x0380_0000, Kind::Usable),   // 40 MiB
    (0x0380_0000, 0x0381_0000, Kind::AcpiReclaim), // ACPI tables
    (0x0381_0000, 0x03c0_0000, Kind::Usable),
    (0x03c0_0000, 0x0400_0000, Kind::Reserved), // firmware hole
];

fn main() {
    // One zone spans every frame of the map; only usable frames are added,
    // so reserved ones stay holes the allocator never hands out.
    let last = MEMORY_MAP.last().expect("non-empty map").1;
    let mut zone =
        BuddyAllocator::new(0, last / PAGE, BuddyConfig::default()).expect("a valid zone");
    for &(start, end, kind) in MEMORY_MAP {
        if kind == Kind::Usable {
            zone.add_free_range(start / PAGE, (end - start) / PAGE)
                .expect("usable ranges do not overlap");
        }
    }
    println!(
        "zone: {} frames spanned, {} present, {} free",
        zone.end_pfn() - zone.start_pfn(),
        zone.present_pages(),
        zone.free_pages()
    );
    print!("{}", zone.buddyinfo(ZoneId::new(0, "Normal")));

    // Four CPUs allocate page-table pages through their per-CPU lists: each
    // refill takes a batch from the zone, frees go back to the local list.
    // Every allocation goes through the lists from here on (the per-frame
    // owner tags then catch double frees without the zone lock).
    let cfg = PcpConfig {
        cpus: 4,
        batch: 31,
        high: 186,
    };
    let mut frames = PcpZone::new(zone, cfg).expect("valid pcp config");

    // A 2 MiB huge page (order 9, the pageblock order: it has a per-CPU
    // list too, refilled with two blocks, so CPU 0 keeps the second).
    let huge = frames
        .alloc(0, 9, MigrateType::Movable)
        .expect("a 2 MiB block");
    assert_eq!(huge % 512, 0, "naturally aligned");
    println!("huge page at {:#x}", huge * PAGE);
    let mut page_tables = Vec::new();
    for i in 0..400 {
        let cpu = i % 4;
        let pfn = frames
            .alloc(cpu, 0, MigrateType::Unmovable)
            .expect("frames left");
        page_tables.push((cpu, pfn));
    }
    for cpu in 0..4 {
        let s = frames.stats(cpu);
        println!(
            "cpu {cpu}: {} pages cached, {} refills",
            frames.pcp_pages(cpu),
            s.refills
        );
    }

    // A reserved frame, a double free and a wrong order are refused.
    assert!(
        frames.free(0, 0x9f, 0).is_err(),
        "EBDA frame was never handed out"
    );
    let (cpu, pfn) = page_tables[0];
    frames.free(cpu, pfn, 0).expect("live frame");
    assert!(frames.free(cpu, pfn, 0).is_err(), "double free");

    // Tear down: free on another CPU than the allocating one (as a process
    // exit on a different CPU would), then drain the lists.
    for &(cpu, pfn) in &page_tables[1..] {
        frames.free((cpu + 1) % 4, pfn, 0).expect("live frame");
    }
    frames.drain_all();
    frames.check().expect("consistent");
    let zone = frames.zone();
    println!(
        "after teardown: {} free, unusable index at order 9: {:.3}",
        zone.free_pages(),
        f64::from(zone.unusable_free_index(9)) / 1000.0
    );
    assert_eq!(zone.free_pages(), zone.present_pages() - 512);
}
