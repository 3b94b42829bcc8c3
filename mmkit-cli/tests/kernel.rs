//! Boots mmkit-kernel in QEMU with its in-kernel tests (`mmkit kernel`),
//! where QEMU and the `x86_64-unknown-none` target are installed; skips with
//! a message otherwise.

use std::process::Command;

#[test]
fn the_kernel_boots_and_passes_its_tests() {
    let out = Command::new(env!("CARGO_BIN_EXE_mmkit"))
        .args([
            "kernel",
            "--smp",
            "2",
            "--quick",
            "--tests-only",
            "--timeout",
            "300",
        ])
        .output()
        .expect("mmkit runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) {
        eprintln!("SKIPPED: the kernel was not booted: {stderr}");
        return;
    }
    assert!(
        out.status.success(),
        "mmkit kernel failed:\n{stdout}\n{stderr}"
    );
    for t in [
        "ipi_reaches_every_cpu",
        "use_after_vfree_faults",
        "stale_tlb_caught_without_flush",
        "stale_tlb_none_with_flush",
    ] {
        assert!(
            stdout.contains(&format!("TEST {t} ok")),
            "{t} missing:\n{stdout}"
        );
    }
    assert!(stdout.contains("DONE pass"), "{stdout}");
}
