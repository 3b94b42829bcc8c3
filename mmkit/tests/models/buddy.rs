// The brute-force model, operations and step driver of `tests/buddy_model.rs`,
// shared (by `include!`, never copied) with the seeded fuzz driver
// (`tests/fuzz_driver.rs`) and the cargo-fuzz targets (`fuzz/`).

use std::collections::{BTreeMap, BTreeSet};

use mmkit::buddy::{
    BuddyAllocator, BuddyConfig, CompactSuitable, MigrateType, Placement, ZoneId, EXTFRAG_THRESHOLD,
};
use mmkit::{AllocError, FreeError};
use proptest::prelude::*;

#[derive(Debug, Clone, arbitrary::Arbitrary)]
enum Op {
    /// Allocate `order` (may exceed max_order) of type `mt`.
    Alloc { order: u8, mt: usize },
    /// Free the `pick`-th live allocation (modulo their number).
    Free { pick: usize },
    /// Free an arbitrary pfn/order: legal only if it names a live block.
    FreeRaw { off: u64, order: u8 },
    /// Set the migratetype of the pageblock at an arbitrary pfn.
    SetType { off: u64, mt: usize },
    /// Add the `seg`-th segment of the span (an error if already present).
    AddSeg { seg: usize },
}

#[derive(Debug, Clone)]
struct Setup {
    max_order: u8,
    pb: u8,
    start: u64,
    /// Segment boundaries inside the span and whether each starts present.
    segs: Vec<(u64, u64, bool)>,
    placement: Placement,
}

impl Setup {
    fn span(&self) -> u64 {
        self.segs.last().map_or(0, |s| s.1) - self.start
    }
}

fn setup() -> impl Strategy<Value = Setup> {
    let orders = prop_oneof![
        Just((3u8, 2u8)),
        Just((4, 2)),
        Just((5, 3)),
        Just((4, 4)),
        Just((10, 9))
    ];
    let placement = prop_oneof![Just(Placement::Head), Just(Placement::TailIfMergeLikely)];
    (
        orders,
        0u64..3000,
        prop::collection::vec((1u64..120, prop::bool::weighted(0.75)), 1..6),
        placement,
    )
        .prop_map(|((max_order, pb), start, lens, placement)| {
            let mut segs = Vec::new();
            let mut p = start;
            for (len, present) in lens {
                segs.push((p, p + len, present));
                p += len;
            }
            Setup {
                max_order,
                pb,
                start,
                segs,
                placement,
            }
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0usize..4).prop_map(|(order, mt)| Op::Alloc { order, mt }),
        2 => (0u8..12, 0usize..4).prop_map(|(order, mt)| Op::Alloc { order, mt }),
        5 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (0u64..800, 0u8..12).prop_map(|(off, order)| Op::FreeRaw { off, order }),
        1 => (0u64..800, 0usize..4).prop_map(|(off, mt)| Op::SetType { off, mt }),
        1 => (0usize..6).prop_map(|seg| Op::AddSeg { seg }),
    ]
}

struct Model {
    max_order: u8,
    pb: u8,
    start: u64,
    end: u64,
    present: Vec<bool>,
    used: Vec<bool>,
    live: BTreeMap<u64, u8>,
    highatomic: Vec<bool>,
    /// The kernel's choices, step by step.
    kern: Kernel,
}

impl Model {
    fn new(s: &Setup) -> Self {
        let end = s.start + s.span();
        let nblocks = ((end - 1) >> s.pb) - (s.start >> s.pb) + 1;
        Model {
            max_order: s.max_order,
            pb: s.pb,
            start: s.start,
            end,
            present: vec![false; s.span() as usize],
            used: vec![false; s.span() as usize],
            live: BTreeMap::new(),
            highatomic: vec![false; nblocks as usize],
            kern: Kernel::new(s.max_order, s.pb, s.start, end, s.placement),
        }
    }

    fn in_span(&self, pfn: u64) -> bool {
        (self.start..self.end).contains(&pfn)
    }

    fn is_free(&self, pfn: u64) -> bool {
        self.in_span(pfn) && {
            let i = (pfn - self.start) as usize;
            self.present[i] && !self.used[i]
        }
    }

    fn ha(&self, pfn: u64) -> bool {
        self.highatomic[((pfn >> self.pb) - (self.start >> self.pb)) as usize]
    }

    /// True when `[p, p + 2^o)` is one free block (not emitted); otherwise
    /// its free sub-blocks are pushed to `out`.
    fn canon(&self, p: u64, o: u8, out: &mut Vec<(u64, u8)>) -> bool {
        if o == 0 {
            return self.is_free(p);
        }
        let h = 1u64 << (o - 1);
        let l = self.canon(p, o - 1, out);
        let r = self.canon(p + h, o - 1, out);
        // Both halves free implies both inside the span, so ha() is defined.
        if l && r && (o - 1 < self.pb || self.ha(p) == self.ha(p + h)) {
            return true;
        }
        if l {
            out.push((p, o - 1));
        }
        if r {
            out.push((p + h, o - 1));
        }
        false
    }

    fn canonical(&self) -> BTreeSet<(u64, u8)> {
        let mut out = Vec::new();
        let size = 1u64 << self.max_order;
        let mut base = self.start & !(size - 1);
        while base < self.end {
            if self.canon(base, self.max_order, &mut out) {
                out.push((base, self.max_order));
            }
            base += size;
        }
        out.into_iter().collect()
    }

    fn mark(&mut self, pfn: u64, order: u8, used: bool) {
        let i = (pfn - self.start) as usize;
        for u in &mut self.used[i..i + (1usize << order)] {
            *u = used;
        }
    }
}

fn mt_of(i: usize) -> MigrateType {
    MigrateType::from_index(i).unwrap()
}

/// After every step: the allocator's free blocks are the canonical ones,
/// their types agree with the HighAtomic flags, counters agree, check() ok.
fn compare(b: &BuddyAllocator, m: &Model) -> Result<(), TestCaseError> {
    b.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let got: BTreeSet<(u64, u8)> = b.free_blocks().map(|f| (f.pfn, f.order)).collect();
    prop_assert_eq!(&got, &m.canonical());
    if let Some(d) = m.kern.differs(b) {
        return Err(TestCaseError::fail(d));
    }
    // Each list's length, as `/proc/pagetypeinfo` reads it (0 past max_order).
    for order in 0..=m.kern.max_order + 1 {
        for mt in (0..).map_while(MigrateType::from_index) {
            let want = m.kern.lists.get(&(order, mt)).map_or(0, |l| l.len() as u64);
            prop_assert_eq!(b.free_count(order, mt), want, "free_count({}, {:?})", order, mt);
        }
    }
    for f in b.free_blocks() {
        prop_assert_eq!(f.mt == MigrateType::HighAtomic, m.ha(f.pfn));
    }
    let free = (0..m.present.len())
        .filter(|&i| m.present[i] && !m.used[i])
        .count() as u64;
    prop_assert_eq!(b.free_pages(), free);
    compare_metrics(b, m, &got)?;
    for p in (m.start..m.end).step_by(1 << m.pb) {
        prop_assert_eq!(
            b.pageblock_migratetype(p) == Some(MigrateType::HighAtomic),
            m.ha(p)
        );
    }
    Ok(())
}

/// The fragmentation indexes and the `/proc` texts, from the model's own
/// free blocks, by pages rather than by the per-order sums `mm/vmstat.c`
/// keeps: an order-`k` request can use exactly the pages of free blocks of
/// order `k` or more.
fn compare_metrics(
    b: &BuddyAllocator,
    m: &Model,
    free_blocks: &BTreeSet<(u64, u8)>,
) -> Result<(), TestCaseError> {
    let orders = usize::from(m.kern.max_order) + 1;
    let mut per_order = vec![0u64; orders];
    for &(_, o) in free_blocks {
        per_order[usize::from(o)] += 1;
    }
    let free: u64 = free_blocks.iter().map(|&(_, o)| 1u64 << o).sum();
    let blocks = free_blocks.len() as u64;
    let zone = ZoneId::new(3, "Normal");
    let mut unusable_line = String::from("Node 3, zone   Normal ");
    let mut extfrag_line = unusable_line.clone();
    // One order past the counts: the kernel's -1 "beyond the orders" rule.
    for k in 0..=orders as u8 {
        let usable: u64 = free_blocks
            .iter()
            .filter(|&&(_, o)| o >= k)
            .map(|&(_, o)| 1u64 << o)
            .sum();
        let unusable = free - usable;
        // Nothing free: all of it "unusable" (1000), 0 percent.
        let ui = (unusable * 1000).checked_div(free).unwrap_or(1000);
        let pct = (unusable * 100).checked_div(free).unwrap_or(0);
        prop_assert_eq!(u64::from(b.unusable_free_index(k)), ui, "unusable_free_index({})", k);
        prop_assert_eq!(u64::from(b.extfrag_for_order(k)), pct, "extfrag_for_order({})", k);
        let fi: i64 = if usize::from(k) >= orders || blocks == 0 {
            0
        } else if usable > 0 {
            -1000
        } else {
            1000 - ((1000 + free * 1000 / (1u64 << k)) / blocks) as i64
        };
        prop_assert_eq!(i64::from(b.fragmentation_index(k)), fi, "fragmentation_index({})", k);
        // compaction_suitable: the kernel's order of tests, at the default
        // threshold and at both sides of this index.
        for thr in [EXTFRAG_THRESHOLD, fi as i32, fi as i32 - 1] {
            let want = if usize::from(k) >= orders {
                CompactSuitable::Skipped
            } else if fi == -1000 {
                CompactSuitable::Success
            } else if free < 2u64 << k {
                CompactSuitable::Skipped
            } else if k > 3 && fi >= 0 && fi <= i64::from(thr) {
                CompactSuitable::NotSuitable
            } else {
                CompactSuitable::Continue
            };
            prop_assert_eq!(b.compaction_suitable(k, thr), want, "compaction_suitable({}, {})", k, thr);
        }
        if usize::from(k) < orders {
            unusable_line.push_str(&format!("{}.{:03} ", ui / 1000, ui % 1000));
            extfrag_line.push_str(&format!("{:2}.{:03} ", fi / 1000, fi % 1000));
        }
    }
    prop_assert_eq!(b.unusable_index_line(zone), unusable_line + "\n");
    prop_assert_eq!(b.extfrag_index_line(zone), extfrag_line + "\n");
    // /proc/buddyinfo, read back.
    let line = b.buddyinfo(zone);
    let rest = line.strip_prefix("Node 3, zone   Normal ");
    prop_assert!(rest.is_some() && line.ends_with(" \n"), "buddyinfo {:?}", line);
    let read: Vec<u64> = rest.unwrap().split_whitespace().map(|w| w.parse().unwrap()).collect();
    prop_assert_eq!(&read, &per_order, "buddyinfo {:?}", line);
    // /proc/pagetypeinfo, read back: one line per type, then the blocks.
    let mut want_blocks = [0u64; 4];
    for t in &m.kern.blocks {
        want_blocks[t.index()] += 1;
    }
    let text = b.pagetypeinfo(zone);
    let mut types_seen = 0;
    for l in text.lines() {
        let Some((head, counts)) = l.split_once(", type ") else {
            continue;
        };
        prop_assert_eq!(head, "Node    3, zone   Normal");
        let mut words = counts.split_whitespace();
        let name = words.next().unwrap_or("");
        let mt = (0..)
            .map_while(MigrateType::from_index)
            .find(|t| format!("{t:?}") == name);
        prop_assert!(mt.is_some(), "type {:?} in {:?}", name, l);
        let mt = mt.unwrap();
        let got: Vec<u64> = words.map(|w| w.parse().unwrap()).collect();
        let want: Vec<u64> = (0..orders as u8)
            .map(|o| m.kern.lists.get(&(o, mt)).map_or(0, |q| q.len() as u64))
            .collect();
        prop_assert_eq!(got, want, "pagetypeinfo {:?}", l);
        types_seen += 1;
    }
    prop_assert_eq!(types_seen, 4, "{}", text);
    let last = text.lines().last().unwrap_or("");
    let got: Vec<u64> = last
        .strip_prefix("Node 3, zone   Normal ")
        .unwrap_or("x")
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(u64::MAX))
        .collect();
    prop_assert_eq!(&got[..], &want_blocks[..], "pagetypeinfo blocks {:?}", last);
    let header = format!("Page block order: {}\nPages per block:  {}\n", m.pb, 1u64 << m.pb);
    prop_assert!(text.starts_with(&header), "{}", text);
    let c = b.pagetype_counts();
    prop_assert_eq!(c.blocks, want_blocks);
    Ok(())
}

fn step(b: &mut BuddyAllocator, m: &mut Model, s: &Setup, op: &Op) -> Result<(), TestCaseError> {
    match *op {
        Op::Alloc { order, mt } => do_alloc(b, m, order, mt_of(mt))?,
        Op::Free { pick } => {
            if !m.live.is_empty() {
                let (&pfn, &order) = m.live.iter().nth(pick % m.live.len()).unwrap();
                prop_assert_eq!(b.free(pfn, order), Ok(()));
                prop_assert_eq!(m.kern.free(pfn, order), Ok(()));
                m.live.remove(&pfn);
                m.mark(pfn, order, false);
            }
        }
        Op::FreeRaw { off, order } => {
            let pfn = (m.start + off).saturating_sub(8);
            let want = if order > m.max_order || !m.in_span(pfn) {
                Err(FreeError::Invalid)
            } else if m.live.get(&pfn) == Some(&order) {
                Ok(())
            } else {
                Err(FreeError::NotAllocated)
            };
            prop_assert_eq!(b.free(pfn, order), want);
            prop_assert_eq!(m.kern.free(pfn, order), want);
            if want.is_ok() {
                m.live.remove(&pfn);
                m.mark(pfn, order, false);
            }
        }
        Op::SetType { off, mt } => {
            let pfn = (m.start + off).saturating_sub(8);
            let want = if m.in_span(pfn) {
                Ok(())
            } else {
                Err(AllocError::Invalid)
            };
            prop_assert_eq!(b.set_pageblock_migratetype(pfn, mt_of(mt)), want);
            prop_assert_eq!(m.kern.set_type(pfn, mt_of(mt)), want);
            if want.is_ok() {
                let bi = ((pfn >> m.pb) - (m.start >> m.pb)) as usize;
                m.highatomic[bi] = mt_of(mt) == MigrateType::HighAtomic;
            }
        }
        Op::AddSeg { seg } => {
            let Some(&(lo, hi, _)) = s.segs.get(seg) else {
                return Ok(());
            };
            let i = (lo - m.start) as usize;
            let fresh = !m.present[i..(hi - m.start) as usize].iter().any(|&p| p);
            let want = if fresh {
                Ok(())
            } else {
                Err(FreeError::Invalid)
            };
            prop_assert_eq!(b.add_free_range(lo, hi - lo), want);
            prop_assert_eq!(m.kern.add_free_range(lo, hi - lo), want);
            if fresh {
                for p in &mut m.present[i..(hi - m.start) as usize] {
                    *p = true;
                }
            }
        }
    }
    Ok(())
}

fn do_alloc(
    b: &mut BuddyAllocator,
    m: &mut Model,
    order: u8,
    mt: MigrateType,
) -> Result<(), TestCaseError> {
    let got = b.alloc(order, mt);
    // The kernel's block, exactly (the checks below hold for any choice).
    prop_assert_eq!(got, m.kern.alloc(order, mt), "alloc({}, {:?})", order, mt);
    if order > m.max_order {
        prop_assert_eq!(got, Err(AllocError::Invalid));
        return Ok(());
    }
    // Success iff a usable free block of this order or above exists:
    // HighAtomic requests use HighAtomic blocks only, the others any other.
    let want_ha = mt == MigrateType::HighAtomic;
    let possible = m
        .canonical()
        .iter()
        .any(|&(p, o)| o >= order && m.ha(p) == want_ha);
    match got {
        Ok(pfn) => {
            prop_assert!(possible);
            prop_assert_eq!(pfn % (1u64 << order), 0);
            for q in pfn..pfn + (1u64 << order) {
                prop_assert!(m.is_free(q), "pfn {:#x} handed out but not free", q);
            }
            m.live.insert(pfn, order);
            m.mark(pfn, order, true);
            prop_assert_eq!(b.allocated_order(pfn), Some(order));
        }
        Err(e) => {
            prop_assert_eq!(e, AllocError::NoSpace);
            prop_assert!(
                !possible,
                "NoSpace although a block of order >= {} exists",
                order
            );
        }
    }
    Ok(())
}

fn build(s: &Setup) -> (BuddyAllocator, Model) {
    let cfg = BuddyConfig {
        max_order: s.max_order,
        pageblock_order: s.pb,
        placement: s.placement,
    };
    let mut b = BuddyAllocator::new(s.start, s.span(), cfg).unwrap();
    assert_eq!(b.config(), cfg);
    assert_eq!((b.start_pfn(), b.end_pfn()), (s.start, s.start + s.span()));
    let mut m = Model::new(s);
    for &(lo, hi, present) in &s.segs {
        if present {
            b.add_free_range(lo, hi - lo).unwrap();
            m.kern.add_free_range(lo, hi - lo).unwrap();
            for p in &mut m.present[(lo - s.start) as usize..(hi - s.start) as usize] {
                *p = true;
            }
        }
    }
    (b, m)
}

include!("buddy_kernel.rs");
