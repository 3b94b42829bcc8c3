use rand::rngs::StdRng;
use rand::SeedableRng;

use super::pcp::zone_batchsize;
use super::sim::draw;

#[test]
fn zone_batchsize_is_the_kernels() {
    assert_eq!(zone_batchsize(262_144), 63); // 1 GiB
    assert_eq!(zone_batchsize(1 << 24), 63); // capped at 1 MiB / 4
    assert_eq!(zone_batchsize(16_384), 3); // 64 MiB
    assert_eq!(zone_batchsize(1024), 1);
}

#[test]
fn same_seed_gives_the_same_request_stream() {
    let mut a = StdRng::seed_from_u64(7);
    let mut b = StdRng::seed_from_u64(7);
    for _ in 0..1000 {
        let (x, y) = (draw(&mut a, 100.0), draw(&mut b, 100.0));
        assert_eq!((x.order, x.mt, x.lifetime), (y.order, y.mt, y.lifetime));
    }
}
