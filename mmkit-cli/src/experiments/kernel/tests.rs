use super::qemu::parse_row;
use super::*;

#[test]
fn rows_parse_into_key_values() {
    let r = parse_row("ROW seed002 design=old cpus=2 ns_per_op=123", "seed002").expect("a row");
    assert_eq!(r.get("design").map(String::as_str), Some("old"));
    assert_eq!(num(&r, "ns_per_op"), 123.0);
    assert!(num(&r, "missing").is_nan());
    assert!(parse_row("ROW seed0023 design=old", "seed002").is_none());
    assert!(parse_row("TEST x ok", "seed002").is_none());
}

fn boot_of(smp: usize, lines: &[&str]) -> Boot {
    Boot {
        smp,
        lines: lines.iter().map(|l| l.to_string()).collect(),
        passed: true,
        failure: None,
        first_line: Some(Duration::from_millis(100)),
        wall: Duration::from_secs(1),
    }
}

#[test]
fn targets_follow_the_measured_rows() {
    let one = boot_of(
        1,
        &[
            "ROW seed002 design=old ns_per_op=1000 ipis_per_1e6_unmaps=0 locks_per_op_x1000=2000",
            "ROW seed002 design=new ns_per_op=100 ipis_per_1e6_unmaps=0 locks_per_op_x1000=0",
        ],
    );
    let two = boot_of(
        2,
        &[
            "ROW seed002 design=old ns_per_op=5000 ipis_per_1e6_unmaps=1000000 locks_per_op_x1000=2000",
            "ROW seed002 design=new ns_per_op=150 ipis_per_1e6_unmaps=20000 locks_per_op_x1000=5",
        ],
    );
    let seeds: Vec<SeedRow> = [&one, &two].iter().filter_map(|b| seed_row(b)).collect();
    assert_eq!(seeds.len(), 2);
    assert_eq!(seeds[1].ratio, Some(5000.0 / 150.0));
    let t = targets(
        Accel::Tcg,
        &[one, two],
        &seeds,
        &[],
        Some(Duration::from_secs(1)),
    );
    let verdict = |what: &str| t.iter().find(|t| t.what.contains(what)).and_then(|t| t.met);
    // 10^6 against 2 x 10^4 is 50x: missed.
    assert_eq!(verdict("IPIs per 10^6 unmaps"), Some(false));
    // 150 ns at 2 vCPUs against 100 at 1 is 1.5x: missed.
    assert_eq!(verdict("<= 1.2x"), Some(false));
    assert_eq!(verdict(">= 5x slower"), Some(true));
    assert!(t.iter().all(|t| t.what.contains("TCG") || t.met.is_none()));
}

#[test]
fn a_boot_row_reads_the_stale_tlb_lines() {
    let b = boot_of(
        2,
        &[
            "STALE skipped_flush=1500 of=2112 whole=1436 chunk=64",
            "STALE flushing cycles=1000512 pages=1024 cpus=2 reads=2003072 flushes=1289 stale=0 ms=20000 ns_per_cycle=19990",
        ],
    );
    let r = boot_row(&b);
    assert_eq!(
        r.stale_reads,
        "1500 of 2112 caught with a flush skipped; 0 stale of 1000512 cycles with flushing"
    );
    assert_eq!(r.verdict, "pass");
    let s = stale_row(&b).expect("a detector row");
    assert_eq!((s.cycles, s.stale, s.flushes), (1000512, 0, 1289));
    assert_eq!(s.caught, "1500 of 2112");
    assert!((s.seconds - 20.0).abs() < 1e-9);
    let t = stale_targets(Accel::Tcg, &[s], STALE_CYCLES);
    assert_eq!(t[0].met, Some(true));
    // Short of the count asked, or any stale read: missed.
    let few = boot_of(2, &["STALE flushing cycles=1024 stale=0 ms=1"]);
    let bad = boot_of(2, &["STALE flushing cycles=1000512 stale=3 ms=1"]);
    for b in [few, bad] {
        let rows = [stale_row(&b).expect("a row")];
        assert_eq!(
            stale_targets(Accel::Tcg, &rows, STALE_CYCLES)[0].met,
            Some(false)
        );
    }
}

#[test]
fn a_scale_is_named_and_loops_set_over_it() {
    assert_eq!(scale("quick", None), "scale=quick");
    assert_eq!(scale("full", Some(7)), "scale=full loops=7");
}

#[test]
fn test_vmalloc_targets_compare_new_with_both_baselines() {
    let b = boot_of(
        2,
        &[
            "ROW test_vmalloc mode=performance design=old test=total ns=40000000",
            "ROW test_vmalloc mode=performance design=old_lazy test=total ns=20000000",
            "ROW test_vmalloc mode=performance design=new test=total ns=10000000",
            "ROW test_vmalloc mode=stress design=old test=total ns=2000000000 ipis=300",
            "ROW test_vmalloc mode=stress design=old_lazy test=total ns=50000000 ipis=20",
            "ROW test_vmalloc mode=stress design=new test=total ns=10000000 ipis=10",
        ],
    );
    let m = mode_row(&b).expect("a row");
    assert_eq!(m.perf_lazy_ratio, Some(2.0));
    assert_eq!(m.stress_lazy_ipis, 20.0);
    let t = targets(Accel::Tcg, &[b], &[], &[m], None);
    let verdict = |what: &str| t.iter().find(|t| t.what.contains(what)).and_then(|t| t.met);
    // 4x and 200x against the eager busy list; 2x and 5x against the lazy one.
    assert_eq!(verdict("performance mode new vs old >= "), Some(true));
    assert_eq!(verdict("stress mode new vs old >= "), Some(true));
    assert_eq!(verdict("performance mode new vs old-lazy"), Some(false));
    assert_eq!(verdict("stress mode new vs old-lazy"), Some(false));
}

#[test]
fn nodes_and_new_ll_columns_come_from_their_rows() {
    // A real boot (4 vCPUs, scale=quick) from before the new-ll design:
    // its nodes rows fill the nodes columns, new-ll stays NaN.
    let log = include_str!("../linux/fixtures/mmkit-smp4-quick.log");
    let lines: Vec<&str> = log.lines().collect();
    let b = boot_of(4, &lines);
    let seed = seed_row(&b).expect("seed rows");
    assert_eq!(seed.nodes_ns, 8556.0);
    assert_eq!(seed.nodes_ipis_per_1e6, 0.0);
    assert_eq!(seed.nodes_ratio, ratio(seed.old_ns, 8556.0));
    let mode = mode_row(&b).expect("mode rows");
    assert_eq!(mode.perf_nodes_ms, 17066461.0 / 1e6);
    assert_eq!(mode.stress_nodes_ms, 137759649.0 / 1e6);
    assert_eq!(mode.stress_nodes_ipis, 24.0);
    assert!(mode.perf_new_ll_ms.is_nan() && mode.stress_new_ll_ipis.is_nan());
    let fix = test_rows(&b);
    let fix = fix
        .iter()
        .find(|t| t.test == "fix_size_alloc_test")
        .expect("a test row");
    assert_eq!(fix.nodes_ms, 218860.0 / 1e6);
    assert!(fix.new_ll_ms.is_nan());

    // With new-ll rows, their columns fill too.
    let mut more = lines.clone();
    more.push("ROW test_vmalloc mode=performance design=new_ll test=fix_size_alloc_test ns=500000 ipis=0 flushes=0 ok=1");
    more.push("ROW test_vmalloc mode=performance design=new_ll test=total ns=3000000");
    more.push("ROW test_vmalloc mode=stress design=new_ll test=total cpus=4 ns=7000000 ipis=12 flushes=4 failed=0");
    let b = boot_of(4, &more);
    let mode = mode_row(&b).expect("mode rows");
    assert_eq!(
        (
            mode.perf_new_ll_ms,
            mode.stress_new_ll_ms,
            mode.stress_new_ll_ipis
        ),
        (3.0, 7.0, 12.0)
    );
    let rows = test_rows(&b);
    let fix = rows
        .iter()
        .find(|t| t.test == "fix_size_alloc_test")
        .expect("a test row");
    assert_eq!(fix.new_ll_ms, 0.5);
    // And the JSON carries them.
    let json = serde_json::to_string(&mode).expect("json");
    assert!(json.contains("\"stress_new_ll_ipis\":12.0") && json.contains("\"perf_nodes_ms\""));
}

#[test]
fn icount_runs_one_thread_and_says_so_in_every_row() {
    assert_eq!(
        Accel::Icount.args(),
        ["-accel", "tcg", "-icount", "shift=0"]
    );
    // Targets and tables name the accelerator; TCG stays in the name.
    assert!(Accel::Icount.name().contains("TCG") && Accel::Icount.name().contains("icount"));
    assert!(Accel::Tcg.args().contains(&"tcg,thread=multi"));
}
