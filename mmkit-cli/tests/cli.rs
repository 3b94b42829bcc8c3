//! The `mmkit` binary's argument checks and output handling, end to end:
//! bad scales are refused with exit status 2 before anything runs, and a
//! reader that has gone (`mmkit list | head -1`) ends the run quietly.

use std::process::{Command, Output, Stdio};

fn mmkit(args: &[&str], stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("the mmkit binary runs")
}

/// Exit status 2 and a message naming `flag`, nothing on stdout.
fn refused(args: &[&str], flag: &str) {
    let out = mmkit(args, Stdio::piped());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(flag), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} ran");
}

/// `--live 0` is refused (the workload would divide by zero).
#[test]
fn bench_refuses_zero_live_areas() {
    refused(
        &["bench", "--quick", "--live", "0", "steady-page"],
        "--live",
    );
    refused(&["bench", "--quick", "--live", "1000,0"], "--live");
}

/// Scales past what a plan can hold (`--pairs 10^12`) are refused, not an
/// abort allocating the plan.
#[test]
fn bench_refuses_absurd_scales() {
    for pairs in ["1000000000000", "18446744073709551615", "0"] {
        refused(
            &["bench", "--quick", "--pairs", pairs, "steady-page"],
            "--pairs",
        );
    }
    refused(
        &["bench", "--quick", "--live", "18446744073709551615"],
        "--live",
    );
}

/// `experiments --loops 0` is refused (it would print a table of NaN).
#[test]
fn experiments_refuse_zero_loops_and_seeds() {
    refused(
        &["experiments", "--quick", "--loops", "0", "vmalloc"],
        "--loops",
    );
    refused(
        &["experiments", "--quick", "--seeds", "0", "buddy"],
        "--seeds",
    );
}

/// A pipe whose reader has already gone, as `| head -1` leaves it once
/// `head` has exited: the reader is a process that exited without reading.
fn reader_gone() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("`true` runs");
    let pipe = reader.stdin.take().unwrap();
    reader.wait().unwrap();
    Stdio::from(pipe)
}

/// Every command that prints ends quietly with status 0
/// when its reader has gone, instead of panicking with status 101.
#[test]
fn a_reader_gone_ends_every_command_quietly() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/fits.trace");
    let runs: [&[&str]; 5] = [
        &["list"],
        &["bench", "--list"],
        &[
            "bench",
            "--quick",
            "--pairs",
            "10",
            "--live",
            "10",
            "steady-page",
        ],
        &["experiments", "--quick", "vm_map_ram"],
        &["replay", trace],
    ];
    for args in runs {
        let out = mmkit(args, reader_gone());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A `--json` or `--out` path that cannot be written fails at
/// once, naming the path, before anything runs (the run is not lost).
#[test]
fn bad_output_paths_fail_before_the_run() {
    let missing = "/nonexistent-mmkit-dir/out.json";
    for args in [
        &["experiments", "vm_map_ram", "--json", missing][..],
        &["experiments", "vm_map_ram", "--out", "/proc/version/report"],
        &["bench", "--quick", "--json", missing, "steady-page"],
    ] {
        let out = mmkit(args, Stdio::piped());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let path = args[args.len() - 1 - usize::from(args[0] == "bench")];
        assert!(stderr.contains(path), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} ran");
    }
}

/// `--out DIR` writes one report (index.md, index.html, the
/// plots) and `--json` the typed rows; targets read "met" or "NOT met";
/// `--strict` passes when every target is met (vm_map_ram's block counts
/// are deterministic).
#[test]
fn out_writes_a_report_and_strict_passes_met_targets() {
    let dir = std::env::temp_dir().join(format!("mmkit-report-{}", std::process::id()));
    let json = dir.join("rows.json");
    let _ = std::fs::remove_dir_all(&dir);
    let (d, j) = (dir.to_str().unwrap(), json.to_str().unwrap());
    let args = [
        "experiments",
        "--quick",
        "--strict",
        "vm_map_ram",
        "--out",
        d,
        "--json",
        j,
    ];
    let out = mmkit(&args, Stdio::piped());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("target: scenario 2") && stdout.contains(": met"),
        "{stdout}"
    );
    assert!(stdout.lines().all(|l| l.chars().count() <= 120), "{stdout}");
    let md = std::fs::read_to_string(dir.join("index.md")).unwrap();
    assert!(
        md.contains("## vm_map_ram") && md.contains("vm_map_ram-blocks.svg"),
        "{md}"
    );
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("<table>") && html.contains("<img src=\"vm_map_ram-blocks.svg\""));
    let svg = std::fs::read_to_string(dir.join("vm_map_ram-blocks.svg")).unwrap();
    assert!(
        svg.contains("blocks released"),
        "the plot has its axis label"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = &doc["reports"][0]["tables"][6]["rows"];
    assert_eq!(rows[1]["policy"], "current", "{rows}");
    assert!(rows[1]["released"].as_u64().unwrap() > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
