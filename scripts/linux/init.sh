#!/bin/sh
# /init of the initramfs `mmkit experiments linux` boots. It runs the steps
# named on the kernel command line, in order, each word
#   mmkit.step=NAME:MODULE:PARAM=VALUE,PARAM=VALUE,...
# loads /lib/modules/MODULE.ko with those parameters, and prints between
#   MMKIT STEP NAME begin
#   MMKIT STEP NAME end rc=N tlb=N cal=N
# the kernel log lines the step wrote (the console is quiet, so the log is
# copied from dmesg) and the TLB-shootdown and function-call interrupts all
# CPUs took during it (/proc/interrupts). With mmkit.trace=1 the trace buffer follows last,
# gzip-compressed and base64-encoded between MMKIT TRACE begin/end.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null

# The interrupts of one /proc/interrupts line, all CPUs: TLB counts the
# shootdowns of user address spaces, CAL the function-call IPIs that carry
# kernel-range flushes (vmalloc's purges) among other cross-CPU calls.
irqs() {
  awk -v line="$1:" '$1 == line { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i } END { print s + 0 }' \
    /proc/interrupts
}

echo "MMKIT BOOT cpus=$(grep -c '^processor' /proc/cpuinfo)"
dmesg | grep -E 'tsc: (Detected|Refined)' | sed 's/^/MMKIT LOG /'
dmesg -c >/dev/null

for word in $(cat /proc/cmdline); do
  case "$word" in
    mmkit.step=*) ;;
    *) continue ;;
  esac
  spec="${word#mmkit.step=}"
  name="${spec%%:*}"
  rest="${spec#*:}"
  module="${rest%%:*}"
  params=""
  case "$rest" in
    *:*) params="$(echo "${rest#*:}" | tr ',' ' ')" ;;
  esac
  echo "MMKIT STEP $name begin module=$module $params"
  t0="$(irqs TLB)"
  c0="$(irqs CAL)"
  # shellcheck disable=SC2086
  load "/lib/modules/$module.ko" $params
  rc=$?
  t1="$(irqs TLB)"
  c1="$(irqs CAL)"
  dmesg -c | sed 's/^/MMKIT LOG /'
  echo "MMKIT STEP $name end rc=$rc tlb=$((t1 - t0)) cal=$((c1 - c0))"
done

if grep -q 'mmkit.trace=1' /proc/cmdline; then
  echo "MMKIT TRACE begin"
  gzip -9 -c /sys/kernel/tracing/trace | base64
  echo "MMKIT TRACE end"
fi
echo "MMKIT DONE"
poweroff -f
reboot -f
