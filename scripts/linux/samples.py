#!/usr/bin/env python3
"""Names the samples of an mmkit-kernel boot with `sample=N` (its `ROW sample`
lines: the instruction each APIC timer interrupt stopped at, counted) by
the kernel's symbols, and sums them per function or per part of the
system. Under QEMU's instruction counting (`-icount shift=0`) a sample is
N guest instructions.

    scripts/linux/samples.py ELF LOG WHAT [--by function|part|inline] [--top N]

WHAT is the label of the lines, e.g. "design=new test=full_fit_alloc_test".
`function`: the symbol holding each address; `inline`: the innermost
function inlined there (addr2line -i); `part`: the first of PARTS whose
pattern any function of the inline chain matches.
"""
import argparse
import bisect
import collections
import re
import subprocess

# Parts of the system, first match wins (the inline chain is searched for each).
PARTS = [
    ("alignment summaries of the free tree", r"tree::summary"),
    ("std BTreeMap", r"alloc::collections::btree"),
    ("layer's area book", r"mmkit_vmalloc::book"),
    ("busy index of the range allocator", r"vmap::busy"),
    ("kernel heap", r"mmkit_kernel::heap|KernelHeap"),
    ("frames (buddy, per-CPU lists)", r"mmkit::buddy|mmkit_kernel::phys|PhysFrames"),
    ("page tables", r"mmkit_kernel::paging|KernelMmu"),
    ("memmove/memcpy/memset", r"compiler_builtins::mem|^memmove|^memcpy|^memset"),
    ("free tree (B+tree)", r"mmkit::tree::btree"),
    ("range allocator (vmap)", r"mmkit::vmap|mmkit::lazy|mmkit::range"),
    ("vmalloc layer (driver)", r"mmkit_vmalloc"),
    ("kernel, other", r"mmkit_kernel"),
]


def samples(log, what):
    out = []
    for line in open(log, errors="replace"):
        m = re.match(r"ROW sample (.*) rip=0x([0-9a-f]+) n=(\d+)", line)
        if m and m.group(1) == what:
            out.append((int(m.group(2), 16), int(m.group(3))))
    return out


def by_function(elf, rips):
    syms = []
    nm = subprocess.run(["nm", "-C", "--defined-only", "-n", elf],
                        capture_output=True, text=True, check=True).stdout
    for line in nm.splitlines():
        p = line.split(" ", 2)
        if len(p) == 3 and p[1] in "tTwW":
            syms.append((int(p[0], 16), p[2]))
    starts = [a for a, _ in syms]
    for rip, n in rips:
        i = bisect.bisect_right(starts, rip) - 1
        yield (syms[i][1] if i >= 0 else "?"), n


def chains(elf, rips):
    """The inline chain (innermost first) of each address."""
    out = subprocess.run(["addr2line", "-a", "-f", "-C", "-i", "-e", elf]
                         + [hex(r) for r, _ in rips],
                         capture_output=True, text=True, check=True).stdout
    frames, cur = {}, None
    for line in out.splitlines():
        if line.startswith("0x"):
            cur = int(line, 16)
            frames[cur] = []
        elif cur is not None:
            frames[cur].append(line)
    return {rip: f[0::2] for rip, f in frames.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("elf")
    ap.add_argument("log")
    ap.add_argument("what")
    ap.add_argument("--by", choices=["function", "part", "inline"], default="part")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    rips = samples(a.log, a.what)
    total = sum(n for _, n in rips)
    if total == 0:
        raise SystemExit(f"no `ROW sample {a.what} ...` lines in {a.log}")
    hits = collections.Counter()
    if a.by == "function":
        for name, n in by_function(a.elf, rips):
            hits[name] += n
    else:
        ch = chains(a.elf, rips)
        for rip, n in rips:
            funcs = ch.get(rip, [])
            if a.by == "inline":
                hits[funcs[0] if funcs else "?"] += n
                continue
            part = next((name for name, pat in PARTS
                         if any(re.search(pat, f) for f in funcs)), "other")
            hits[part] += n
    for name, n in hits.most_common(a.top):
        print(f"{100 * n / total:6.2f}% {n:8d}  {name[:160]}")
    print(f"{100:6.2f}% {total:8d}  samples in all")


if __name__ == "__main__":
    main()
