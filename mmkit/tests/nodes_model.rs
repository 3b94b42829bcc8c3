//! `mmkit::nodes::VmapNodes` against its brute-force model
//! (`models/nodes.rs`), one thread at a time: every answer, flush, node
//! counter and free block compared after every step, `check()` after each.
#![allow(dead_code)]

use proptest::prelude::*;

include!("models/nodes.rs");

fn nodes_op() -> impl Strategy<Value = NodesOp> {
    prop_oneof![
        6 => (any::<u8>(), any::<(u8, u8)>(), any::<u8>(), any::<bool>()).prop_map(|(cpu, size, align, best)| NodesOp::Alloc { cpu, size, align, best }),
        3 => (any::<u8>(), any::<usize>()).prop_map(|(cpu, pick)| NodesOp::Free { cpu, pick }),
        3 => (any::<u8>(), any::<usize>()).prop_map(|(cpu, pick)| NodesOp::FreeLazy { cpu, pick }),
        2 => (any::<u8>(), any::<usize>(), any::<u8>(), any::<bool>()).prop_map(|(cpu, pick, off, lazy)| NodesOp::FreeSized { cpu, pick, off, lazy }),
        1 => Just(NodesOp::Purge),
        1 => Just(NodesOp::Drain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn nodes_match_model(n in any::<u8>(), limits in any::<u8>(), ops in prop::collection::vec(nodes_op(), 1..300)) {
        run_nodes(nodes_cfg(n, limits), &ops).map_err(TestCaseError::fail)?;
    }
}

/// 3000 steps on `nodes` nodes and on an exact allocator of the same
/// space: a free of a random live area on both, or (every node drained
/// first) `ask` with the step and a random number, which compares the
/// answers itself and returns the address, if any.
fn drained_steps(
    nodes: usize,
    seed: u64,
    mut ask: impl FnMut(&StdVmapNodes, &mut mmkit::vmap::VmapAllocator, usize, u64) -> Option<u64>,
) {
    let cfg = NodesConfig {
        nodes,
        ..NodesConfig::default()
    };
    let v = StdVmapNodes::new(0, 1 << 24, cfg).unwrap();
    let mut exact = mmkit::vmap::VmapAllocator::new(0, 1 << 24).unwrap();
    let mut live = Vec::new();
    let mut x = seed;
    for i in 0..3000usize {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if live.len() > 100 || (x >> 61) < 3 && !live.is_empty() {
            let a = live.swap_remove((x >> 20) as usize % live.len());
            assert_eq!(v.free(i, a), exact.free(a));
        } else {
            v.drain();
            live.extend(ask(&v, &mut exact, i, x));
        }
    }
    v.check().unwrap();
}

#[test]
fn with_pools_empty_every_answer_is_the_lowest_fit() {
    // Drained before each allocation, the nodes answer as the exact
    // allocator does.
    drained_steps(3, 3, |v, exact, i, x| {
        let size = 4096 * (1 + (x >> 40) % 8);
        let align = 4096 << ((x >> 36) % 3);
        let a = v.alloc(i, size, align).unwrap();
        assert_eq!(exact.alloc(size, align), Ok(a));
        Some(a)
    });
}

#[test]
fn with_pools_empty_every_policy_answers_as_the_exact_allocator() {
    // Drained before each request, `allocate` answers as the exact
    // allocator's, at every policy, with and without a window.
    use mmkit::request::{Policy, Request};
    drained_steps(2, 5, |v, exact, i, x| {
        let size = 4096 * (1 + (x >> 40) % 8);
        let policy = match (x >> 30) % 4 {
            0 => Policy::Lowest,
            1 => Policy::Highest,
            _ => Policy::BestFit,
        };
        let mut req = Request::bytes(size)
            .unwrap()
            .align(4096 << ((x >> 36) % 3))
            .policy(policy);
        if (x >> 33) % 3 == 0 {
            let lo = (x >> 8) % (1 << 23);
            req = req.within(lo..lo + (1 << 22));
        }
        let got = v.allocate(i, &req);
        assert_eq!(got, exact.allocate(req), "request {i}");
        got.ok()
    });
}
