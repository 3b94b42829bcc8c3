//! The layer on a model machine with per-CPU TLBs: a translation a CPU has
//! read stays in its TLB after the PTE is cleared, until a flush covering
//! it; the model can refuse flushes and fail maps (a CPU walks the pages a
//! failing map wrote before it fails, so they are cached like any mapped
//! page). Property tests drive
//! every public call through it, eager and lazy, both frame policies, and
//! check at every map that no CPU still caches an old translation of the
//! address (the use after free a missing shootdown allows), and under
//! [`FramePolicy::AfterFlush`] that no frame is handed out again while any
//! CPU may still reach it. At the end, with refusals off, everything freed
//! and purged: nothing is mapped and every frame is back.

extern crate std;

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use std::vec;

use mmkit::vmap::VmapAllocator;
use proptest::prelude::*;

use super::tests::Pool;
use super::*;

const CPUS: usize = 3;
const START: u64 = 0x4000_0000;
/// Room for a few blocks of 4 MiB and areas: a full space is reached.
const END: u64 = START + (24 << 20);
const FRAMES: u64 = 512;

#[derive(Default)]
struct State {
    ptes: BTreeMap<u64, u64>,
    tlbs: [BTreeMap<u64, u64>; CPUS],
    refuse: bool,
    /// Pages the MMU maps before its next map fails.
    fail_after: Option<u64>,
    violations: Vec<String>,
}

impl State {
    /// Whether any PTE or TLB reaches `pfn`.
    fn reaches(&self, pfn: u64) -> bool {
        self.ptes.values().any(|&p| p == pfn)
            || self.tlbs.iter().any(|t| t.values().any(|&p| p == pfn))
    }
}

#[derive(Clone, Default)]
struct TlbMmu(Rc<RefCell<State>>);

impl Mmu for TlbMmu {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        let mut st = self.0.borrow_mut();
        for (i, &pfn) in pfns.iter().enumerate() {
            let at = va + i as u64 * PAGE;
            if let Some(left) = &mut st.fail_after {
                if *left == 0 {
                    st.fail_after = None;
                    // Present for a moment: CPU 0 cached them.
                    for (k, &p) in pfns[..i].iter().enumerate() {
                        st.tlbs[0].insert(va + k as u64 * PAGE, p);
                    }
                    let err = VmError::MapFailed { va: at };
                    return Err(MapFailed {
                        err,
                        mapped: i as u64,
                    });
                }
                *left -= 1;
            }
            let stale: Vec<String> = (st.tlbs.iter().enumerate())
                .filter_map(|(cpu, tlb)| Some((cpu, *tlb.get(&at)?)))
                .filter(|&(_, old)| old != pfn)
                .map(|(cpu, old)| format!("{at:#x} mapped to {pfn} while CPU {cpu} caches {old}"))
                .collect();
            st.violations.extend(stale);
            st.ptes.insert(at, pfn);
        }
        Ok(())
    }

    fn clear(&mut self, va: u64, pages: u64) {
        let mut st = self.0.borrow_mut();
        for i in 0..pages {
            st.ptes.remove(&(va + i * PAGE));
        }
    }

    fn flush(&mut self, start: u64, end: u64) -> Refused {
        let mut st = self.0.borrow_mut();
        if st.refuse {
            return alloc::vec![(start, end)];
        }
        for tlb in &mut st.tlbs {
            tlb.retain(|va, _| !(start..end).contains(va));
        }
        Refused::new()
    }

    fn translate(&self, va: u64) -> Option<u64> {
        self.0.borrow().ptes.get(&va).copied()
    }
}

/// The pool, checking under `AfterFlush` that no frame it hands out is
/// still reachable; its batches stop half way while `short` is set.
struct Frames {
    pool: Pool,
    machine: Rc<RefCell<State>>,
    strict: bool,
    short: bool,
}

impl FrameSource for Frames {
    fn alloc(&mut self, max: u64) -> Option<(u64, u64)> {
        let (pfn, n) = self.pool.alloc(max)?;
        let mut st = self.machine.borrow_mut();
        for p in pfn..pfn + n {
            if self.strict && st.reaches(p) {
                st.violations
                    .push(format!("frame {p} handed out while reachable"));
            }
        }
        Some((pfn, n))
    }

    fn free(&mut self, pfn: u64, count: u64) {
        self.pool.free(pfn, count);
    }

    fn zero(&mut self, _pfn: u64, _count: u64) {}

    fn alloc_frames(&mut self, out: &mut [u64]) -> usize {
        let n = if self.short { out.len() / 2 } else { out.len() };
        let mut filled = 0;
        while filled < n {
            let Some((pfn, k)) = self.alloc((n - filled) as u64) else {
                break;
            };
            for (slot, p) in out[filled..].iter_mut().zip(pfn..pfn + k) {
                *slot = p;
            }
            filled += k as usize;
        }
        filled
    }
}

#[derive(Debug, Clone)]
enum Op {
    Vmalloc {
        pages: u64,
        zero: bool,
    },
    Vfree {
        pick: usize,
        atomic: bool,
    },
    Vmap {
        pages: u64,
    },
    Vunmap {
        pick: usize,
    },
    Vrealloc {
        pick: usize,
        pages: u64,
    },
    Touch {
        cpu: usize,
        pick: usize,
    },
    MapRam {
        cpu: usize,
        pages: u64,
    },
    UnmapRam {
        cpu: usize,
        pick: usize,
    },
    UnmapAliases,
    Purge,
    Refuse(bool),
    FailMap(u64),
    /// The frame source's batches stop half way (or no longer do).
    ShortBatch(bool),
    FreeAgain {
        pick: usize,
        interior: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..6, any::<bool>()).prop_map(|(pages, zero)| Op::Vmalloc { pages, zero }),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(pick, atomic)| Op::Vfree { pick, atomic }),
        2 => (1u64..5).prop_map(|pages| Op::Vmap { pages }),
        2 => any::<usize>().prop_map(|pick| Op::Vunmap { pick }),
        1 => (any::<usize>(), 1u64..12).prop_map(|(pick, pages)| Op::Vrealloc { pick, pages }),
        4 => (0..CPUS, any::<usize>()).prop_map(|(cpu, pick)| Op::Touch { cpu, pick }),
        3 => (0..CPUS, 1u64..9).prop_map(|(cpu, pages)| Op::MapRam { cpu, pages }),
        3 => (0..CPUS, any::<usize>()).prop_map(|(cpu, pick)| Op::UnmapRam { cpu, pick }),
        1 => Just(Op::UnmapAliases),
        1 => Just(Op::Purge),
        1 => any::<bool>().prop_map(Op::Refuse),
        1 => (0u64..4).prop_map(Op::FailMap),
        1 => any::<bool>().prop_map(Op::ShortBatch),
        1 => (any::<usize>(), any::<bool>())
            .prop_map(|(pick, interior)| Op::FreeAgain { pick, interior }),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Vmalloc,
    /// The caller's frames.
    Vmap(Vec<u64>),
    Ram(Vec<u64>),
}

/// The `pick`th live object of a kind.
fn pick_of(live: &[(u64, u64, Kind)], pick: usize, want: impl Fn(&Kind) -> bool) -> Option<usize> {
    let mine: Vec<usize> = (0..live.len()).filter(|&i| want(&live[i].2)).collect();
    (!mine.is_empty()).then(|| mine[pick % mine.len()])
}

type Layer = lock_api::Mutex<spin::Mutex<()>, Vmalloc<VmapAllocator>>;

struct Run {
    layer: &'static Layer,
    ram: MapRam<spin::Mutex<()>, VmapAllocator>,
    mmu: TlbMmu,
    src: Frames,
    live: Vec<(u64, u64, Kind)>,
    freed: Vec<u64>,
    /// Frames of `vm_map_ram` mappings unmapped: the caller frees them
    /// after a `vm_unmap_aliases` that was not refused.
    unmapped_ram: Vec<u64>,
}

impl Run {
    fn new(flush: Flush, frames: FramePolicy) -> Self {
        Self::pooled(flush, frames, 0)
    }

    /// A run whose layer pools areas of up to `pool_pages` pages.
    fn pooled(flush: Flush, frames: FramePolicy, pool_pages: usize) -> Self {
        let range = VmapAllocator::new(START, END).unwrap();
        let mut v = Vmalloc::with_frames(range, flush, frames);
        v.set_pools(pool_pages, 3);
        let layer: &'static Layer = Box::leak(Box::new(lock_api::Mutex::new(v)));
        let mmu = TlbMmu::default();
        let src = Frames {
            pool: Pool::new(FRAMES),
            machine: Rc::clone(&mmu.0),
            strict: frames == FramePolicy::AfterFlush,
            short: false,
        };
        Run {
            layer,
            ram: MapRam::new(layer, CPUS).unwrap(),
            mmu,
            src,
            live: Vec::new(),
            freed: Vec::new(),
            unmapped_ram: Vec::new(),
        }
    }

    fn caller_frames(&mut self, pages: u64) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        frames::take(&mut self.src, pages, &mut out).then_some(out)
    }

    fn step(&mut self, op: &Op) {
        let (m, f) = (&mut self.mmu, &mut self.src);
        match *op {
            Op::Vmalloc { pages, zero } => {
                let mut l = self.layer.lock();
                let r = if zero {
                    l.vzalloc(m, f, pages * PAGE)
                } else {
                    l.vmalloc(m, f, pages * PAGE - 1)
                };
                if let Ok(va) = r {
                    self.live.push((va, pages, Kind::Vmalloc));
                }
            }
            Op::Vfree { pick, atomic } => {
                let Some(i) = pick_of(&self.live, pick, |k| *k == Kind::Vmalloc) else {
                    return;
                };
                let (va, _, _) = self.live.swap_remove(i);
                let mut l = self.layer.lock();
                let r = if atomic {
                    l.vfree_atomic(m, f, va)
                } else {
                    l.vfree(m, f, va)
                };
                assert_eq!(r, Ok(()));
                self.freed.push(va);
            }
            Op::Vmap { pages } => {
                let Some(frames) = self.caller_frames(pages) else {
                    return;
                };
                let (m, f) = (&mut self.mmu, &mut self.src);
                match self.layer.lock().vmap(m, f, &frames, PAGE) {
                    Ok(va) => self.live.push((va, pages, Kind::Vmap(frames))),
                    Err(VmError::FramesHeld { held }) => {
                        f.free_frames(&frames[held as usize..]);
                    }
                    Err(_) => f.free_frames(&frames),
                }
            }
            Op::Vunmap { pick } => {
                let Some(i) = pick_of(&self.live, pick, |k| matches!(k, Kind::Vmap(_))) else {
                    return;
                };
                let (va, _, kind) = self.live.swap_remove(i);
                let back = self.layer.lock().vunmap(m, f, va).unwrap();
                if let (Some(back), Kind::Vmap(frames)) = (back, kind) {
                    assert_eq!(back, frames);
                    f.free_frames(&back);
                }
                self.freed.push(va);
            }
            Op::Vrealloc { pick, pages } => {
                let Some(i) = pick_of(&self.live, pick, |k| *k == Kind::Vmalloc) else {
                    return;
                };
                let (va, had) = (self.live[i].0, self.live[i].1);
                let mut l = self.layer.lock();
                match l.vrealloc(m, f, va, pages * PAGE) {
                    Ok(to) => {
                        if to != va {
                            self.freed.push(va);
                        }
                        self.live[i].0 = to;
                        self.live[i].1 = had.max(pages);
                    }
                    // Unchanged on error: its pages, then its guard page.
                    Err(e) => assert_eq!(
                        l.lookup(va + had * PAGE),
                        Where::Guard { area: va },
                        "{e:?} left the area at {va:#x} resized"
                    ),
                }
            }
            Op::Touch { cpu, pick } => {
                if self.live.is_empty() {
                    return;
                }
                let (va, pages, _) = self.live[pick % self.live.len()];
                let mut st = self.mmu.0.borrow_mut();
                for p in 0..pages {
                    let at = va + p * PAGE;
                    let cached = st.tlbs[cpu].get(&at).copied();
                    let pfn = cached.or_else(|| st.ptes.get(&at).copied());
                    assert!(pfn.is_some(), "a live page at {at:#x} is not mapped");
                    if let Some(pfn) = pfn {
                        st.tlbs[cpu].insert(at, pfn);
                    }
                }
            }
            Op::MapRam { cpu, pages } => {
                let Some(frames) = self.caller_frames(pages) else {
                    return;
                };
                let (m, f) = (&mut self.mmu, &mut self.src);
                match self.ram.map(m, f, cpu, &frames) {
                    Ok(va) => self.live.push((va, pages, Kind::Ram(frames))),
                    // Reachable until the next vm_unmap_aliases, as unmapped.
                    Err(_) => self.unmapped_ram.extend(frames),
                }
            }
            Op::UnmapRam { cpu, pick } => {
                let Some(i) = pick_of(&self.live, pick, |k| matches!(k, Kind::Ram(_))) else {
                    return;
                };
                let (va, pages, kind) = self.live.swap_remove(i);
                assert_eq!(self.ram.unmap(m, f, cpu, va, pages as usize), Ok(()));
                if let Kind::Ram(frames) = kind {
                    self.unmapped_ram.extend(frames);
                }
            }
            Op::UnmapAliases => {
                let refused = self.mmu.0.borrow().refuse;
                let (m, f) = (&mut self.mmu, &mut self.src);
                self.ram.unmap_aliases(m, f);
                if !refused {
                    f.free_frames(&core::mem::take(&mut self.unmapped_ram));
                }
            }
            Op::Purge => {
                self.layer.lock().purge(m, f);
            }
            Op::Refuse(on) => self.mmu.0.borrow_mut().refuse = on,
            Op::FailMap(after) => self.mmu.0.borrow_mut().fail_after = Some(after),
            Op::ShortBatch(on) => self.src.short = on,
            Op::FreeAgain { pick, interior } => self.misuse(pick, interior),
        }
    }

    /// A double free or an interior address: a typed error, nothing
    /// changed (the PTEs and the books stay as they were).
    fn misuse(&mut self, pick: usize, interior: bool) {
        let (m, f) = (&mut self.mmu, &mut self.src);
        let before = m.0.borrow().ptes.clone();
        let (va, r) = if interior {
            let Some(i) = pick_of(&self.live, pick, |k| *k == Kind::Vmalloc) else {
                return;
            };
            let va = self.live[i].0 + PAGE;
            (va, self.layer.lock().vfree(m, f, va))
        } else {
            let Some(&va) = self.freed.get(pick % self.freed.len().max(1)) else {
                return;
            };
            if self.live.iter().any(|l| l.0 == va) {
                return;
            }
            (va, self.layer.lock().vfree(m, f, va))
        };
        assert!(r.is_err(), "a bad vfree({va:#x}) was accepted");
        assert_eq!(m.0.borrow().ptes, before, "a bad vfree changed the PTEs");
    }

    /// Frees everything with refusals off and purges: nothing mapped, every
    /// frame back.
    fn finish(mut self) {
        self.mmu.0.borrow_mut().refuse = false;
        self.mmu.0.borrow_mut().fail_after = None;
        self.src.short = false;
        for (va, pages, kind) in core::mem::take(&mut self.live) {
            let (m, f) = (&mut self.mmu, &mut self.src);
            match kind {
                Kind::Vmalloc => self.layer.lock().vfree(m, f, va).unwrap(),
                Kind::Vmap(frames) => {
                    if let Some(back) = self.layer.lock().vunmap(m, f, va).unwrap() {
                        assert_eq!(back, frames);
                        f.free_frames(&back);
                    }
                }
                Kind::Ram(frames) => {
                    self.ram.unmap(m, f, 0, va, pages as usize).unwrap();
                    self.unmapped_ram.extend(frames);
                }
            }
        }
        let (m, f) = (&mut self.mmu, &mut self.src);
        self.ram.unmap_aliases(m, f);
        f.free_frames(&core::mem::take(&mut self.unmapped_ram));
        self.layer.lock().purge(m, f);
        let l = self.layer.lock();
        l.check(&self.mmu).unwrap();
        assert_eq!(
            (l.stuck(), l.lazy().0, l.live_areas(), l.pooled()),
            (0, 0, 0, 0)
        );
        assert!(self.mmu.0.borrow().ptes.is_empty(), "pages left mapped");
        assert_eq!(self.src.pool.free.len() as u64, FRAMES, "frames lost");
    }

    fn check(&self) {
        let st = self.mmu.0.borrow();
        assert!(st.violations.is_empty(), "{:?}", st.violations);
        drop(st);
        self.layer.lock().check(&self.mmu).unwrap();
        self.ram.check().unwrap();
    }
}

fn policies() -> impl Strategy<Value = (Flush, FramePolicy)> {
    let flush = prop_oneof![
        Just(Flush::Eager),
        (1u64..16).prop_map(|p| Flush::Lazy {
            max_bytes: p * PAGE
        }),
    ];
    let frames = prop_oneof![Just(FramePolicy::AtOnce), Just(FramePolicy::AfterFlush)];
    (flush, frames)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_stale_translation_on_any_sequence(
        (flush, frames) in policies(),
        pool_pages in prop_oneof![Just(0usize), 1usize..5],
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut run = Run::pooled(flush, frames, pool_pages);
        for op in &ops {
            run.step(op);
            run.check();
        }
        run.finish();
    }
}

/// The model catches the bug it is for: a layer that frees a range before
/// its flush (here, a purge whose flush does nothing) maps it again while
/// a CPU caches the old translation.
#[test]
fn the_model_sees_a_range_reused_before_its_flush() {
    let lazy = Flush::Lazy {
        max_bytes: u64::MAX,
    };
    let mut run = Run::new(lazy, FramePolicy::AfterFlush);
    run.step(&Op::Vmalloc {
        pages: 1,
        zero: false,
    });
    run.step(&Op::Touch { cpu: 1, pick: 0 });
    run.step(&Op::Vfree {
        pick: 0,
        atomic: false,
    });
    // Release the lazy list without flushing: what a layer that forgot
    // the shootdown would do.
    let p = run.layer.lock().purge_through(&mut |_, _| Refused::new());
    drop(p);
    run.step(&Op::Vmalloc {
        pages: 1,
        zero: false,
    });
    assert_eq!(run.mmu.0.borrow().violations.len(), 1);
}

/// A `vmap` that fails half way while flushes are refused: the pages it
/// wrote stay cached, so under `AfterFlush` the layer holds their frames
/// (and says so) until a flush releases them; the caller gets the others.
#[test]
fn a_failed_vmap_whose_takedown_flush_is_refused_holds_its_frames() {
    for flush in [Flush::Eager, Flush::Lazy { max_bytes: PAGE }] {
        let mut run = Run::new(flush, FramePolicy::AfterFlush);
        run.step(&Op::Refuse(true));
        run.step(&Op::FailMap(2));
        let frames = run.caller_frames(4).unwrap();
        let (m, f) = (&mut run.mmu, &mut run.src);
        let r = run.layer.lock().vmap(m, f, &frames, PAGE);
        assert_eq!(r, Err(VmError::FramesHeld { held: 2 }));
        f.free_frames(&frames[2..]);
        assert_eq!(run.layer.lock().stuck(), 1);
        // Every frame handed out now is one no CPU reaches.
        run.step(&Op::Vmalloc {
            pages: 5,
            zero: false,
        });
        run.check();
        run.step(&Op::Refuse(false));
        run.step(&Op::Purge);
        assert_eq!(run.layer.lock().stuck(), 0);
        run.finish();
    }
}

/// A `vrealloc` that fails half way while flushes are refused: the pages
/// it wrote show the area's own frames, so when the area is freed (its
/// own flush succeeding) those frames wait for the stuck range's flush.
#[test]
fn a_failed_vrealloc_shadows_the_frames_its_stuck_range_shows() {
    let mut run = Run::new(Flush::Eager, FramePolicy::AfterFlush);
    let pages = |pages| Op::Vmalloc { pages, zero: false };
    run.step(&pages(1));
    // An area right after it: the growth cannot stay in place, it moves.
    run.step(&pages(1));
    run.step(&Op::Refuse(true));
    run.step(&Op::FailMap(1));
    run.step(&Op::Vrealloc { pick: 0, pages: 3 });
    assert_eq!(run.layer.lock().stuck(), 1);
    run.step(&Op::Refuse(false));
    let (m, f) = (&mut run.mmu, &mut run.src);
    run.layer.lock().vfree(m, f, run.live[0].0).unwrap();
    run.live.remove(0);
    // Every frame the pool has now, handed out: none may be reachable.
    run.step(&pages(run.src.pool.free.len() as u64));
    run.check();
    run.finish();
}

/// A growth in place whose map fails part way is taken down: the area is
/// as it was, the pages the map wrote are cleared and flushed (with the
/// flush refused, the piece waits on the stuck list and, under
/// `AfterFlush`, holds their frames until a flush releases them), and
/// every frame comes back.
#[test]
fn a_growth_in_place_that_fails_part_way_leaves_the_area_as_it_was() {
    for policy in [FramePolicy::AtOnce, FramePolicy::AfterFlush] {
        for refuse in [false, true] {
            let mut run = Run::new(Flush::Eager, policy);
            run.step(&Op::Vmalloc {
                pages: 1,
                zero: false,
            });
            run.step(&Op::Touch { cpu: 1, pick: 0 });
            run.step(&Op::Refuse(refuse));
            run.step(&Op::FailMap(2));
            let va = run.live[0].0;
            let (m, f) = (&mut run.mmu, &mut run.src);
            let r = run.layer.lock().vrealloc(m, f, va, 5 * PAGE);
            assert!(matches!(r, Err(VmError::MapFailed { .. })), "{r:?}");
            let l = run.layer.lock();
            assert_eq!(l.lookup(va), Where::Mapped { area: va, pfn: 0 });
            assert_eq!(l.lookup(va + PAGE), Where::Guard { area: va });
            assert_eq!(l.stuck(), usize::from(refuse));
            drop(l);
            let ptes = run.mmu.0.borrow().ptes.len();
            assert_eq!(ptes, 1, "the pages the map wrote are cleared");
            let out = FRAMES - run.src.pool.free.len() as u64;
            let held = u64::from(refuse && policy == FramePolicy::AfterFlush);
            assert_eq!(out, 1 + 2 * held, "the growth's frames went back");
            run.check();
            run.step(&Op::Refuse(false));
            run.step(&Op::Purge);
            assert_eq!(FRAMES - run.src.pool.free.len() as u64, 1);
            run.finish();
        }
    }
}
