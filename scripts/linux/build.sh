#!/usr/bin/env bash
# Builds the Linux that `mmkit experiments linux` boots beside mmkit-kernel:
# Debian's linux-source-6.12 with linux.config merged over tinyconfig, the
# vm_map_ram module (vm_map_ram_loop.c), a static finit_module loader and a
# busybox initramfs whose /init runs the steps named on the kernel command
# line (init.sh).
#
# Everything is cached outside the checkout, in $MMKIT_LINUX_CACHE
# (default ~/.cache/mmkit-linux), keyed by the source package's version and
# the hash of the files here, so a machine builds it once.
#
# On success the last two lines of stdout are
#   KERNEL <path of bzImage>
#   INITRD <path of initramfs.cpio.gz>
# On failure it exits non-zero with one line on stderr saying why.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${MMKIT_LINUX_CACHE:-${HOME:-/tmp}/.cache/mmkit-linux}"
tarball="${MMKIT_LINUX_SOURCE:-/usr/src/linux-source-6.12.tar.xz}"
jobs="${MMKIT_LINUX_JOBS:-$(nproc 2>/dev/null || echo 2)}"
packages="linux-source-6.12 busybox-static flex bison bc libelf-dev libssl-dev cpio gcc make"

die() { echo "linux build: $*" >&2; exit 1; }

# The Debian package provides the source; installed here when this runs as
# root and apt is present, otherwise the caller is told what to install.
if [ ! -f "$tarball" ] && [ -z "${MMKIT_LINUX_SOURCE:-}" ] \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing $packages" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages) \
    >/dev/null 2>&1 || true
fi
[ -f "$tarball" ] || die "no Linux source at $tarball: install Debian's package (apt-get install $packages) or set MMKIT_LINUX_SOURCE to a linux-source tarball"
for tool in make gcc flex bison bc cpio gzip; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing: apt-get install $packages"
done
busybox="${MMKIT_BUSYBOX:-$(command -v busybox || true)}"
[ -n "$busybox" ] || die "busybox is missing: apt-get install busybox-static"
if ldd "$busybox" >/dev/null 2>&1; then
  die "$busybox is dynamically linked: apt-get install busybox-static"
fi

version="$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || true)"
[ -n "$version" ] || version="$(stat -c %s-%Y "$tarball")"
kernel_hash="$(cat "$here/linux.config" | sha256sum | cut -c1-12)"
all_hash="$(cat "$here/linux.config" "$here/vm_map_ram_loop.c" "$here/loader.c" \
  "$here/init.sh" "$here/build.sh" | sha256sum | cut -c1-12)"
src="$cache/src-$version"
kbuild="$cache/kernel-$version-$kernel_hash"
out="$cache/out-$version-$all_hash"
mkdir -p "$cache"

if [ -f "$out/done" ]; then
  echo "KERNEL $out/bzImage"
  echo "INITRD $out/initramfs.cpio.gz"
  exit 0
fi

# One build at a time per cache directory.
exec 9>"$cache/lock"
flock 9

if [ ! -f "$src/.unpacked" ]; then
  echo "unpacking $tarball into $src" >&2
  rm -rf "$src" "$src.tmp"
  mkdir -p "$src.tmp"
  tar -xJf "$tarball" -C "$src.tmp" --strip-components=1
  touch "$src.tmp/.unpacked"
  mv "$src.tmp" "$src"
fi

if [ ! -f "$kbuild/done" ]; then
  echo "configuring Linux in $kbuild" >&2
  mkdir -p "$kbuild"
  make -s -C "$src" O="$kbuild" tinyconfig >&2
  "$src/scripts/kconfig/merge_config.sh" -m -O "$kbuild" "$kbuild/.config" \
    "$here/linux.config" >&2
  make -s -C "$src" O="$kbuild" olddefconfig >&2
  # Options the merge could silently drop (an unmet dependency) are checked.
  for opt in CONFIG_64BIT=y CONFIG_CC_OPTIMIZE_FOR_PERFORMANCE=y CONFIG_SMP=y CONFIG_SLUB=y CONFIG_MODULES=y \
             CONFIG_TEST_VMALLOC=m CONFIG_BLK_DEV_INITRD=y \
             CONFIG_SERIAL_8250_CONSOLE=y CONFIG_EVENT_TRACING=y; do
    grep -qx "$opt" "$kbuild/.config" || die "$opt did not survive olddefconfig"
  done
  for opt in CONFIG_SLUB_TINY CONFIG_CPU_MITIGATIONS CONFIG_KASAN CONFIG_DEBUG_VM CONFIG_LOCKDEP; do
    ! grep -qx "$opt=y" "$kbuild/.config" || die "$opt is set"
  done
  echo "building Linux with -j$jobs (about 10 minutes on 2 idle cores)" >&2
  make -s -C "$src" O="$kbuild" -j"$jobs" bzImage modules >&2
  touch "$kbuild/done"
fi

echo "building the vm_map_ram module, the loader and the initramfs" >&2
rm -rf "$out.tmp"
mkdir -p "$out.tmp/mod" "$out.tmp/root"/{bin,sbin,proc,sys,dev,tmp,lib/modules}
cp "$here/vm_map_ram_loop.c" "$out.tmp/mod/"
# Linux's own lib/test_vmalloc.c, built beside it with two of its fixed
# sizes turned into parameters (long_busy_list's 15000 areas, full_fit's
# pair count), so it can also run at mmkit-kernel's CI sizes; unset, they
# keep their stock values.
tv="$out.tmp/mod/test_vmalloc.c"
cp "$src/lib/test_vmalloc.c" "$tv"
[ "$(grep -c '15000' "$tv")" = 3 ] || die "lib/test_vmalloc.c: long_busy_list's 15000 not found 3 times"
grep -q 'junk_length \*= (32 \* 1024 \* 1024 / PAGE_SIZE);' "$tv" \
  || die "lib/test_vmalloc.c: full_fit's junk_length not found"
sed -i -e 's/15000/busy_count/g' \
  -e 's|^\(\s*junk_length \*= (32 \* 1024 \* 1024 / PAGE_SIZE);\)|\1\n\tif (full_fit_pairs > 0)\n\t\tjunk_length = full_fit_pairs;|' \
  -e 's|^static int long_busy_list_alloc_test(void)|static int busy_count = 15000;\nmodule_param(busy_count, int, 0444);\nstatic int full_fit_pairs;\nmodule_param(full_fit_pairs, int, 0444);\n\n&|' \
  "$tv"
grep -q 'junk_length = full_fit_pairs;' "$tv" || die "lib/test_vmalloc.c: the full_fit edit failed"
echo "obj-m := vm_map_ram_loop.o test_vmalloc.o" >"$out.tmp/mod/Kbuild"
make -s -C "$kbuild" M="$out.tmp/mod" modules >&2
gcc -static -O2 -o "$out.tmp/root/bin/load" "$here/loader.c"
cp "$busybox" "$out.tmp/root/bin/busybox"
for applet in sh awk mount cat echo dmesg grep sed tr gzip base64 poweroff reboot sleep mkdir; do
  ln -s busybox "$out.tmp/root/bin/$applet"
done
cp "$here/init.sh" "$out.tmp/root/init"
chmod +x "$out.tmp/root/init"
cp "$out.tmp/mod/test_vmalloc.ko" "$out.tmp/root/lib/modules/"
cp "$out.tmp/mod/vm_map_ram_loop.ko" "$out.tmp/root/lib/modules/"
(cd "$out.tmp/root" && find . | cpio -o -H newc --quiet | gzip -9) >"$out.tmp/initramfs.cpio.gz"
cp "$kbuild/arch/x86/boot/bzImage" "$out.tmp/bzImage"
touch "$out.tmp/done"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "KERNEL $out/bzImage"
echo "INITRD $out/initramfs.cpio.gz"
