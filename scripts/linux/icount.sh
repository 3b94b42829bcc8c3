#!/bin/sh
# The vm_map_ram loop at 1 vCPU under QEMU's instruction counting
# (`-icount shift=0`: the guest's clock advances 1 ns per instruction), on
# mmkit-kernel and on Linux 6.12: the loops' ns per operation are then
# guest instructions per map + touch + unmap, the same on every run and
# every host, whatever the host's load.
#
#   scripts/linux/icount.sh [ITERATIONS]      (default 2000)
#
# Needs mmkit-kernel built (cargo build --release in mmkit-kernel/) and
# Linux built by scripts/linux/build.sh (MMKIT_LINUX_CACHE as there).
# Prints one line per system and design: `icount SYSTEM DESIGN insns_per_op=N`.
set -eu
iters="${1:-2000}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
elf="$root/mmkit-kernel/target/x86_64-unknown-none/release/mmkit-kernel"
[ -f "$elf" ] || { echo "icount: build mmkit-kernel first ($elf missing)" >&2; exit 1; }
images="$("$here/build.sh")"
bz="$(echo "$images" | sed -n 's/^KERNEL //p')"
initrd="$(echo "$images" | sed -n 's/^INITRD //p')"
qemu() {
  timeout 600 qemu-system-x86_64 -accel tcg -icount shift=0 -M q35 -m 512M -display none \
    -serial stdio -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 -smp 1 "$@" || true
}
qemu -kernel "$elf" -append "scale=quick seed_iters=$iters" |
  sed -n 's/^ROW seed002 design=\(new\|nodes\) .*ns_per_op=\([0-9]*\).*/icount mmkit-kernel \1 insns_per_op=\2/p'
qemu -kernel "$bz" -initrd "$initrd" -append "console=ttyS0 quiet panic=-1 no_timer_check \
  mmkit.step=vm_map_ram:vm_map_ram_loop:iterations=$iters,nr_pages=4" |
  sed -n 's/.*vm_map_ram_loop: cpus=1 .*ns_per_op=\([0-9]*\).*/icount linux vm_map_ram insns_per_op=\1/p'
