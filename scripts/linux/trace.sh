#!/usr/bin/env bash
# Captures Linux's vmalloc trace events (alloc_vmap_area,
# free_vmap_area_noflush, purge_vmap_area_lazy, ...) from boot through a
# test_vmalloc run (performance mode, then stress mode at one worker per
# vCPU) and the vm_map_ram loop, under QEMU with mmkit-kernel's machine.
#
#   scripts/linux/trace.sh SMP OUT.txt
#
# Builds Linux first (build.sh, cached). The trace buffer is copied out over
# the serial console at the end of the run, gzip-compressed and base64-encoded.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
smp="${1:?usage: trace.sh SMP OUT.txt}"
out="${2:?usage: trace.sh SMP OUT.txt}"

built="$("$here/build.sh" | tail -2)"
kernel="$(echo "$built" | sed -n 's/^KERNEL //p')"
initrd="$(echo "$built" | sed -n 's/^INITRD //p')"

accel=(-accel tcg,thread=multi)
if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -e /dev/kvm ]; then
  accel=(-accel kvm -cpu host)
fi
tv="test_loop_count=100,test_repeat_count=3,busy_count=1000,full_fit_pairs=256,run_test_mask=127"
append="console=ttyS0 quiet panic=-1 trace_event=vmalloc:* trace_buf_size=8M"
append="$append mmkit.step=perf:test_vmalloc:nr_threads=1,sequential_test_order=1,$tv"
append="$append mmkit.step=stress:test_vmalloc:nr_threads=$smp,$tv"
append="$append mmkit.step=vm_map_ram:vm_map_ram_loop:iterations=2000,nr_pages=4"
append="$append mmkit.trace=1"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
timeout 1200 qemu-system-x86_64 "${accel[@]}" -M q35 -m 512M -display none -serial stdio \
  -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 -smp "$smp" \
  -kernel "$kernel" -initrd "$initrd" -append "$append" </dev/null >"$log" 2>&1 || true
grep -q '^MMKIT TRACE end' "$log" || { tail -20 "$log" >&2; echo "trace.sh: no trace in the output" >&2; exit 1; }
sed -n '/^MMKIT TRACE begin/,/^MMKIT TRACE end/p' "$log" | sed '1d;$d' | tr -d '\r' \
  | base64 -d | gunzip >"$out"
tr -d '\r' <"$log" | grep -v '^MMKIT TRACE\|^[A-Za-z0-9+/=]*$' >"${out%.txt}.console.txt"
echo "trace.sh: $(grep -vc '^#' "$out") events at $smp vCPUs in $out (console log: ${out%.txt}.console.txt)"
