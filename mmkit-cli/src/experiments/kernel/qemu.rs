//! Building mmkit-kernel and booting it under QEMU: the accelerator, the
//! serial lines, the `ROW` lines they carry, and the scale of a run.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The kernel's crate, beside this one.
pub fn kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mmkit-kernel")
}

/// How to install what the kernel needs.
pub const INSTALL: &str = "install QEMU (Debian/Ubuntu: apt-get install qemu-system-x86) and the \
     target (rustup target add x86_64-unknown-none)";

/// The accelerator QEMU runs the kernel on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Accel {
    /// Hardware virtualization.
    Kvm,
    /// QEMU's multi-threaded code translator (one host thread per vCPU).
    Tcg,
    /// The code translator counting instructions (`-icount shift=0`,
    /// asked for with `MMKIT_QEMU_ICOUNT=1`): one host thread runs every
    /// vCPU in turn and the guest's clock advances 1 ns per instruction,
    /// so a time is a count of guest instructions, the same on every run
    /// whatever the host's load (at one vCPU; with more, the vCPUs take
    /// turns and a wait for another vCPU counts the waiter's spins).
    Icount,
}

impl Accel {
    /// Instruction counting when `MMKIT_QEMU_ICOUNT=1`; otherwise KVM
    /// where /dev/kvm exists and the CPU has `vmx` or `svm`, and TCG
    /// elsewhere (a KVM without them runs ring 0 about 1000x slower).
    pub fn here() -> Self {
        if std::env::var_os("MMKIT_QEMU_ICOUNT").is_some_and(|v| v == "1") {
            return Accel::Icount;
        }
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hw = flags
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        if hw && Path::new("/dev/kvm").exists() {
            Accel::Kvm
        } else {
            Accel::Tcg
        }
    }

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "KVM",
            Accel::Tcg => "TCG",
            Accel::Icount => "TCG icount (ns = instructions)",
        }
    }

    pub(super) fn args(self) -> &'static [&'static str] {
        match self {
            Accel::Kvm => &["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => &["-accel", "tcg,thread=multi"],
            Accel::Icount => &["-accel", "tcg", "-icount", "shift=0"],
        }
    }
}

/// QEMU's version line, or what to install.
///
/// # Errors
/// QEMU is missing or does not run.
pub fn qemu_version() -> Result<String, NotBooted> {
    let out = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .map_err(|e| {
            NotBooted::Missing(format!("qemu-system-x86_64 not found ({e}): {INSTALL}"))
        })?;
    let v = String::from_utf8_lossy(&out.stdout);
    Ok(v.lines().next().unwrap_or("qemu-system-x86_64").to_string())
}

/// Why the kernel could not be booted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotBooted {
    /// QEMU or the `x86_64-unknown-none` target is not installed: nothing
    /// about the kernel is known (a skip).
    Missing(String),
    /// The kernel did not build, or QEMU did not start or stop as it should:
    /// a failure.
    Failed(String),
}

impl NotBooted {
    /// What went wrong, in words.
    pub fn message(&self) -> &str {
        match self {
            NotBooted::Missing(m) | NotBooted::Failed(m) => m,
        }
    }
}

/// Whether the standard library of `x86_64-unknown-none` is installed for
/// the toolchain that builds the kernel (the one its directory selects).
fn target_installed(dir: &Path) -> Result<(), NotBooted> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .args([
            "--print",
            "target-libdir",
            "--target",
            "x86_64-unknown-none",
        ])
        .current_dir(dir)
        .output()
        .map_err(|e| NotBooted::Missing(format!("rustc not found ({e}): {INSTALL}")))?;
    let libdir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let has_core = std::fs::read_dir(&libdir).is_ok_and(|d| {
        d.filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("libcore-"))
    });
    if out.status.success() && has_core {
        Ok(())
    } else {
        Err(NotBooted::Missing(format!(
            "the target x86_64-unknown-none is not installed: {INSTALL}"
        )))
    }
}

/// Builds the kernel (`cargo build --release` in its crate, for
/// `x86_64-unknown-none`) and returns the ELF's path.
///
/// # Errors
/// [`NotBooted::Missing`] when the target is not installed;
/// [`NotBooted::Failed`] when the build fails (its last lines).
pub fn build() -> Result<PathBuf, NotBooted> {
    let dir = kernel_dir();
    target_installed(&dir)?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target_dir)
        .output()
        .map_err(|e| NotBooted::Failed(format!("running cargo: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        return Err(NotBooted::Failed(format!(
            "building mmkit-kernel failed: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    Ok(target_dir.join("x86_64-unknown-none/release/mmkit-kernel"))
}

/// One boot's serial output and outcome.
#[derive(Debug, Clone)]
pub struct Boot {
    /// vCPUs.
    pub smp: usize,
    /// Every line printed on the serial port.
    pub lines: Vec<String>,
    /// The kernel reported a pass through `isa-debug-exit` (status 33).
    pub passed: bool,
    /// Why it did not pass, if it did not.
    pub failure: Option<String>,
    /// From starting QEMU to the first serial line.
    pub first_line: Option<Duration>,
    /// The whole run.
    pub wall: Duration,
}

impl Boot {
    /// The `ROW` lines of experiment `name`, as key-value maps.
    pub fn rows(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        self.lines
            .iter()
            .filter_map(|l| parse_row(l, name))
            .collect()
    }

    pub(super) fn find(
        &self,
        name: &str,
        want: &[(&str, &str)],
    ) -> Option<BTreeMap<String, String>> {
        self.rows(name).into_iter().find(|r| {
            want.iter()
                .all(|(k, v)| r.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

/// Parses `ROW <name> k=v k=v ...`.
pub fn parse_row(line: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let rest = line
        .strip_prefix("ROW ")?
        .strip_prefix(name)?
        .strip_prefix(' ')?;
    Some(
        rest.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

pub(super) fn num(r: &BTreeMap<String, String>, k: &str) -> f64 {
    r.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// Boots `elf` at `smp` vCPUs with the command line `append`, echoing the
/// serial lines to `echo` when given; QEMU is killed after `timeout`.
///
/// # Errors
/// QEMU could not be started.
pub fn boot(
    elf: &Path,
    smp: usize,
    append: &str,
    timeout: Duration,
    accel: Accel,
    echo: Option<&mut dyn Write>,
) -> Result<Boot, String> {
    let guest = Guest {
        kernel: elf,
        initrd: None,
        mem_mib: MEM_MIB,
    };
    boot_image(&guest, smp, append, timeout, accel, echo)
}

/// The guest memory of every boot but the Linux comparison's stock-size
/// pass, MiB.
pub const MEM_MIB: u64 = 512;

/// What a boot loads and how much memory the machine has.
#[derive(Debug, Clone, Copy)]
pub struct Guest<'a> {
    /// The kernel: an ELF (PVH) or a bzImage.
    pub kernel: &'a Path,
    /// The initial RAM disk, if any.
    pub initrd: Option<&'a Path>,
    /// Guest memory, MiB (`-m`).
    pub mem_mib: u64,
}

/// [`boot`] for any kernel QEMU can load (an ELF or a bzImage), with an
/// initial RAM disk when given: the same machine, so Linux runs beside
/// mmkit-kernel on exactly its command line.
///
/// # Errors
/// QEMU could not be started.
pub fn boot_image(
    guest: &Guest<'_>,
    smp: usize,
    append: &str,
    timeout: Duration,
    accel: Accel,
    mut echo: Option<&mut dyn Write>,
) -> Result<Boot, String> {
    let t0 = Instant::now();
    let initrd_args = guest.initrd.map(|p| ["-initrd".as_ref(), p.as_os_str()]);
    let mem = format!("{}M", guest.mem_mib);
    let mut child = Command::new("qemu-system-x86_64")
        .args(accel.args())
        .args([
            "-M",
            "q35",
            "-m",
            &mem,
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .arg("-smp")
        .arg(smp.to_string())
        .arg("-kernel")
        .arg(guest.kernel)
        .args(initrd_args.iter().flatten())
        .arg("-append")
        .arg(append)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting qemu-system-x86_64: {e} ({INSTALL})"))?;
    let stdout = child.stdout.take().ok_or("no stdout from QEMU")?;
    let mut stderr = child.stderr.take().ok_or("no stderr from QEMU")?;
    // Drained on its own thread, so a chatty QEMU never blocks on a full pipe.
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        // What could be read is kept; QEMU's stderr only explains a failure.
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let mut first_line = None;
    let mut timed_out = false;
    loop {
        let left = timeout.saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                first_line.get_or_insert_with(|| t0.elapsed());
                if let Some(w) = echo.as_deref_mut() {
                    // Echo is best effort: a closed terminal does not stop the boot.
                    let _ = writeln!(w, "{line}");
                }
                lines.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                // Already exited, or killed now: either way it ends.
                let _ = child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for QEMU: {e}"))?;
    // The readers end with QEMU's pipes.
    let _ = reader.join();
    let errors = errors.join().unwrap_or_default();
    let code = status.code();
    let passed = !timed_out && code == Some(33);
    let failure = (!passed).then(|| {
        if timed_out {
            format!("timed out after {} s", timeout.as_secs())
        } else {
            let last = lines
                .iter()
                .rev()
                .find(|l| l.starts_with("DONE") || l.contains("PANIC") || l.contains("FAULT"));
            format!(
                "QEMU exit status {code:?}: {} {}",
                last.map_or("no verdict printed", String::as_str),
                errors.lines().next().unwrap_or("")
            )
        }
    });
    Ok(Boot {
        smp,
        lines,
        passed,
        failure,
        first_line,
        wall: t0.elapsed(),
    })
}

/// The kernel command line of the kernel's scale `name` (`quick`,
/// `default` or `full`: the kernel owns their sizes and prints them on its
/// `SCALE` line), with `test_vmalloc`'s loop count set when given.
pub fn scale(name: &str, loops: Option<u64>) -> String {
    let mut s = format!("scale={name}");
    if let Some(l) = loops {
        s.push_str(&format!(" loops={l}"));
    }
    s
}
