//! The tests every boot runs: each returns `Err(reason)` on failure and
//! the boot ends with the failing exit code. After each, [`check_all`]
//! runs every allocator's `check()` and compares a walk of the page tables
//! with the layers.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::mm::{self, KernelMmu, PhysFrames};
use crate::paging::{self, VMALLOC_START};
use crate::{arch, fault, percpu, phys, println, smp, stale, tlb};
use mmkit_vmalloc::{Mmu, Where, PAGE};

/// Every allocator's `check()`, and the page-table walk against the layers.
pub fn check_all() -> Result<(), String> {
    phys::check().map_err(|e| format!("buddy/pcp: {e}"))?;
    crate::pervar::check().map_err(|e| format!("percpu: {e}"))?;
    let ram = mm::map_ram();
    ram.check().map_err(|e| format!("vm_map_ram: {e}"))?;
    let ram_pages = ram.live_pages();
    // The present PTEs by layer: tree, eager list, lazy list, none.
    let mut by_layer: [Vec<(u64, u64)>; 4] = Default::default();
    let mut bad_flags = 0u64;
    paging::walk(&mut |va, pfn| {
        if !paging::flags_ok(va) {
            bad_flags += 1;
        }
        let k = [mm::TREE_RANGE, mm::LINEAR_RANGE, mm::LINEAR_LAZY_RANGE]
            .iter()
            .position(|r| (r.0..r.1).contains(&va))
            .unwrap_or(3);
        by_layer[k].push((va, pfn));
    });
    if bad_flags != 0 {
        return Err(format!("{bad_flags} PTEs not present+writable+NX"));
    }
    let [low, eager, lazy, outside] = by_layer;
    if let Some((va, _)) = outside.first() {
        return Err(format!(
            "{} PTEs outside every layer, the first at {va:#x}",
            outside.len()
        ));
    }
    // Frames mapped more than once are vm_map_ram aliases only.
    let mut frames: Vec<u64> = low
        .iter()
        .chain(&eager)
        .chain(&lazy)
        .map(|&(_, p)| p)
        .collect();
    frames.sort_unstable();
    let dups = frames.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    let tree = mm::locked(mm::tree());
    tree.check(&KernelMmu)
        .map_err(|e| format!("tree layer: {e}"))?;
    let in_blocks = tree
        .check_walk(low.iter().copied())
        .map_err(|e| format!("tree walk: {e}"))?;
    drop(tree);
    let mut in_blocks2 = 0;
    for (name, layer, ptes) in [
        ("list layer", mm::linear(), eager),
        ("lazy list layer", mm::linear_lazy(), lazy),
    ] {
        let l = mm::locked(layer);
        l.check(&KernelMmu).map_err(|e| format!("{name}: {e}"))?;
        in_blocks2 += l
            .check_walk(ptes.into_iter())
            .map_err(|e| format!("{name} walk: {e}"))?;
    }
    if in_blocks2 != 0 {
        return Err(format!(
            "{in_blocks2} PTEs in the list layer's blocks (it has none)"
        ));
    }
    if in_blocks != ram_pages {
        return Err(format!(
            "{in_blocks} PTEs in vm_map_ram blocks, {ram_pages} pages mapped there"
        ));
    }
    if dups > ram_pages {
        return Err(format!(
            "{dups} frames mapped twice, only vm_map_ram may alias"
        ));
    }
    for &pfn in &frames {
        if phys::allocated_order(pfn).is_none() {
            return Err(format!(
                "frame {pfn:#x} is mapped but free in the buddy allocator"
            ));
        }
    }
    Ok(())
}

/// Runs every test; returns how many passed, or the first failure.
pub fn run_all(cycles: u64) -> Result<usize, String> {
    type Test<'a> = (&'a str, &'a dyn Fn() -> Result<(), String>);
    let tests: [Test<'_>; 9] = [
        ("ipi_reaches_every_cpu", &ipi_reaches_every_cpu),
        ("vmalloc_maps_real_frames", &vmalloc_maps_real_frames),
        ("use_after_vfree_faults", &use_after_vfree_faults),
        ("vfree_atomic_never_flushes", &vfree_atomic_never_flushes),
        ("map_ram_on_every_cpu", &map_ram_on_every_cpu),
        ("bad_input_changes_nothing", &bad_input_changes_nothing),
        (
            "percpu_counters_on_every_cpu",
            &percpu_counters_on_every_cpu,
        ),
        ("stale_tlb_caught_without_flush", &stale_tlb_caught),
        ("stale_tlb_none_with_flush", &|| stale_tlb_none(cycles)),
    ];
    for (name, t) in tests.iter() {
        let t0 = arch::rdtsc();
        t().map_err(|e| format!("{name}: {e}"))?;
        check_all().map_err(|e| format!("{name}: check after: {e}"))?;
        println!(
            "TEST {name} ok ({} ms)",
            crate::time::ns(arch::rdtsc() - t0) / 1_000_000
        );
    }
    Ok(tests.len())
}

/// `n` scaled by 2 / CPUs above 2 CPUs (at least a tenth of `n`): each
/// cycle of a cross-CPU test waits for every other CPU.
pub fn per_cpu_share(n: u64) -> u64 {
    let cpus = percpu::online().max(2) as u64;
    (n * 2 / cpus).max(n / 10).max(1)
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn ipi_reaches_every_cpu() -> Result<(), String> {
    let others = percpu::online() as u64 - 1;
    let before = tlb::HANDLED.load(Ordering::SeqCst);
    for _ in 0..10 {
        tlb::flush_range(VMALLOC_START, VMALLOC_START + PAGE);
    }
    let got = tlb::HANDLED.load(Ordering::SeqCst) - before;
    ensure(got == 10 * others, || {
        format!("{got} IPIs handled, {} expected", 10 * others)
    })
}

fn vmalloc_maps_real_frames() -> Result<(), String> {
    let mut areas = Vec::new();
    for (i, pages) in [1u64, 3, 16, 64, 100].iter().enumerate() {
        let a = mm::vmalloc(mm::tree(), *pages, PAGE).map_err(|e| format!("tree vmalloc: {e}"))?;
        let b =
            mm::vmalloc(mm::linear(), *pages, PAGE).map_err(|e| format!("list vmalloc: {e}"))?;
        for &(va, tag) in &[(a, 1u64), (b, 2)] {
            for p in 0..*pages {
                let v = (i as u64) << 32 | tag << 16 | p;
                ensure(fault::probe_write(va + p * PAGE, v), || {
                    format!("write {va:#x} faulted")
                })?;
            }
            areas.push((va, *pages, tag, i));
        }
    }
    check_all()?;
    for &(va, pages, tag, i) in &areas {
        for p in 0..pages {
            let want = (i as u64) << 32 | tag << 16 | p;
            let got = fault::probe_read(va + p * PAGE);
            ensure(got == Some(want), || {
                format!("{va:#x}+{p}: read {got:?}, wrote {want:#x}")
            })?;
        }
        let guard = va + pages * PAGE;
        ensure(
            matches!(mm::whereabouts(guard), Some(Where::Guard { .. })),
            || format!("guard page of {va:#x} not known as one"),
        )?;
    }
    for (va, _, tag, _) in areas {
        let layer = if tag == 1 {
            mm::vfree(mm::tree(), va)
        } else {
            mm::vfree(mm::linear(), va)
        };
        layer.map_err(|e| format!("vfree {va:#x}: {e}"))?;
    }
    Ok(())
}

fn use_after_vfree_faults() -> Result<(), String> {
    let va = mm::vmalloc(mm::tree(), 2, PAGE).map_err(|e| format!("vmalloc: {e}"))?;
    ensure(fault::probe_write(va, 7), || {
        "write to a live area faulted".into()
    })?;
    let guard = va + 2 * PAGE;
    let before = fault::CAUGHT.load(Ordering::SeqCst);
    ensure(fault::probe_read(guard).is_none(), || {
        "the guard page read did not fault".into()
    })?;
    mm::vfree(mm::tree(), va).map_err(|e| format!("vfree: {e}"))?;
    let lazy = mm::whereabouts(va);
    ensure(matches!(lazy, Some(Where::Lazy { .. })), || {
        format!("after vfree: {lazy:?}, not lazy")
    })?;
    mm::locked(mm::tree()).purge(&mut KernelMmu, &mut PhysFrames);
    let got = fault::probe_read(va + 8);
    ensure(got.is_none(), || {
        format!("read after vfree+purge returned {got:?}")
    })?;
    let caught = fault::CAUGHT.load(Ordering::SeqCst) - before;
    let at = fault::LAST_ADDR.load(Ordering::SeqCst);
    ensure(caught == 2 && at == va + 8, || {
        format!("handler caught {caught} faults, last at {at:#x}")
    })?;
    let what = fault::describe(at);
    println!("  fault at {at:#x} reported: {what}");
    ensure(
        matches!(mm::whereabouts(at), Some(Where::Freed { .. })),
        || format!("reported as: {what}"),
    )
}

/// `vfree_atomic` with interrupts off, under the layer's spin lock: no
/// flush (so no IPI to wait for), the area waits on the lazy list.
fn vfree_atomic_never_flushes() -> Result<(), String> {
    let va = mm::vmalloc(mm::tree(), 2, PAGE).map_err(|e| format!("vmalloc: {e}"))?;
    let (mut freed, mut flushes) = (Ok(()), 0);
    arch::cli_then(|| {
        let f0 = tlb::FLUSHES.load(Ordering::SeqCst);
        freed = mm::vfree_atomic(mm::tree(), va);
        flushes = tlb::FLUSHES.load(Ordering::SeqCst) - f0;
    });
    freed.map_err(|e| format!("vfree_atomic: {e}"))?;
    ensure(flushes == 0, || {
        format!("vfree_atomic flushed {flushes} times")
    })?;
    let lazy = mm::whereabouts(va);
    ensure(matches!(lazy, Some(Where::Lazy { .. })), || {
        format!("after vfree_atomic: {lazy:?}, not lazy")
    })?;
    mm::locked(mm::tree()).purge(&mut KernelMmu, &mut PhysFrames);
    let gone = mm::whereabouts(va);
    ensure(matches!(gone, Some(Where::Freed { .. })), || {
        format!("after the purge: {gone:?}")
    })
}

fn map_ram_on_every_cpu() -> Result<(), String> {
    static FAILS: AtomicUsize = AtomicUsize::new(0);
    static DONE: AtomicUsize = AtomicUsize::new(0);
    FAILS.store(0, Ordering::SeqCst);
    DONE.store(0, Ordering::SeqCst);
    let cpus = percpu::online();
    smp::run_on(cpus, move |cpu| {
        let cpu_real = arch::cpu_id();
        if cpu_real != cpu {
            FAILS.fetch_add(1, Ordering::SeqCst);
        }
        let frames: Vec<u64> = (0..64)
            .filter_map(|_| phys::alloc(cpu_real, 0, false))
            .collect();
        let mut maps = Vec::new();
        let mut mmu = KernelMmu;
        for n in [1usize, 2, 3, 4, 8, 17, 64] {
            match mm::map_ram().map(&mut mmu, &mut PhysFrames, cpu_real, &frames[..n]) {
                Ok(va) => maps.push((va, n)),
                Err(_) => {
                    FAILS.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        for &(va, n) in &maps {
            for p in 0..n as u64 {
                if !fault::probe_write(va + p * PAGE, va + p)
                    || mmu.translate(va + p * PAGE) != Some(frames[p as usize])
                {
                    FAILS.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        // Every other mapping through the next CPU's queue: any CPU may
        // unmap what another mapped.
        for (i, &(va, n)) in maps.iter().enumerate() {
            let on = (cpu_real + i % 2) % cpus;
            if mm::map_ram()
                .unmap(&mut mmu, &mut PhysFrames, on, va, n)
                .is_err()
                || mmu.translate(va).is_some()
            {
                FAILS.fetch_add(1, Ordering::SeqCst);
            }
        }
        for p in frames {
            phys::free(cpu_real, p, 0);
        }
        DONE.fetch_add(1, Ordering::SeqCst);
    });
    let f = FAILS.load(Ordering::SeqCst);
    ensure(f == 0 && DONE.load(Ordering::SeqCst) == cpus, || {
        format!("{f} failures")
    })?;
    let f0 = tlb::FLUSHES.load(Ordering::SeqCst);
    mm::map_ram().unmap_aliases(&mut KernelMmu, &mut PhysFrames);
    let flushes = tlb::FLUSHES.load(Ordering::SeqCst) - f0;
    ensure(flushes == 1, || {
        format!("vm_unmap_aliases made {flushes} flushes, one expected")
    })
}

fn percpu_counters_on_every_cpu() -> Result<(), String> {
    use alloc::sync::Arc;
    let live0 = crate::pervar::check().map_err(|e| format!("percpu: {e}"))?;
    let cpus = percpu::online();
    let c = Arc::new(crate::pervar::Counter::new().ok_or("no per-CPU counter")?);
    let c2 = Arc::clone(&c);
    smp::run_on(cpus, move |cpu| {
        for _ in 0..1000 {
            c2.add(cpu as u64 + 1);
        }
    });
    for cpu in 0..cpus {
        let got = c.get(cpu);
        ensure(got == 1000 * (cpu as u64 + 1), || {
            format!("cpu {cpu}'s copy is {got}")
        })?;
    }
    let mut addrs: Vec<u64> = (0..cpus).map(|cpu| c.addr(cpu)).collect();
    addrs.sort_unstable();
    addrs.dedup();
    ensure(addrs.len() == cpus, || "two CPUs share a copy".into())?;
    let n = cpus as u64;
    ensure(c.sum() == 1000 * n * (n + 1) / 2, || {
        format!("sum {}", c.sum())
    })?;
    let live = crate::pervar::check().map_err(|e| format!("percpu: {e}"))?;
    ensure(live == live0 + 1, || {
        format!("{live} live per-CPU allocations, {} expected", live0 + 1)
    })?;
    drop(c);
    let back = crate::pervar::check().map_err(|e| format!("percpu: {e}"))?;
    ensure(back == live0, || {
        format!("{back} live after the free, {live0} expected")
    })
}

fn bad_input_changes_nothing() -> Result<(), String> {
    let va = mm::vmalloc(mm::tree(), 4, PAGE).map_err(|e| format!("vmalloc: {e}"))?;
    ensure(mm::vfree(mm::tree(), va + PAGE).is_err(), || {
        "vfree of an interior address accepted".into()
    })?;
    ensure(mm::vfree(mm::linear(), va).is_err(), || {
        "vfree in the wrong layer accepted".into()
    })?;
    let cpu = arch::cpu_id();
    let f = phys::alloc(cpu, 0, false).ok_or("no frame")?;
    let mut mmu = KernelMmu;
    let m = mm::map_ram()
        .map(&mut mmu, &mut PhysFrames, cpu, &[f, f])
        .map_err(|e| format!("map: {e}"))?;
    let wrong = mm::map_ram().unmap(&mut mmu, &mut PhysFrames, cpu, m, 1);
    ensure(wrong.is_err(), || {
        "vm_unmap_ram with the wrong page count accepted".into()
    })?;
    ensure(
        mmu.translate(m) == Some(f) && mmu.translate(m + PAGE) == Some(f),
        || "a refused unmap changed PTEs".into(),
    )?;
    check_all()?;
    mm::map_ram()
        .unmap(&mut mmu, &mut PhysFrames, cpu, m, 2)
        .map_err(|e| format!("unmap: {e}"))?;
    phys::free(cpu, f, 0);
    mm::vfree(mm::tree(), va).map_err(|e| format!("vfree: {e}"))
}

fn stale_tlb_caught() -> Result<(), String> {
    // After 20 rounds of steady use: round 21 flushes the whole area,
    // round 24 a chunk; the flush skipped is one of each kind.
    let mut caught = [0; 2];
    for (k, skip) in [21u64, 24].into_iter().enumerate() {
        caught[k] = stale::run(skip + 1, Some(skip))?.stale;
    }
    let possible = (stale::PAGES + tlb::CEILING) * percpu::online() as u64;
    println!(
        "STALE skipped_flush={} of={possible} whole={} chunk={}",
        caught[0] + caught[1],
        caught[0],
        caught[1]
    );
    ensure(caught.iter().all(|&c| c > 0), || {
        format!("a skipped flush went unnoticed (stale reads {caught:?})")
    })
}

/// The detector with flushing on over at least `cycles` cycles.
fn stale_tlb_none(cycles: u64) -> Result<(), String> {
    let r = stale::run(stale::rounds_for(cycles), None)?;
    println!(
        "STALE flushing cycles={} pages={} cpus={} reads={} flushes={} stale={} ms={} ns_per_cycle={}",
        r.cycles,
        stale::PAGES,
        percpu::online(),
        r.reads,
        r.flushes,
        r.stale,
        r.ns / 1_000_000,
        r.ns / r.cycles.max(1)
    );
    ensure(r.stale == 0, || {
        format!("{} stale reads with flushing on", r.stale)
    })
}
