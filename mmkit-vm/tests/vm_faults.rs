//! Freed memory really goes away: after a purge, touching a freed area (or
//! a guard page, or a vm_map_ram mapping after vm_unmap_aliases) kills the
//! process with SIGSEGV. Each case runs in a child process: this test
//! binary re-executes itself with `MMKIT_VM_FAULT` naming the case.
#![cfg(target_os = "linux")]

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use mmkit_vm::{Vm, VmConfig};

const PAGE: u64 = 4096;
/// SIGSEGV's number on Linux.
const SIGSEGV: i32 = 11;

fn touch(addr: u64) {
    // SAFETY: none, on purpose: the child expects this write to fault.
    unsafe { (addr as *mut u8).write_volatile(1) };
}

/// Runs the fault case `case` in a child; returns the signal it died of.
fn child_signal(case: &str) -> Option<i32> {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", "fault_child", "--nocapture", "--test-threads=1"])
        .env("MMKIT_VM_FAULT", case)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("about to fault"),
        "child never reached the touch: {stdout}"
    );
    out.status.signal()
}

/// The child's side: sets up the case, says so, and touches the address
/// that must fault. Does nothing in a normal test run.
#[test]
fn fault_child() {
    let Ok(case) = std::env::var("MMKIT_VM_FAULT") else {
        return;
    };
    let vm = Vm::new(VmConfig::default()).unwrap();
    let target = match case.as_str() {
        "freed" => {
            let a = vm.vmalloc(3 * PAGE).unwrap();
            touch(a);
            vm.vfree(a).unwrap();
            assert!(vm.purge());
            a + PAGE
        }
        "guard" => {
            let a = vm.vmalloc(2 * PAGE).unwrap();
            touch(a + 2 * PAGE - 1);
            a + 2 * PAGE
        }
        "unmapped_ram" => {
            let pfn = vm.alloc_pages(0).unwrap();
            let a = vm.vm_map_ram(&[pfn]).unwrap();
            touch(a);
            vm.vm_unmap_ram(a, 1).unwrap();
            vm.vm_unmap_aliases();
            a
        }
        other => panic!("unknown case {other}"),
    };
    println!("about to fault");
    touch(target);
    println!("did not fault");
    std::process::exit(3);
}

#[test]
fn a_purged_area_faults() {
    assert_eq!(child_signal("freed"), Some(SIGSEGV));
}

#[test]
fn the_guard_page_faults() {
    assert_eq!(child_signal("guard"), Some(SIGSEGV));
}

#[test]
fn vm_unmap_aliases_removes_stale_mappings() {
    assert_eq!(child_signal("unmapped_ram"), Some(SIGSEGV));
}
