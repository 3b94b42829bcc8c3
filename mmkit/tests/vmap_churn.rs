//! The range allocator at a scale the proptests do not reach: thousands of
//! live areas, churned by the bench's patterns (random sizes, random
//! alignments up to 1024 pages, lazy frees), with `check()` (every
//! augmented value and summary recomputed) at intervals. The tree's
//! path-based updates stop early where nothing changes; a wrong stop leaves
//! a stale value that only shows once the tree is deep.

use mmkit::vmap::VmapAllocator;

const PAGE: u64 = 4096;

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `live` areas from `request`, then `ops` free+alloc pairs on random
/// slots (every fifth free lazy), checking every `every` pairs.
fn churn(live: usize, ops: usize, every: usize, request: impl Fn(&mut Rng) -> (u64, u64)) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut va = VmapAllocator::new(0, 1 << 40).unwrap();
    let mut at: Vec<u64> = (0..live)
        .map(|_| {
            let (size, align) = request(&mut rng);
            va.alloc(size, align).unwrap()
        })
        .collect();
    for i in 0..ops {
        let slot = rng.below(live as u64) as usize;
        if i % 5 == 0 {
            va.free_lazy(at[slot]).unwrap();
        } else {
            va.free(at[slot]).unwrap();
        }
        let (size, align) = request(&mut rng);
        at[slot] = va.alloc(size, align).unwrap();
        if i % every == 0 {
            va.check().unwrap();
        }
    }
    va.check().unwrap();
}

#[test]
fn random_alignment_churn_keeps_every_invariant() {
    churn(4000, 20_000, 500, |r| {
        ((1 + r.below(10)) * PAGE, PAGE << r.below(11))
    });
}

#[test]
fn random_size_churn_keeps_every_invariant() {
    churn(4000, 20_000, 500, |r| ((1 + r.below(100)) * PAGE, PAGE));
}
