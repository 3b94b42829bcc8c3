//! The layer over a machine like `mmkit-vm`'s: clearing only records a
//! range (the mapping stays until the flush), a flush unmaps the recorded
//! ranges inside its span with one call per run of adjacent ones, and the
//! kernel may refuse a call. Areas keep their frames until released. Then
//! one model drives a kernel-like and this user-like machine through the
//! same layer.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec;
use alloc::vec::Vec;

use mmkit::vmap::VmapAllocator;

use super::tests::Machine;
use super::*;

const START: u64 = 0x1000_0000;

#[derive(Default)]
struct UserMachine {
    /// What the kernel maps: page -> frame.
    mapped: BTreeMap<u64, u64>,
    /// Ranges cleared and not unmapped yet.
    cleared: Vec<(u64, u64)>,
    /// Unmapping calls made, refused ones included.
    calls: u64,
    /// Runs (by start) the kernel refuses to unmap.
    refuse: BTreeSet<u64>,
    /// Pages left before `map` fails (none: no limit).
    map_budget: Option<u64>,
}

impl Mmu for UserMachine {
    fn map(&mut self, va: u64, pfns: &[u64]) -> Result<(), MapFailed> {
        for (i, &pfn) in pfns.iter().enumerate() {
            if let Some(b) = &mut self.map_budget {
                if *b == 0 {
                    let err = VmError::MapFailed {
                        va: va + i as u64 * PAGE,
                    };
                    return Err(MapFailed {
                        err,
                        mapped: i as u64,
                    });
                }
                *b -= 1;
            }
            self.mapped.insert(va + i as u64 * PAGE, pfn);
        }
        Ok(())
    }

    fn clear(&mut self, va: u64, pages: u64) {
        self.cleared.push((va, va + pages * PAGE));
    }

    fn flush(&mut self, start: u64, end: u64) -> Refused {
        let (mut todo, keep): (Vec<_>, Vec<_>) = self
            .cleared
            .iter()
            .partition(|&&(s, e)| start <= s && e <= end);
        self.cleared = keep;
        todo.sort_unstable();
        let mut refused = Vec::new();
        let mut i = 0;
        while i < todo.len() {
            let (s, mut e) = todo[i];
            let mut j = i + 1;
            while j < todo.len() && todo[j].0 == e {
                e = todo[j].1;
                j += 1;
            }
            self.calls += 1;
            if self.refuse.contains(&s) {
                refused.push((s, e));
                self.cleared.extend_from_slice(&todo[i..j]);
            } else {
                let pages: Vec<u64> = self.mapped.range(s..e).map(|(&va, _)| va).collect();
                for va in pages {
                    self.mapped.remove(&va);
                }
            }
            i = j;
        }
        refused
    }

    fn translate(&self, va: u64) -> Option<u64> {
        self.mapped.get(&va).copied()
    }
}

/// Driven through the low-level steps, an [`Area`] keeps its frames until
/// its range is released.
type Layer = Vmalloc<VmapAllocator, Area>;

fn layer(pages: u64, flush: Flush) -> Layer {
    Vmalloc::new(
        VmapAllocator::new(START, START + pages * PAGE).unwrap(),
        flush,
    )
}

/// vmalloc as `mmkit-vm` drives the layer: reserve, map, record; a map
/// that fails half way is taken down at once. Frames come back through
/// `back` when released.
fn alloc(
    v: &mut Layer,
    m: &mut UserMachine,
    frames: Vec<u64>,
    back: &mut Vec<u64>,
) -> Result<u64, VmError> {
    let span = (frames.len() as u64 + 1) * PAGE;
    let va = match v.reserve(span, PAGE, v.range().space()) {
        Ok(va) => va,
        Err(_) => {
            let p = v.purge_released(m);
            give_back(p.released, back);
            v.reserve(span, PAGE, v.range().space())
                .map_err(|_| VmError::NoSpace { bytes: span })?
        }
    };
    if let Err(f) = m.map(va, &frames) {
        let out = v.retire(m, va, span, Gone::Area(Area::default()), true);
        let out = out.unwrap();
        give_back(out.released, back);
        return Err(f.err);
    }
    v.insert(
        va,
        Area {
            frames,
            owned: true,
            pieces: Pieces::default(),
            tag: 0,
        },
    )
    .unwrap();
    Ok(va)
}

fn free(v: &mut Layer, m: &mut UserMachine, va: u64, back: &mut Vec<u64>) {
    let a = v.take(va).unwrap();
    let out = v.retire(m, va, a.span(), Gone::Area(a), false).unwrap();
    give_back(out.released, back);
    if out.purge_due {
        give_back(v.purge_released(m).released, back);
    }
}

fn give_back(released: Vec<Released<Area>>, back: &mut Vec<u64>) {
    for r in released {
        if let Gone::Area(a) = r.what {
            back.extend(a.frames);
        }
    }
}

#[test]
fn a_refused_flush_keeps_the_range_stuck_until_a_purge_releases_it() {
    let mut m = UserMachine::default();
    let mut v = layer(4, Flush::Lazy { max_bytes: 1 << 20 });
    let mut back = Vec::new();
    let a = alloc(&mut v, &mut m, vec![1, 2], &mut back).unwrap();
    free(&mut v, &mut m, a, &mut back);
    assert_eq!(m.translate(a), Some(1), "a lazily freed area stays mapped");
    m.refuse.insert(a);
    let p = v.purge_released(&mut m);
    assert!(p.flushed.is_some() && p.released.is_empty());
    assert_eq!((v.stuck(), v.stats().refusals, m.calls), (1, 1, 1));
    assert_eq!(v.lookup(a), Where::Lazy { area: a });
    assert_eq!(m.translate(a), Some(1), "refused: still mapped");
    // Its range stays allocated: a 3-page area does not fit beside it, and
    // the purge the failed reservation makes is refused again.
    assert_eq!(
        alloc(&mut v, &mut m, vec![3, 4, 5], &mut back),
        Err(VmError::NoSpace { bytes: 4 * PAGE })
    );
    assert_eq!((v.stuck(), m.calls), (1, 2));
    v.check(&m).unwrap();
    assert!(back.is_empty(), "frames of a stuck area are not given back");
    m.refuse.clear();
    let b = alloc(&mut v, &mut m, vec![3, 4, 5], &mut back).unwrap();
    assert_eq!((b, v.stuck(), m.translate(a + PAGE)), (a, 0, Some(4)));
    assert_eq!(back, [1, 2]);
    v.check(&m).unwrap();
}

#[test]
fn an_eager_free_that_is_refused_waits_on_the_stuck_list() {
    let mut m = UserMachine::default();
    let mut v = layer(64, Flush::Eager);
    let mut back = Vec::new();
    let a = alloc(&mut v, &mut m, vec![7], &mut back).unwrap();
    m.refuse.insert(a);
    free(&mut v, &mut m, a, &mut back);
    assert_eq!((v.stuck(), v.lazy().0, back.len()), (1, 0, 0));
    m.refuse.clear();
    let p = v.purge_released(&mut m);
    assert_eq!(p.released.len(), 1);
    assert_eq!((v.stuck(), m.mapped.len()), (0, 0));
    v.check_books().unwrap();
}

#[test]
fn a_map_that_fails_half_way_is_taken_down() {
    let mut m = UserMachine {
        map_budget: Some(2),
        ..UserMachine::default()
    };
    let mut v = layer(64, Flush::Lazy { max_bytes: 1 << 20 });
    let mut back = Vec::new();
    assert_eq!(
        alloc(&mut v, &mut m, vec![1, 2, 3], &mut back),
        Err(VmError::MapFailed {
            va: START + 2 * PAGE
        })
    );
    assert!(m.mapped.is_empty());
    assert_eq!((m.calls, v.stats().released), (1, 1));
    assert_eq!(v.range().stats().live_areas, 0);
    v.check(&m).unwrap();
}

#[test]
fn one_call_per_run_of_adjacent_freed_areas_and_live_ones_untouched() {
    let mut m = UserMachine::default();
    let mut v = layer(64, Flush::Lazy { max_bytes: 1 << 20 });
    let mut back = Vec::new();
    let a: Vec<u64> = (0..5)
        .map(|i| alloc(&mut v, &mut m, vec![i], &mut back).unwrap())
        .collect();
    for &i in &[0, 1, 3, 4] {
        free(&mut v, &mut m, a[i], &mut back);
    }
    let p = v.purge_released(&mut m);
    assert_eq!(p.flushed, Some((a[0], a[4] + 2 * PAGE)));
    assert_eq!(m.calls, 2, "two runs: [0, 1] and [3, 4]");
    assert_eq!(
        m.translate(a[2]),
        Some(2),
        "the live area inside the span stays"
    );
    give_back(p.released, &mut back);
    back.sort_unstable();
    assert_eq!(back, [0, 1, 3, 4]);
    v.check(&m).unwrap();
}

/// One sequence of maps and unmaps through the same layer on a kernel-like
/// machine (PTEs and a TLB) and on the user-like one: the same addresses
/// while nothing is refused; then with refusals on the user machine, every
/// page it still maps belongs to a live area at its frame or to a range
/// the layer keeps lazy or stuck, and the checks pass at every step.
#[test]
fn the_same_layer_drives_both_machines() {
    let lazy = Flush::Lazy {
        max_bytes: 32 * PAGE,
    };
    for refusals in [false, true] {
        let mut km = Machine::default();
        let mut kv: Vmalloc<VmapAllocator> = Vmalloc::new(
            VmapAllocator::new(START, START + 4096 * PAGE).unwrap(),
            lazy,
        );
        let mut um = UserMachine::default();
        let mut uv = layer(4096, lazy);
        let mut back = Vec::new();
        let mut f = super::tests::no_frames();
        let mut live: Vec<(u64, u64, Vec<u64>)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut made = 0;
        for step in 0..1500u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if refusals && x % 17 == 0 {
                um.refuse.clear();
                if let Some(&(_, u, _)) = live.get((x >> 20) as usize % live.len().max(1)) {
                    um.refuse.insert(u);
                }
            }
            if x % 3 != 0 || live.is_empty() {
                let frames: Vec<u64> = (0..(x >> 8) % 4 + 1).map(|p| step * 8 + p).collect();
                let k = kv.vmap(&mut km, &mut f, &frames, PAGE);
                let u = alloc(&mut uv, &mut um, frames.clone(), &mut back);
                made += u.is_ok() as usize * frames.len();
                match (k, u) {
                    (Ok(k), Ok(u)) => {
                        if !refusals {
                            assert_eq!(k, u, "step {step}");
                        }
                        live.push((k, u, frames));
                    }
                    (k, u) => {
                        assert!(refusals, "step {step}: {k:?} {u:?}");
                        if let Ok(k) = k {
                            kv.vunmap(&mut km, &mut f, k).unwrap();
                        }
                        if let Ok(u) = u {
                            free(&mut uv, &mut um, u, &mut back);
                        }
                    }
                }
            } else {
                let (k, u, frames) = live.swap_remove((x >> 16) as usize % live.len());
                assert_eq!(kv.vunmap(&mut km, &mut f, k).unwrap(), Some(frames));
                free(&mut uv, &mut um, u, &mut back);
            }
            kv.check(&km).unwrap();
            uv.check(&um).unwrap();
            for (&va, &pfn) in &um.mapped {
                match uv.lookup(va) {
                    Where::Mapped { pfn: p, .. } => assert_eq!(p, pfn),
                    Where::Lazy { .. } => {}
                    w => panic!("step {step}: {va:#x} mapped, the layer says {w:?}"),
                }
            }
        }
        assert_eq!(km.stale_maps, 0);
        um.refuse.clear();
        give_back(uv.purge_released(&mut um).released, &mut back);
        assert_eq!(uv.stuck(), 0);
        let live_pages: usize = live.iter().map(|l| l.2.len()).sum();
        assert_eq!(um.mapped.len(), live_pages, "only live areas stay mapped");
        let given = back.len();
        back.sort_unstable();
        back.dedup();
        assert_eq!(back.len(), given, "no frame given back twice");
        assert_eq!(given + live_pages, made, "every frame live or given back");
        assert_eq!(uv.stats().refusals > 0, refusals);
    }
}
