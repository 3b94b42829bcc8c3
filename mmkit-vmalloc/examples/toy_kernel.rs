//! A toy kernel adopting mmkit-vmalloc: three CPUs with their own TLBs, a
//! page table and physical memory in host memory, frames from mmkit's
//! buddy allocator. It implements the two traits and nothing else of the
//! vmalloc sequence. Run: `cargo run -p mmkit-vmalloc --example toy_kernel`.

use std::collections::BTreeMap;

use mmkit::buddy::{BuddyAllocator, BuddyConfig, MigrateType};
use mmkit::vmap::VmapAllocator;
use mmkit_vmalloc::{
    Flush, FrameSource, MapFailed, MapRam, Mmu, Refused, VmError, Vmalloc, Where, PAGE,
};

const CPUS: usize = 3;
const FRAMES: u64 = 1024;

/// The MMU: one page table (va -> pfn) and a TLB per CPU.
#[derive(Default)]
struct Machine {
    ptes: BTreeMap<u64, u64>,
    tlbs: [BTreeMap<u64, u64>; CPUS],
    shootdowns: u64,
}

impl Machine {
    /// A load on `cpu`: the TLB first, else a page walk that fills it.
    fn read(&mut self, cpu: usize, va: u64, ram: &Frames) -> Option<u8> {
        let page = va & !(PAGE - 1);
        let pfn = match self.tlbs[cpu].get(&page) {
            Some(&pfn) => pfn,
            None => *self.ptes.get(&page)?,
        };
        self.tlbs[cpu].insert(page, pfn);
        Some(ram.mem[pfn as usize][(va % PAGE) as usize])
    }
}

impl Mmu for Machine {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        for (i, &pfn) in pfns.iter().enumerate() {
            self.ptes.insert(va + i as u64 * PAGE, pfn);
        }
        Ok(())
    }

    fn clear(&mut self, va: u64, pages: u64) {
        for i in 0..pages {
            self.ptes.remove(&(va + i * PAGE));
        }
    }

    /// The shootdown: every CPU drops its cached translations in the range
    /// (a real kernel: `invlpg` here, an IPI to the others, wait for all).
    fn flush(&mut self, start: u64, end: u64) -> Refused {
        self.shootdowns += 1;
        for tlb in &mut self.tlbs {
            tlb.retain(|va, _| !(start..end).contains(va));
        }
        Refused::new()
    }

    fn translate(&self, va: u64) -> Option<u64> {
        self.ptes.get(&va).copied()
    }
}

/// Physical memory: frames from the buddy allocator, their bytes here.
struct Frames {
    buddy: BuddyAllocator,
    mem: Vec<[u8; PAGE as usize]>,
}

impl FrameSource for Frames {
    fn alloc(&mut self, _max: u64) -> Option<(u64, u64)> {
        let pfn = self.buddy.alloc(0, MigrateType::Movable).ok()?;
        Some((pfn, 1))
    }

    fn free(&mut self, pfn: u64, count: u64) {
        for p in pfn..pfn + count {
            self.buddy.free(p, 0).expect("a frame the buddy handed out");
        }
    }

    fn zero(&mut self, pfn: u64, count: u64) {
        for p in pfn..pfn + count {
            self.mem[p as usize] = [0; PAGE as usize];
        }
    }
}

/// The kernel's one lock around the layer (a spin lock; see the crate
/// docs for why a CPU must take shootdown IPIs while it spins on it).
type Layer = lock_api::Mutex<spin::Mutex<()>, Vmalloc<VmapAllocator>>;

fn main() -> Result<(), VmError> {
    let mut mmu = Machine::default();
    let mut buddy = BuddyAllocator::new(0, FRAMES, BuddyConfig::default()).expect("a zone");
    buddy.add_free_range(0, FRAMES).expect("RAM");
    let mut ram = Frames {
        buddy,
        mem: vec![[0xaa; PAGE as usize]; FRAMES as usize],
    };
    let range = VmapAllocator::new(0xffff_c000_0000_0000, 0xffff_c000_4000_0000).unwrap();
    let lazy = Flush::Lazy {
        max_bytes: 64 * PAGE,
    };
    let layer: &'static Layer =
        Box::leak(Box::new(lock_api::Mutex::new(Vmalloc::new(range, lazy))));
    let map_ram = MapRam::new(layer, CPUS)?;

    // vzalloc: frames from the buddy, zeroed, mapped, a guard page after.
    let va = layer.lock().vzalloc(&mut mmu, &mut ram, 3 * PAGE)?;
    assert_eq!(mmu.read(1, va + 2 * PAGE, &ram), Some(0)); // CPU 1 caches it
    assert!(matches!(
        layer.lock().lookup(va + 3 * PAGE),
        Where::Guard { .. }
    ));
    let bad = layer.lock().vfree(&mut mmu, &mut ram, va + PAGE);
    println!("vfree(interior): {}", bad.unwrap_err());
    layer.lock().vfree(&mut mmu, &mut ram, va)?; // lazy: no shootdown yet
    let again = layer.lock().vfree(&mut mmu, &mut ram, va);
    println!("vfree(again):    {}", again.unwrap_err());

    // vm_map_ram on CPU 1, unmapped on CPU 2; one shootdown for all aliases.
    let pfn = ram.buddy.alloc(2, MigrateType::Movable).unwrap();
    let pfns: Vec<u64> = (pfn..pfn + 4).collect();
    let alias = map_ram.map(&mut mmu, &mut ram, 1, &pfns)?;
    ram.mem[pfn as usize][0] = 7;
    assert_eq!(mmu.read(0, alias, &ram), Some(7)); // CPU 0 caches it
    map_ram.unmap(&mut mmu, &mut ram, 2, alias, 4)?;
    assert!(map_ram.unmap_aliases(&mut mmu, &mut ram));
    ram.buddy.free(pfn, 2).unwrap();

    // vfree_atomic never flushes: usable with interrupts off.
    let b = layer.lock().vmalloc(&mut mmu, &mut ram, PAGE)?;
    let before = mmu.shootdowns;
    layer.lock().vfree_atomic(&mut mmu, &mut ram, b)?;
    assert_eq!(mmu.shootdowns, before);
    assert!(layer.lock().purge(&mut mmu, &mut ram));

    layer
        .lock()
        .check(&mmu)
        .expect("the books and the page table agree");
    map_ram.check().expect("the front end's invariants");
    let s = layer.lock().stats();
    println!(
        "maps {} unmaps {} flushes {} ({} pages), shootdowns {}, free frames {}",
        s.maps,
        s.unmaps,
        s.flushes,
        s.pages_flushed,
        mmu.shootdowns,
        ram.buddy.free_pages()
    );
    assert!(
        mmu.tlbs.iter().all(|t| t.is_empty()),
        "no stale translation"
    );
    assert_eq!(ram.buddy.free_pages(), FRAMES, "every frame is back");
    Ok(())
}
