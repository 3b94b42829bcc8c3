#!/usr/bin/env bash
# Captures Linux's vmalloc trace events (alloc_vmap_area,
# free_vmap_area_noflush, purge_vmap_area_lazy, ...) from boot through a
# test_vmalloc run (performance mode, then stress mode at one worker per
# vCPU) and the vm_map_ram loop, under QEMU with mmkit-kernel's machine,
# with kprobe events on each step of a purge's pool decay and take
# (below).
#
#   scripts/linux/trace.sh SMP OUT.txt
#
# The kernel is build.sh's Linux with trace.config merged over linux.config
# (kprobes): a build of its own, cached beside the measured one under its
# own key, which it starts from when that one is built (only the objects
# the kprobe options touch are rebuilt). The trace buffer is copied out
# over the serial console at the end of the run, gzip-compressed and
# base64-encoded.
#
# The probes are placed on the host: mm/vmalloc.c is compiled once more
# with -g (the same command, so the same code: checked byte for byte) and
# `perf probe` (linux-perf) turns each source line below into an address
# and the registers of its variables. docs/trace-format.md says what each
# event means to the importer.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
smp="${1:?usage: trace.sh SMP OUT.txt}"
out="${2:?usage: trace.sh SMP OUT.txt}"
command -v perf >/dev/null || { echo "trace.sh: perf is missing: apt-get install linux-perf" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here"/{build.sh,vm_map_ram_loop.c,loader.c,init.sh} "$work/"
cat "$here/linux.config" "$here/trace.config" >"$work/linux.config"

# build.sh's cache keys, for the measured kernel and this one.
cache="${MMKIT_LINUX_CACHE:-${HOME:-/tmp}/.cache/mmkit-linux}"
tarball="${MMKIT_LINUX_SOURCE:-/usr/src/linux-source-6.12.tar.xz}"
version="$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || true)"
[ -n "$version" ] || version="$(stat -c %s-%Y "$tarball")"
key() { sha256sum <"$1" | cut -c1-12; }
stock="$cache/kernel-$version-$(key "$here/linux.config")"
kbuild="$cache/kernel-$version-$(key "$work/linux.config")"
if [ ! -d "$kbuild" ] && [ -f "$stock/done" ]; then
  cp -a "$stock" "$kbuild.tmp"
  rm -f "$kbuild.tmp/done"
  mv "$kbuild.tmp" "$kbuild"
fi
built="$("$work/build.sh" | tail -2)"
kernel="$(echo "$built" | sed -n 's/^KERNEL //p')"
initrd="$(echo "$built" | sed -n 's/^INITRD //p')"

# mm/vmalloc.o again, with -g.
cmd="$(sed -n 's/^savedcmd_mm\/vmalloc.o := //p' "$kbuild/mm/.vmalloc.o.cmd")"
cmd="${cmd/-Wp,-MMD,mm\/.vmalloc.o.d/}"
cmd="${cmd/-o mm\/vmalloc.o/-g -o $work/vmalloc.o}"
(cd "$kbuild" && eval "$cmd")
text() { objcopy -O binary --only-section=.text "$1" "$2"; }
text "$kbuild/mm/vmalloc.o" "$work/text.built"
text "$work/vmalloc.o" "$work/text.debug"
cmp -s "$work/text.built" "$work/text.debug" \
  || { echo "trace.sh: mm/vmalloc.c compiled with -g differs from the kernel's" >&2; exit 1; }

# NAME=FUNCTION[:LINE of the function] [VARIABLES]: each step of
# __purge_vmap_area_lazy's per-node loop, decay_va_pool_node's pool
# detach and re-attach, and purge_vmap_node (v6.12 line offsets).
probes=(
  "vmap_decay_start=decay_va_pool_node vn full_decay"
  "vmap_pool_detach=decay_va_pool_node:16 i"
  "vmap_pool_attach=decay_va_pool_node:45"
  "vmap_decay_reclaim=decay_va_pool_node:50"
  "vmap_decay_end=__purge_vmap_area_lazy:23 i"
  "vmap_lazy_take=__purge_vmap_area_lazy:34 i"
  "vmap_purge_node=purge_vmap_node work"
  "vmap_purge_node_done=purge_vmap_node:30"
)
kprobes=""
for spec in "${probes[@]}"; do
  def="$(perf probe -v -k "$work/vmalloc.o" -D "$spec" 2>&1 | grep -m1 '^p:probe/' || true)"
  [ -n "$def" ] || { echo "trace.sh: perf probe could not place $spec" >&2; exit 1; }
  def="${def/p:probe\//p:mmkit/}"
  kprobes="$kprobes${kprobes:+;}${def// /,}"
done

accel=(-accel tcg,thread=multi)
if grep -qwE 'vmx|svm' /proc/cpuinfo && [ -e /dev/kvm ]; then
  accel=(-accel kvm -cpu host)
fi
tv="test_loop_count=100,test_repeat_count=3,busy_count=1000,full_fit_pairs=256,run_test_mask=127"
append="console=ttyS0 quiet panic=-1 trace_event=vmalloc:* trace_buf_size=8M"
append="$append mmkit.step=perf:test_vmalloc:nr_threads=1,sequential_test_order=1,$tv"
append="$append mmkit.step=stress:test_vmalloc:nr_threads=$smp,$tv"
append="$append mmkit.step=vm_map_ram:vm_map_ram_loop:iterations=2000,nr_pages=4"
append="$append mmkit.trace=1 kprobe_event=$kprobes"

log="$work/console.log"
timeout 1200 qemu-system-x86_64 "${accel[@]}" -M q35 -m 512M -display none -serial stdio \
  -no-reboot -device isa-debug-exit,iobase=0xf4,iosize=0x04 -smp "$smp" \
  -kernel "$kernel" -initrd "$initrd" -append "$append" </dev/null >"$log" 2>&1 || true
grep -q '^MMKIT TRACE end' "$log" || { tail -20 "$log" >&2; echo "trace.sh: no trace in the output" >&2; exit 1; }
sed -n '/^MMKIT TRACE begin/,/^MMKIT TRACE end/p' "$log" | sed '1d;$d' | tr -d '\r' \
  | base64 -d | gunzip >"$out"
tr -d '\r' <"$log" | grep -v '^MMKIT TRACE\|^[A-Za-z0-9+/=]*$' >"${out%.txt}.console.txt"
echo "trace.sh: $(grep -vc '^#' "$out") events at $smp vCPUs in $out (console log: ${out%.txt}.console.txt)"
