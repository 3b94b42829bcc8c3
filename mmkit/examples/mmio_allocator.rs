//! A hypervisor's guest MMIO address allocator, as a VMM assigns PCI BARs
//! and platform device windows (what `vm-allocator` users do): a 32-bit
//! window below 4 GiB and a 64-bit window above RAM, BARs aligned to their
//! size, fixed-address devices, top-down placement for the large 64-bit
//! BARs, a per-bridge window, hot-unplug, and growing the 64-bit window when
//! the guest gets more address bits.
//!
//! Run with `cargo run -p mmkit --example mmio_allocator`.

use mmkit::prelude::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A PCI BAR: power-of-two size, naturally aligned (the PCI spec's rule).
fn bar(size: u64) -> Request {
    assert!(size.is_power_of_two());
    Request::bytes(size).expect("non-zero").align(size)
}

fn main() -> Result<(), RequestError> {
    // The 32-bit MMIO hole: [3 GiB, 4 GiB - 20 MiB) (the top holds the
    // IOAPIC, LAPIC and the firmware flash, which are not ours to give).
    let mut mmio32 = VmapAllocator::new(3 * GIB, 4 * GIB - 20 * MIB).expect("window");
    // The 64-bit window above 64 GiB of guest RAM, 64 GiB large.
    let mut mmio64 = VmapAllocator::new(64 * GIB, 128 * GIB).expect("window");

    // Fixed platform devices first: the virtio-mmio transports the guest
    // kernel command line names, at exact addresses.
    let mut virtio = Vec::new();
    for i in 0..4 {
        let at = 0xd000_0000 + i * 0x1000;
        virtio.push(mmio32.allocate(Request::bytes(0x1000).expect("non-zero").at(at))?);
    }
    // A second device at a taken address is refused, with the reason.
    let clash = mmio32.allocate(Request::bytes(0x1000).expect("non-zero").at(0xd000_0000));
    println!("fixed device clash: {}", clash.unwrap_err());

    // Small 32-bit BARs, lowest fit: each lands on a multiple of its size.
    let nic_bar0 = mmio32.allocate(bar(128 * 1024))?;
    let nic_bar2 = mmio32.allocate(bar(16 * 1024))?;
    let gpu_bar0 = mmio32.allocate(bar(16 * MIB))?;
    for (name, a, size) in [
        ("nic BAR0", nic_bar0, 128 * 1024),
        ("nic BAR2", nic_bar2, 16 * 1024),
        ("gpu BAR0", gpu_bar0, 16 * MIB),
    ] {
        assert_eq!(a % size, 0);
        println!("{name:9} [{a:#012x}, {:#012x})", a + size);
    }

    // Large prefetchable 64-bit BARs from the top down, so the bottom of the
    // window stays free for a bridge's contiguous window.
    let gpu_vram = mmio64.allocate(bar(16 * GIB).policy(Policy::Highest))?;
    let nvme_cmb = mmio64.allocate(bar(GIB).policy(Policy::Highest))?;
    println!("gpu VRAM  [{gpu_vram:#x}, {:#x})", gpu_vram + 16 * GIB);
    println!("nvme CMB  [{nvme_cmb:#x}, {:#x})", nvme_cmb + GIB);
    assert_eq!(gpu_vram, 112 * GIB);

    // A device whose firmware decodes only the low 512 MiB of the hole:
    // a window on the request.
    let legacy = mmio32.allocate(bar(MIB).within(3 * GIB..3 * GIB + 512 * MIB))?;
    assert!(legacy < 3 * GIB + 512 * MIB);

    // A hot-plug bridge reserves a 4 GiB window from the 64-bit space; the
    // BARs of devices behind it come from a child allocator over exactly
    // that window (the reservation stays live in the parent).
    let bridge = mmio64.allocate(bar(4 * GIB))?;
    let mut behind = VmapAllocator::new(bridge, bridge + 4 * GIB).expect("window");
    for size in [GIB, 256 * MIB, 256 * MIB] {
        behind.allocate(bar(size))?;
    }
    // A BAR that cannot fit behind the bridge says what was asked and why.
    let too_big = behind.allocate(bar(8 * GIB));
    println!("too big for the bridge: {}", too_big.unwrap_err());

    // Hot-unplug the NIC: its BARs return at once (no lazy flush needed for
    // MMIO space).
    mmio32.free(nic_bar0).expect("live BAR");
    mmio32.free(nic_bar2).expect("live BAR");
    assert!(mmio32.free(nic_bar2).is_err(), "double unplug is refused");

    // The guest gets 46 address bits: grow the 64-bit window to 256 GiB.
    mmio64.grow(64 * GIB..256 * GIB)?;
    let big = mmio64.allocate(bar(64 * GIB))?;
    println!("after grow: 64 GiB BAR at {big:#x}");

    for (name, a) in [("mmio32", &mmio32), ("mmio64", &mmio64)] {
        a.check().expect("consistent");
        let mut live: Vec<_> = a.live_areas().collect();
        live.sort_by_key(|r| r.start);
        let free: Vec<_> = a.free_blocks().collect();
        println!("{name}: {} live, free blocks {free:x?}", live.len());
    }
    Ok(())
}
