use super::parse::*;
use super::*;

#[test]
fn the_build_scripts_last_lines_name_the_image() {
    let out = "noise\nKERNEL /c/out/bzImage\nINITRD /c/out/initramfs.cpio.gz\n";
    assert_eq!(
        image_of(out),
        Some(Image {
            kernel: "/c/out/bzImage".into(),
            initrd: "/c/out/initramfs.cpio.gz".into(),
        })
    );
    assert_eq!(image_of("KERNEL /c/out/bzImage\n"), None);
}

#[test]
fn sizes_follow_mmkit_kernels_scale_words() {
    let s = Sizes::of(
        "SCALE cpus=2 seed_iters=200 seed_old_iters=20 loops=7 busy=100 full_fit=64 stress_loops=4 stress_busy=16 stress_full_fit=8",
    );
    assert_eq!(
        (s.seed_iters, s.loops, s.busy, s.full_fit),
        (200, 7, 100, 64)
    );
    // Stress sizes are per worker at 2 CPUs, scaled by (2 / CPUs)^2 above.
    assert_eq!(s.stress(1), (4, 16, 8));
    assert_eq!(s.stress(2), (4, 16, 8));
    assert_eq!(s.stress(4), (1, 4, 2));
    assert_eq!(s.stress(8), (1, 1, 1));
    let huge = Sizes::of("stress_loops=18446744073709551615 busy=x");
    assert_eq!(huge.stress(2).0, u64::MAX / 4);
    assert_eq!(huge.busy, 1000);
    let cmd = s.linux_append(4);
    assert!(cmd.contains("mmkit.step=perf:test_vmalloc:run_test_mask=127,nr_threads=1,"));
    assert!(cmd.contains("test_loop_count=7,busy_count=100,full_fit_pairs=64,test_repeat_count=3"));
    assert!(cmd.contains(
        "mmkit.step=stress:test_vmalloc:run_test_mask=127,nr_threads=4,test_loop_count=1,busy_count=4,full_fit_pairs=2"
    ));
    assert!(cmd.contains("mmkit.step=vm_map_ram:vm_map_ram_loop:iterations=200,nr_pages=4"));
    // The kernel's command line holds 2048 bytes.
    assert!(
        Sizes::of(
            "SCALE seed_iters=1000000000 loops=1000000000 busy=1000000000 full_fit=1000000000"
        )
        .linux_append(64)
        .len()
            < 2048
    );
}

fn step(name: &str, tlb: u64, log: &[&str]) -> Vec<String> {
    let mut v = vec![format!("MMKIT STEP {name} begin module=x")];
    v.push("MMKIT load /lib/modules/x.ko ns=1234".into());
    v.extend(log.iter().map(|l| format!("MMKIT LOG [    2.000000] {l}")));
    v.push(format!("MMKIT STEP {name} end rc=0 tlb={tlb} cal=3"));
    v
}

fn summaries(repeat: u32, us: u64) -> Vec<String> {
    TESTS
        .iter()
        .map(|&t| {
            // Linux's align_shift test fails every run by design.
            let (p, f) = if t == "align_shift_alloc_test" {
                (0, repeat)
            } else {
                (repeat, 0)
            };
            format!(
                "Summary: {t} passed: {p} failed: {f} repeat: {repeat} loops: 100 avg: {us} usec"
            )
        })
        .collect()
}

/// A real boot at 2 vCPUs, the quick scale (`mmkit experiments linux
/// --quick`'s command line), as QEMU's serial port gave it.
const SMP2_QUICK: &str = include_str!("fixtures/smp2-quick.log");

#[test]
fn a_captured_boot_gives_its_figures() {
    let lines: Vec<&str> = SMP2_QUICK.lines().collect();
    let run = LinuxRun::parse(&lines);
    assert!(run.done);
    // The refined calibration comes later in the log, and wins.
    assert_eq!(run.tsc_mhz, Some(2445.375));
    let names: Vec<&str> = run.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["warm", "perf", "stress", "vm_map_ram", "load"]);
    let perf = run.step("perf").expect("perf");
    assert_eq!(perf.load_ns, Some(76_015_962));
    assert_eq!((perf.tlb, perf.cal), (0, 30));
    // The refused load: its exit status is 1.
    assert_eq!(
        run.step("load").map(|s| (s.rc, s.flush_ipis())),
        Some((1, 18))
    );
    // The warning's stack dump and memory report are in the log, not in
    // the summaries.
    assert_eq!(run.steps[0].summaries().len(), 7);
    assert_eq!(run.step("stress").map(|s| s.summaries().len()), Some(14));
    let m = linux_measured(&run, 2).expect("figures");
    let us = [323.0, 1604.0, 3495.0, 1711.0, 525.0, 1150.0, 1715.0];
    assert_eq!(m.perf_tests, us.map(|u| u * 3.0 / 1e3).to_vec());
    assert_eq!(m.stress_ms, 39_464_771.0 / 2445.375 / 1e3);
    // 1 + 29 IPIs less the load's 18; 22 less 18 over 440 unmaps.
    assert_eq!(m.stress_ipis, 12.0);
    assert_eq!(m.map_ram_ns, 2016.0);
    assert_eq!(m.map_ram_ipis_per_1e6, 4.0 * 1e6 / 440.0);
    let map = run
        .step("vm_map_ram")
        .and_then(Step::map_ram)
        .expect("the loop's line");
    assert_eq!((map.cpus, map.pages, map.iters, map.failed), (2, 4, 200, 0));
    // The same boot is no 1-vCPU boot.
    assert!(linux_measured(&run, 1).is_err());
}

fn linux_lines(
    cpus: usize,
    perf_us: u64,
    stress_cycles: u64,
    map_ns: u64,
    map_tlb: u64,
) -> Vec<String> {
    let mut v = vec![
        "MMKIT BOOT cpus=2".to_string(),
        "MMKIT LOG [    0.000000] tsc: Detected 2000.000 MHz processor".into(),
        "MMKIT LOG [    0.300000] tsc: Refined TSC clocksource calibration: 1000.000 MHz".into(),
    ];
    let s1 = summaries(1, 1);
    v.extend(step(
        "warm",
        0,
        &s1.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let mut perf = summaries(3, perf_us);
    perf.push("All test took worker0=123 cycles".into());
    v.extend(step(
        "perf",
        5,
        &perf.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let mut stress = Vec::new();
    for w in 0..cpus {
        stress.extend(summaries(1, 10));
        stress.push(format!(
            "All test took worker{w}={} cycles",
            stress_cycles * (w as u64 + 1)
        ));
    }
    v.extend(step(
        "stress",
        40,
        &stress.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let vmr =
        format!("vm_map_ram_loop: cpus={cpus} pages=4 iters=2000 ns_per_op={map_ns} failed=0");
    v.extend(step("vm_map_ram", map_tlb, &[vmr.as_str()]));
    // A module load alone: 1 + 3 IPIs, taken off each step's.
    v.extend(step("load", 1, &[]));
    v.push("MMKIT DONE\r".into());
    v
}

#[test]
fn a_linux_boot_gives_its_figures() {
    let run = LinuxRun::parse(&linux_lines(2, 1000, 3_000_000, 700, 44));
    assert!(run.done);
    // The refined calibration wins over the first estimate.
    assert_eq!(run.tsc_mhz, Some(1000.0));
    assert_eq!(run.steps.len(), 5);
    assert_eq!(run.step("perf").map(|s| s.load_ns), Some(Some(1234)));
    let m = linux_measured(&run, 2).expect("figures");
    // avg 1000 us times 3 runs, each of the seven tests.
    assert_eq!(m.perf_tests, vec![3.0; 7]);
    assert_eq!(m.perf_total_ms, 21.0);
    // The slowest worker: 6 * 10^6 cycles at 1000 MHz.
    assert_eq!(m.stress_ms, 6.0);
    // Shootdowns and function calls (kernel-range flushes) together.
    assert_eq!(run.step("stress").map(|s| (s.tlb, s.cal)), Some((40, 3)));
    // Less a module load's 4.
    assert_eq!(m.stress_ipis, 39.0);
    assert_eq!(m.map_ram_ns, 700.0);
    // 43 IPIs over (2000 + 200) * 2 unmaps.
    assert_eq!(m.map_ram_ipis_per_1e6, 43.0 * 1e6 / 4400.0);
}

#[test]
fn a_linux_boot_with_a_fault_gives_no_figures() {
    let good = linux_lines(2, 1000, 3_000_000, 700, 44);
    let cut = |drop: &str| -> Vec<String> {
        good.iter().filter(|l| !l.contains(drop)).cloned().collect()
    };
    let fails =
        |lines: Vec<String>, cpus: usize| linux_measured(&LinuxRun::parse(&lines), cpus).is_err();
    assert!(!fails(good.clone(), 2));
    // A worker missing, a different CPU count, no TSC, a step cut short.
    assert!(fails(cut("worker1="), 2));
    assert!(fails(good.clone(), 4));
    assert!(fails(cut("tsc:"), 2));
    assert!(fails(cut("STEP vm_map_ram end"), 2));
    // A failed run of one test.
    let failed: Vec<String> = good
        .iter()
        .map(|l| l.replacen("passed: 3 failed: 0", "passed: 2 failed: 1", 1))
        .collect();
    assert!(fails(failed, 2));
    let nonzero: Vec<String> = good
        .iter()
        .map(|l| l.replace("end rc=0", "end rc=1"))
        .collect();
    assert!(fails(nonzero, 2));
    let map_failed: Vec<String> = good
        .iter()
        .map(|l| l.replace("failed=0", "failed=3"))
        .collect();
    assert!(fails(map_failed, 2));
}

fn measured(perf: f64, stress: f64, ipis: f64, map: f64, map_ipis: f64) -> Measured {
    Measured {
        perf_tests: vec![perf; 7],
        perf_total_ms: perf * 7.0,
        stress_ms: stress,
        stress_ipis: ipis,
        map_ram_ns: map,
        map_ram_ipis_per_1e6: map_ipis,
    }
}

#[test]
fn targets_compare_medians_of_the_boots() {
    let a = AtCpus {
        vcpus: 2,
        old: vec![measured(9.0, 9.0, 9.0, 9.0, 9.0)],
        lazy: vec![measured(9.0, 9.0, 9.0, 9.0, 9.0)],
        // Medians: perf 1, stress 10, IPIs 100, map 100 ns, 50 IPIs/10^6.
        new: vec![
            measured(1.0, 10.0, 100.0, 100.0, 50.0),
            measured(0.5, 30.0, 90.0, 90.0, 40.0),
            measured(3.0, 5.0, 200.0, 300.0, 60.0),
        ],
        // Medians: perf 0.5, stress 5, map 50 ns.
        nodes: vec![
            measured(0.5, 5.0, 100.0, 50.0, 50.0),
            measured(0.5, 5.0, 100.0, 40.0, 50.0),
            measured(0.9, 6.0, 100.0, 60.0, 50.0),
        ],
        // Like for like: medians perf 1.3 (Linux/new-ll 1.0), stress 5.
        new_ll: vec![
            measured(1.3, 5.0, 100.0, 100.0, 50.0),
            measured(1.3, 5.0, 100.0, 100.0, 50.0),
            measured(1.3, 6.0, 100.0, 100.0, 50.0),
        ],
        // Medians: perf 1.3, stress 11, IPIs 120, map 100 ns, 40 IPIs/10^6.
        linux: vec![
            measured(1.3, 11.0, 120.0, 100.0, 40.0),
            measured(1.2, 12.0, 110.0, 100.0, 40.0),
            measured(2.0, 10.0, 130.0, 100.0, 40.0),
        ],
        ipi: Vec::new(),
        boots: Vec::new(),
    };
    let perf = [mode_row(&a, |m| m.perf_total_ms, |_| f64::NAN)];
    let stress = [mode_row(&a, |m| m.stress_ms, |m| m.stress_ipis)];
    let maps = [map_ram_row(&a)];
    let tests = test_rows(&a);
    assert_eq!(perf[0].linux_per_new, Some(1.3));
    assert_eq!(stress[0].linux_per_new, Some(1.1));
    assert_eq!(maps[0].linux_per_new, Some(1.0));
    assert_eq!(perf[0].linux_per_nodes, Some(2.6));
    assert_eq!(stress[0].linux_per_nodes, Some(2.2));
    assert_eq!(maps[0].linux_per_nodes, Some(2.0));
    assert_eq!(tests[0].linux_per_nodes, Some(2.6));
    let t = targets("TCG", &tests, &perf, &stress, &maps);
    let verdict = |what: &str| t.iter().find(|t| t.what.contains(what)).and_then(|t| t.met);
    assert_eq!(perf[0].linux_per_new_ll, Some(1.0));
    assert_eq!(stress[0].linux_per_new_ll, Some(2.2));
    // The test_vmalloc targets judge like for like; the lean ratio is shown.
    assert_eq!(verdict("performance mode: mmkit new >= 1.2x"), Some(false));
    assert_eq!(verdict("stress mode: mmkit new >= 1.2x"), Some(true));
    let lean = t
        .iter()
        .find(|t| t.what.contains("stress mode: mmkit new >= 1.2x"));
    assert!(lean.is_some_and(|t| t.measured.contains("lean 1.10x")));
    assert_eq!(verdict("stress mode: mmkit new's TLB IPIs"), Some(true));
    assert_eq!(verdict("vm_map_ram loop: mmkit new >= 1.2x"), Some(false));
    assert_eq!(verdict("IPIs per 10^6 unmaps"), Some(false));
    assert!(t.iter().all(|t| t.what.contains("TCG")));
}

/// A captured mmkit-kernel boot (4 vCPUs, `scale=quick`).
const MMKIT_SMP4_QUICK: &str = include_str!("fixtures/mmkit-smp4-quick.log");

fn mmkit_boot(text: &str, smp: usize) -> Boot {
    Boot {
        smp,
        lines: text.lines().map(str::to_string).collect(),
        passed: true,
        failure: None,
        first_line: None,
        wall: Duration::ZERO,
    }
}

#[test]
fn mmkit_kernels_nodes_and_shootdown_rows_are_read_from_a_real_boot() {
    let b = mmkit_boot(MMKIT_SMP4_QUICK, 4);
    let nodes = mmkit_measured(&b, "nodes").expect("nodes rows");
    assert_eq!(nodes.map_ram_ns, 8556.0);
    assert_eq!(nodes.stress_ms, 137.759649);
    assert_eq!(nodes.stress_ipis, 24.0);
    let new = mmkit_measured(&b, "new").expect("new rows");
    assert_eq!(new.map_ram_ns, 6386.0);
    let ipi = ipi_measured(&b);
    assert_eq!(ipi[0], 20947.0); // round trip to one idle target
    assert_eq!(ipi[5], 3918306.0); // round trip to every busy target
    assert_eq!(ipi[7], 7886224.0); // a 64-page flush, busy targets
    let mut a = AtCpus {
        vcpus: 4,
        ipi: vec![ipi],
        ..AtCpus::default()
    };
    let rows = ipi_rows(&a);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].round_trip_all_ns.median, 3918306.0);
    a.vcpus = 1;
    assert!(ipi_rows(&a).is_empty());
    // A boot without its busy rows: those cases are missing, not zero.
    let idle_only: String = MMKIT_SMP4_QUICK
        .lines()
        .filter(|l| !l.contains("targets=busy"))
        .map(|l| format!("{l}\n"))
        .collect();
    let ipi = ipi_measured(&mmkit_boot(&idle_only, 4));
    assert!(ipi[..4].iter().all(|x| x.is_finite()));
    assert!(ipi[4..].iter().all(|x| x.is_nan()));
    // Without its nodes rows the boot gives no nodes figures.
    let no_nodes: String = MMKIT_SMP4_QUICK
        .lines()
        .filter(|l| !l.contains("design=nodes"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(mmkit_measured(&mmkit_boot(&no_nodes, 4), "nodes").is_none());
}

#[test]
fn the_stock_pass_gives_every_worker_linuxs_stock_sizes() {
    // fls(cpus) x 32 MiB of pages: Linux's full-fit pairs.
    assert_eq!(stock_full_fit(1), 8192);
    assert_eq!(stock_full_fit(2), 16384);
    assert_eq!(stock_full_fit(4), 24576);
    assert_eq!(stock_full_fit(8), 32768);
    for cpus in [1, 2, 4, 8] {
        let append = stock_append("scale=quick", cpus);
        assert!(append.starts_with("scale=quick no-old "), "{append}");
        // mmkit-kernel prints these words on its SCALE line; Linux is
        // sized from it, and both scale stress mode the same way.
        let s = Sizes::of(&append);
        assert_eq!((s.busy, s.full_fit), (15_000, stock_full_fit(cpus)));
        let (_, busy, full_fit) = s.stress(cpus);
        assert_eq!((busy, full_fit), (15_000, stock_full_fit(cpus)), "{cpus}");
    }
}

#[test]
fn the_vcpu_counts_can_be_narrowed() {
    let all = [1, 2, 4, 8];
    assert_eq!(only_vcpus(&all, None), all);
    assert_eq!(only_vcpus(&all, Some("1,2")), [1, 2]);
    assert_eq!(only_vcpus(&all, Some(" 8 , x,4")), [4, 8]);
    // Nothing of the plan named (or nothing readable): the whole plan.
    assert_eq!(only_vcpus(&all, Some("3,16")), all);
    assert_eq!(only_vcpus(&all, Some("")), all);
    assert_eq!(only_vcpus(&[1, 2], Some("18446744073709551615,2")), [2]);
    // A quick plan (1 and 2) still runs the counts named outside it.
    assert_eq!(only_vcpus(&[1, 2], Some("4")), [4]);
    assert_eq!(only_vcpus(&[1, 2], Some("8,2")), [2, 8]);
}
