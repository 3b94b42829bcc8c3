//! The tests every boot runs: each returns `Err(reason)` on failure and
//! the boot ends with the failing exit code. After each, [`check_all`]
//! runs every allocator's `check()` and compares a walk of the page tables
//! with the layers.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::mm::{self, KernelMmu, PhysFrames};
use crate::paging::{self, VMALLOC_START};
use crate::{arch, fault, percpu, phys, println, smp, stale, stale_vmalloc, tlb};
use mmkit_vmalloc::{Mmu, Where, PAGE};

/// Every allocator's `check()`, and the page-table walk against the layers.
pub fn check_all() -> Result<(), String> {
    phys::check().map_err(|e| format!("buddy/pcp: {e}"))?;
    crate::pervar::check().map_err(|e| format!("percpu: {e}"))?;
    let ram = mm::map_ram();
    ram.check().map_err(|e| format!("vm_map_ram: {e}"))?;
    let ram_nodes = mm::map_ram_nodes();
    ram_nodes
        .check()
        .map_err(|e| format!("vm_map_ram (nodes): {e}"))?;
    let ram_pages = ram.live_pages();
    // The present PTEs by layer: tree, eager list, lazy list, nodes, none.
    let mut by_layer: [Vec<(u64, u64)>; 5] = Default::default();
    let mut bad_flags = 0u64;
    paging::walk(&mut |va, pfn| {
        if !paging::flags_ok(va) {
            bad_flags += 1;
        }
        let k = [
            mm::TREE_RANGE,
            mm::LINEAR_RANGE,
            mm::LINEAR_LAZY_RANGE,
            crate::nodes::RANGE,
        ]
        .iter()
        .position(|r| (r.0..r.1).contains(&va))
        .unwrap_or(4);
        by_layer[k].push((va, pfn));
    });
    if bad_flags != 0 {
        return Err(format!("{bad_flags} PTEs not present+writable+NX"));
    }
    let [low, eager, lazy, nodes, outside] = by_layer;
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
        .chain(&nodes)
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
    let nodes_ram_pages = ram_nodes.live_pages();
    let mut in_node_blocks = 0;
    let node_layers = crate::nodes::layers();
    for (i, ptes) in crate::nodes::split_ptes(&nodes).into_iter().enumerate() {
        let l = node_layers[i].lock();
        l.check(&KernelMmu)
            .map_err(|e| format!("nodes layer {i}: {e}"))?;
        in_node_blocks += l
            .check_walk(ptes.into_iter())
            .map_err(|e| format!("nodes layer {i} walk: {e}"))?;
    }
    if in_node_blocks != nodes_ram_pages {
        return Err(format!(
            "{in_node_blocks} PTEs in the nodes' vm_map_ram blocks, {nodes_ram_pages} pages mapped there"
        ));
    }
    if dups > ram_pages + nodes_ram_pages {
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

/// How a test ended, when it did not fail.
pub enum Outcome {
    /// It ran and passed.
    Passed,
    /// It cannot run on this machine (the reason).
    Skipped(&'static str),
}

/// A test's result.
type TestResult = Result<Outcome, String>;

/// Runs every test; returns how many passed, or the first failure.
pub fn run_all(cycles: u64) -> Result<usize, String> {
    type Test<'a> = (&'a str, &'a dyn Fn() -> TestResult);
    let tests: [Test<'_>; 12] = [
        ("ipi_reaches_every_cpu", &ipi_reaches_every_cpu),
        (
            "vmalloc_maps_real_frames",
            &passes(vmalloc_maps_real_frames),
        ),
        ("use_after_vfree_faults", &passes(use_after_vfree_faults)),
        (
            "vfree_atomic_never_flushes",
            &passes(vfree_atomic_never_flushes),
        ),
        ("map_ram_on_every_cpu", &passes(map_ram_on_every_cpu)),
        (
            "bad_input_changes_nothing",
            &passes(bad_input_changes_nothing),
        ),
        (
            "percpu_counters_on_every_cpu",
            &passes(percpu_counters_on_every_cpu),
        ),
        ("stale_tlb_caught_without_flush", &passes(stale_tlb_caught)),
        (
            "stale_tlb_none_with_flush",
            &passes(|| stale_tlb_none(cycles)),
        ),
        (
            "stale_tlb_none_after_vfree_eager",
            &passes(|| vfree_reuse("eager list", mm::linear())),
        ),
        (
            "stale_tlb_none_after_vfree_lazy",
            &passes(|| {
                vfree_reuse("lazy tree", mm::tree())?;
                vfree_reuse("lazy list", mm::linear_lazy())
            }),
        ),
        ("stale_tlb_none_after_vm_unmap_ram", &passes(map_ram_reuse)),
    ];
    let mut passed = 0;
    for (name, t) in tests.iter() {
        let t0 = arch::rdtsc();
        let outcome = t().map_err(|e| format!("{name}: {e}"))?;
        check_all().map_err(|e| format!("{name}: check after: {e}"))?;
        let ms = crate::time::ns(arch::rdtsc() - t0) / 1_000_000;
        match outcome {
            Outcome::Passed => {
                passed += 1;
                println!("TEST {name} ok ({ms} ms)");
            }
            Outcome::Skipped(why) => println!("TEST {name} skipped: {why}"),
        }
    }
    Ok(passed)
}

/// A test that always runs.
fn passes(t: impl Fn() -> Result<(), String>) -> impl Fn() -> TestResult {
    move || t().map(|()| Outcome::Passed)
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn ipi_reaches_every_cpu() -> TestResult {
    let cpus = percpu::online();
    if cpus == 1 {
        return Ok(Outcome::Skipped("one CPU: no other CPU to reach"));
    }
    let before: Vec<u64> = (0..cpus).map(tlb::handled).collect();
    for _ in 0..10 {
        tlb::flush_range(VMALLOC_START, VMALLOC_START + PAGE);
    }
    for (cpu, b) in before.into_iter().enumerate() {
        let got = tlb::handled(cpu) - b;
        // The sender flushes its own TLB without an IPI.
        let want = if cpu == arch::cpu_id() { 0 } else { 10 };
        ensure(got == want, || {
            format!("CPU {cpu} handled {got} shootdowns, {want} expected")
        })?;
    }
    Ok(Outcome::Passed)
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
    let cpus = percpu::online();
    let fails = smp::run_on(cpus, |cpu| {
        let mut fails = 0;
        let cpu_real = arch::cpu_id();
        if cpu_real != cpu {
            fails += 1;
        }
        let frames: Vec<u64> = (0..64)
            .filter_map(|_| phys::alloc(cpu_real, 0, false))
            .collect();
        if frames.len() != 64 {
            frames.iter().for_each(|&p| phys::free(cpu_real, p, 0));
            return 1;
        }
        let mut maps = Vec::new();
        let mut mmu = KernelMmu;
        for n in [1usize, 2, 3, 4, 8, 17, 64] {
            match mm::map_ram().map(&mut mmu, &mut PhysFrames, cpu_real, &frames[..n]) {
                Ok(va) => maps.push((va, n)),
                Err(_) => fails += 1,
            }
        }
        for &(va, n) in &maps {
            for p in 0..n as u64 {
                if !fault::probe_write(va + p * PAGE, va + p)
                    || mmu.translate(va + p * PAGE) != Some(frames[p as usize])
                {
                    fails += 1;
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
                fails += 1;
            }
        }
        for p in frames {
            phys::free(cpu_real, p, 0);
        }
        fails
    });
    ensure(fails.iter().all(|&f| f == 0) && fails.len() == cpus, || {
        format!("failures by CPU: {fails:?}")
    })?;
    let f0 = tlb::FLUSHES.load(Ordering::SeqCst);
    mm::map_ram().unmap_aliases(&mut KernelMmu, &mut PhysFrames);
    let flushes = tlb::FLUSHES.load(Ordering::SeqCst) - f0;
    ensure(flushes == 1, || {
        format!("vm_unmap_aliases made {flushes} flushes, one expected")
    })
}

fn percpu_counters_on_every_cpu() -> Result<(), String> {
    let live0 = crate::pervar::check().map_err(|e| format!("percpu: {e}"))?;
    let cpus = percpu::online();
    let c = crate::pervar::Counter::new().ok_or("no per-CPU counter")?;
    smp::run_on(cpus, |cpu| {
        for _ in 0..1000 {
            c.add(cpu as u64 + 1);
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
    // round 24 a chunk; the flush skipped is one of each kind, in the last
    // round of its run, and only that round's reads are counted.
    let mut runs = Vec::new();
    for skip in [21u64, 24] {
        runs.push(stale::run(skip, Some(skip))?);
    }
    let stale: u64 = runs.iter().map(|r| r.seen.stale()).sum();
    let reads: u64 = runs.iter().map(|r| r.seen.reads()).sum();
    println!(
        "STALE skipped_flush={stale} of={reads} whole={} chunk={} by_cpu_whole={} by_cpu_chunk={}",
        runs[0].seen.stale(),
        runs[1].seen.stale(),
        runs[0].seen.by_cpu(),
        runs[1].seen.by_cpu()
    );
    for (kind, r) in ["whole-area", "32-page"].iter().zip(&runs) {
        let missed: Vec<usize> = (0..r.seen.per_cpu.len())
            .filter(|&c| r.seen.per_cpu[c].stale == 0)
            .collect();
        ensure(missed.is_empty(), || {
            format!("a skipped {kind} flush went unnoticed on CPUs {missed:?}")
        })?;
    }
    Ok(())
}

/// The detector with flushing on over at least `cycles` cycles.
fn stale_tlb_none(cycles: u64) -> Result<(), String> {
    let r = stale::run(stale::rounds_for(cycles), None)?;
    println!(
        "STALE flushing cycles={} pages={} cpus={} reads={} flushes={} stale={} by_cpu={} ms={} ns_per_cycle={}",
        r.cycles,
        stale::PAGES,
        percpu::online(),
        r.seen.reads(),
        r.seen.flushes,
        r.seen.stale(),
        r.seen.by_cpu(),
        r.seen.ns / 1_000_000,
        r.seen.ns / r.cycles.max(1)
    );
    r.seen.none_stale("flushing on")
}

/// Rounds of the `vm_map_ram` test: a block or more each.
const MAP_RAM_ROUNDS: u64 = 24;

/// [`stale_vmalloc::vfree_reuse`] on `layer`, every CPU checked: an eager
/// layer sends a shootdown per vfree (costly under emulation), so it makes
/// fewer rounds of fewer areas.
fn vfree_reuse<R: mmkit::range::RangeAllocator + Send>(
    name: &str,
    layer: &'static mm::Lock<mmkit_vmalloc::Vmalloc<R>>,
) -> Result<(), String> {
    let (rounds, areas) = match mm::locked(layer).flush_policy() {
        mmkit_vmalloc::Flush::Eager => (8, 8),
        mmkit_vmalloc::Flush::Lazy { .. } => (12, 24),
    };
    let s = stale_vmalloc::vfree_reuse(layer, rounds, areas)?;
    report_layer(&format!("vfree {name}"), &s);
    s.none_stale(&format!("vfree on the {name}"))
}

fn map_ram_reuse() -> Result<(), String> {
    let s = stale_vmalloc::map_ram_reuse(MAP_RAM_ROUNDS)?;
    report_layer("vm_unmap_ram", &s);
    s.none_stale("vm_map_ram ranges")
}

fn report_layer(what: &str, s: &stale::Seen) {
    println!(
        "STALE layer={} reads={} flushes={} stale={} by_cpu={} ms={}",
        what.replace(' ', "_"),
        s.reads(),
        s.flushes,
        s.stale(),
        s.by_cpu(),
        s.ns / 1_000_000
    );
}
