//! The memfd machine as the shared layer's MMU, against the kernel's own
//! view of the mappings (`/proc/self/maps`).

use mmkit_vmalloc::{Mmu, PAGE};

use super::mmu::MemfdMmu;
use crate::{Vm, VmConfig};

fn vm() -> Vm {
    let cfg = VmConfig {
        virt_size: 1 << 30,
        phys_limit: 16 << 20,
        ..VmConfig::default()
    };
    Vm::new(cfg).unwrap()
}

#[test]
fn the_layer_checks_its_areas_against_the_kernels_mappings() {
    let vm = vm();
    let a = vm.vmalloc(3 * PAGE).unwrap();
    let b = vm.vmalloc(PAGE).unwrap();
    vm.vfree(b).unwrap();
    let space = vm.space();
    space.with(|m| {
        m.layer.check(&m.mmu).unwrap();
        assert!(m.mmu.translate(a + 2 * PAGE).is_some());
        assert_eq!(m.mmu.translate(a + 3 * PAGE), None, "the guard page");
        assert_eq!(m.mmu.translate(b), None, "lazily freed: PTE cleared");
        let table = crate::sync::lock(&space.table);
        assert!(table.stale.contains_key(&b), "lazily freed: still mapped");
    });
    assert!(vm.purge());
    space.with(|m| assert_eq!(m.mmu.translate(b), None));
}

#[test]
fn map_clear_and_flush_through_the_trait() {
    let vm = vm();
    let pfn = vm.alloc_pages(1).unwrap();
    let space = vm.space();
    let mut st = space.state();
    let va = st.layer.reserve(3 * PAGE, PAGE, vm.virt_range()).unwrap();
    let mut mmu = MemfdMmu::new(space);
    mmu.map(va, &[pfn + 1, pfn]).unwrap();
    assert_eq!(
        (mmu.translate(va), mmu.translate(va + PAGE)),
        (Some(pfn + 1), Some(pfn))
    );
    let calls = space.stats_calls();
    mmu.clear(va, 3);
    assert_eq!(mmu.translate(va), None, "cleared: no PTE");
    let stale = crate::sync::lock(&space.table).stale.get(&va).copied();
    assert_eq!(stale, Some((pfn + 1, 1)), "cleared: mapped until the flush");
    assert_eq!(mmu.flush(va, va + 3 * PAGE), vec![]);
    assert_eq!(mmu.translate(va), None);
    assert_eq!(
        space.stats_calls(),
        (calls.0, calls.1 + 1),
        "one unmap call"
    );
    // The flush unmapped both runs: their map counts and budget are back.
    assert_eq!(space.budget.used(), 0);
    st.layer.unreserve(va).unwrap();
    drop(st);
    vm.free_pages(pfn, 1).unwrap();
    vm.check().unwrap();
}
