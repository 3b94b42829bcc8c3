"""A synthetic Linux vmalloc ftrace text of 100,000 events (one CPU, random
sizes and alignments, lazy frees, a purge every 400 frees) for timing
`mmkit trace import-linux` and `mmkit replay --allocator linux`:

    python3 scripts/linux/synthetic_trace.py > big.txt
"""
import random
import sys
random.seed(7)
VS, VE = 0xffffc90000000000, 0xffffe8ffffffffff
out = ["# tracer: nop", "#", "# entries-in-buffer/entries-written: 0/0   #P:1", "#"]
t = 0.0; nxt = VS; live = []; lazy = 0; events = 0
def line(body):
    global t, events
    t += 0.000013; events += 1
    out.append(f"          insmod-1     [000] .....  {t:10.6f}: {body}")
while events < 100_000:
    r = random.random()
    if r < 0.52 or not live:
        pages = random.choice([1,1,2,2,3,4,5,8,16,17,33,64,129])
        size = (pages + 1) * 4096
        align = random.choice([4096]*20 + [0x200000, 0x8000, 0x10000])
        a = (nxt + align - 1) & ~(align - 1)
        nxt = a + size
        line(f"alloc_vmap_area: va_start: {a} size={size} align={align} vstart={VS:#x} vend={VE:#x} failed=0")
        live.append(a)
    else:
        a = live.pop(random.randrange(len(live)))
        lazy += 1
        line(f"free_vmap_area_noflush: va_start={a:#x} nr_lazy={lazy} nr_lazy_max=32768")
        if lazy >= 400:
            line(f"purge_vmap_area_lazy: start={VS:#x} end={nxt:#x} num_purged={lazy}")
            lazy = 0
sys.stdout.write("\n".join(out) + "\n")

