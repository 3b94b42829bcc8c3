use super::*;

/// The header `cat /sys/kernel/tracing/trace` prints (6.12), two CPUs.
const HEADER: &str = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 9/9   #P:2
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
";

/// Lines in the exact TP_printk formats of v6.12's
/// include/trace/events/vmalloc.h (va_start of alloc_vmap_area in decimal).
const EVENTS: &str = "\
       swapper/0-1       [000] .....     0.412170: alloc_vmap_area: va_start: 18446683600570023936 size=20480 align=4096 vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0
       swapper/0-1       [000] .....     0.412201: alloc_vmap_area: va_start: 18446683600570044416 size=8192 align=4096 vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0
   kworker/u4:1-33      [001] .....     0.500000: free_vmap_area_noflush: va_start=0xffffc90000000000 nr_lazy=5 nr_lazy_max=32768
 test_vmalloc.sh-212     [001] .....     0.600000: alloc_vmap_area: va_start: 18446683600576315392 size=4198400 align=4194304 vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0
   kworker/0:2-40       [000] .....     0.700000: purge_vmap_area_lazy: start=0xffffc90000000000 end=0xffffc90000005000 num_purged=1
";

fn imported(text: &str) -> Imported {
    import(text.as_bytes()).unwrap()
}

fn error(text: &str) -> ImportError {
    import(text.as_bytes()).expect_err("must not import")
}

/// An `alloc_vmap_area` line on `cpu` of `pages` pages at `page` pages
/// into vmalloc's window, in vmalloc's window.
fn alloc_at(cpu: u32, page: u64, pages: u64) -> String {
    format!(
        "  t-1 [{cpu:03}] ..... 1.0: alloc_vmap_area: va_start: {} size={} align=4096 \
         vstart=0xffffc90000000000 vend=0xffffe8ffffffffff failed=0\n",
        0xffff_c900_0000_0000u64 + page * 0x1000,
        pages * 0x1000
    )
}

/// A `free_vmap_area_noflush` line on `cpu` of the area at `page`.
fn free_at(cpu: u32, page: u64, nr_lazy: u64) -> String {
    format!(
        "  t-1 [{cpu:03}] ..... 1.0: free_vmap_area_noflush: va_start={:#x} \
         nr_lazy={nr_lazy} nr_lazy_max=32768\n",
        0xffff_c900_0000_0000u64 + page * 0x1000
    )
}

/// A `purge_vmap_area_lazy` line of the drain worker on CPU 1.
fn purge_line(purged: u64) -> String {
    format!(
        "  kworker/1:1-27 [001] ..... 1.0: purge_vmap_area_lazy: start=0x0 end=0x0 \
         num_purged={purged}\n"
    )
}

/// The commands of an imported trace after its header, without operands.
fn commands(t: &Imported) -> Vec<String> {
    t.trace()
        .lines()
        .skip(5)
        .map(|l| l.split(" 0x").next().unwrap().to_string())
        .collect()
}

/// A purge begins after its CPU's previous event, after the previous
/// purge, and after as many lazy frees as it purged; here the last bound
/// decides: the purge on CPU 0 took one area, so it began after the free
/// on CPU 1 and before the allocation after it (`purge begin` above).
#[test]
fn each_event_becomes_its_command() {
    let t = imported(&format!("{HEADER}{EVENTS}"));
    assert_eq!(
        t.trace(),
        "# Linux vmalloc trace, imported by `mmkit trace import-linux`\n\
         lazymax 0xffffffffffffffff\nspace 0x1 0xffffffffffffffff\ncpus 2\n\
         vmalloc 0xffffc90000000000 0xffffe8ffffffffff\n\
         alloc L13 0x5000 align 0x1000 range 0xffffc90000000000 0xffffe8ffffffffff cpu 0\n\
         alloc L14 0x2000 align 0x1000 range 0xffffc90000000000 0xffffe8ffffffffff cpu 0\n\
         lazy L13\n\
         purge begin\n\
         alloc L16 0x401000 align 0x400000 range 0xffffc90000000000 0xffffe8ffffffffff cpu 1\n\
         purge\n"
    );
    assert_eq!(
        t.expected,
        "L13 0xffffc90000000000\nL14 0xffffc90000005000\nL16 0xffffc90000600000\n"
    );
    assert_eq!((t.cpus, t.events, t.allocs), (2, 5, 3));
}

/// The imported trace is a valid replay trace, line for line.
#[test]
fn the_trace_parses() {
    let t = imported(&format!("{HEADER}{EVENTS}"));
    // Two begins: after the free its purge counted, and after the CPU's
    // previous event.
    let two = "\
  x-1 [000] ..... 1.0: free_vmap_area_noflush: va_start=0xffffc90000000000 nr_lazy=5 nr_lazy_max=9
  x-1 [001] ..... 1.1: free_vmap_area_noflush: va_start=0xffffc90000005000 nr_lazy=7 nr_lazy_max=9
  x-1 [000] ..... 1.2: purge_vmap_area_lazy: start=0x0 end=0x0 num_purged=1
  x-1 [001] ..... 1.3: purge_vmap_area_lazy: start=0x0 end=0x0 num_purged=1
";
    let events: String = EVENTS.lines().take(2).map(|l| format!("{l}\n")).collect();
    let body = imported(&format!("{HEADER}{events}{two}")).trace();
    let body: Vec<&str> = body.lines().skip(7).collect();
    assert_eq!(
        body,
        [
            "lazy L13",
            "purge begin",
            "lazy L14",
            "purge",
            "purge begin",
            "purge"
        ]
    );
    let cmds: Vec<_> = crate::trace::Commands::new(t.trace().as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(cmds.len(), 10);
}

/// A failed attempt, the purge it starts on its CPU (full) and the retry
/// are one request; one that fails after its purge too is `nospace`.
#[test]
fn a_failed_attempt_its_purge_and_its_retry_are_one_request() {
    let ev = |cpu: u32, what: &str| format!("  vmalloc-9 [{cpu:03}] ..... 1.0: {what}\n");
    let big = "size=8192 align=4096 vstart=0x1000 vend=0x3000";
    let text = [
        ev(
            1,
            &format!("alloc_vmap_area: va_start: 12288 {big} failed=1"),
        ),
        ev(
            0,
            "purge_vmap_area_lazy: start=0xffffffffffffffff end=0x0 num_purged=0",
        ),
        ev(
            1,
            "purge_vmap_area_lazy: start=0x1000 end=0x3000 num_purged=2",
        ),
        ev(
            1,
            &format!("alloc_vmap_area: va_start: 4096 {big} failed=0"),
        ),
        ev(
            1,
            &format!("alloc_vmap_area: va_start: 12288 {big} failed=1"),
        ),
        ev(
            1,
            "purge_vmap_area_lazy: start=0xffffffffffffffff end=0x0 num_purged=0",
        ),
        ev(
            1,
            &format!("alloc_vmap_area: va_start: 12288 {big} failed=1"),
        ),
        ev(
            0,
            &format!("alloc_vmap_area: va_start: 12288 {big} failed=1"),
        ),
    ]
    .concat();
    let t = imported(&text);
    let range = "align 0x1000 range 0x1000 0x3000";
    assert_eq!(
        t.trace().lines().skip(5).collect::<Vec<_>>(),
        [
            "purge begin".to_string(),
            "purge".into(),
            "purge full begin".into(),
            "purge full".into(),
            format!("alloc L1 0x2000 {range} cpu 1"),
            "purge full begin".into(),
            "purge full".into(),
            format!("alloc L5 0x2000 {range} cpu 1"),
            format!("alloc L8 0x2000 {range} cpu 0"),
        ]
    );
    assert_eq!(t.expected, "L1 0x1000\nL5 nospace\nL8 nospace\n");
}

#[test]
fn unmappable_lines_name_their_line() {
    let at = |text: &str| error(text).line;
    let alloc = "x-1 [000] ..... 1.0: alloc_vmap_area: va_start: 4096 size=4096 align=4096 vstart=0x1000 vend=0x9000 failed=0\n";
    // A free of an address nothing returned.
    let e = error(&format!("{HEADER}x-1 [000] ..... 1.0: free_vmap_area_noflush: va_start=0x1000 nr_lazy=1 nr_lazy_max=2\n"));
    assert_eq!(e.line, 13);
    assert!(e.msg.contains("0x1000"), "{}", e.msg);
    // The same address twice without a free.
    assert_eq!(at(&format!("{alloc}\n{alloc}")), 3);
    // Lost events, another event, no CPU, malformed and missing fields.
    assert_eq!(at(&format!("{alloc}CPU:1 [LOST 12 EVENTS]\n")), 2);
    assert_eq!(at("x-1 [000] ..... 1.0: kmalloc: call_site=0 ptr=0\n"), 1);
    assert_eq!(
        at("x-1 ..... 1.0: purge_vmap_area_lazy: start=0x0 end=0x0 num_purged=0\n"),
        1
    );
    assert_eq!(
        at("x-1 [000] ..... 1.0: purge_vmap_area_lazy: start=0x0 end=0x0\n"),
        1
    );
    assert_eq!(at("x-1 [000] . 1.0: alloc_vmap_area: va_start: 1 size=0xz align=1 vstart=0x0 vend=0x1 failed=0\n"), 1);
    assert_eq!(at("x-1 [000] . 1.0: alloc_vmap_area: va_start: 1 size=1 align=1 vstart=0x0 vend=0x1 failed=2\n"), 1);
    assert_eq!(at("# c\n\nx-1 [000] . 1.0: free_vmap_area_noflush: va_start=0x99999999999999999 nr_lazy=0 nr_lazy_max=0\n"), 3);
    assert_eq!(import(&b"# ok\n\xff\n"[..]).unwrap_err().line, 2);
}

/// Without a header the CPU count is the highest CPU seen plus one.
#[test]
fn cpus_without_a_header() {
    let t = imported("x-1 [003] ..... 1.0: purge_vmap_area_lazy: start=0x0 end=0x0 num_purged=0\n");
    assert_eq!(t.cpus, 4);
    assert_eq!(
        imported("# nothing\n").trace().lines().nth(3),
        Some("cpus 1")
    );
}

/// `nr_lazy` falls only when a running purge has finished a node: the
/// purge began after its CPU's last event before the first fall, and with
/// one fall per node, `purge node N` goes just before the `N`-th fall.
#[test]
fn nr_lazy_falls_place_the_purge_start_and_each_node() {
    let alloc = |cpu: u32, page: u64| alloc_at(cpu, page, 2);
    let free = |page: u64, nr_lazy: u64| free_at(0, page, nr_lazy);
    let text = [
        HEADER.to_string(),
        alloc(1, 0),
        alloc(0, 2),
        alloc(0, 4),
        alloc(0, 6),
        free(0, 2),
        free(2, 4),
        free(4, 3),
        free(6, 2),
        purge_line(4),
    ]
    .concat();
    assert_eq!(
        commands(&imported(&text)),
        [
            "alloc L13",
            "purge begin",
            "alloc L14",
            "alloc L15",
            "alloc L16",
            "lazy L13",
            "lazy L14",
            "purge node 0",
            "lazy L15",
            "purge node 1",
            "lazy L16",
            "purge",
        ]
    );
}

/// `nr_lazy` after a purge's last fall counts the pages freed since it
/// took the lazy lists: here 6, the frees of L15, L16 and L19, so it took
/// L13 and L14 and began between `lazy L14` and `lazy L15` (the window),
/// after the purging CPU's last event (`purge begin`). The first fall
/// subtracts 4 pages, node 1's (L13, on CPU 1), the second 3, node 0's
/// (L14): node 1 finished first.
#[test]
fn nr_lazy_after_the_last_fall_places_the_take_and_names_each_node() {
    let (alloc, free) = (alloc_at, free_at);
    let text = [
        HEADER.to_string(),
        alloc(1, 0, 4),
        alloc(0, 10, 3),
        alloc(0, 20, 2),
        alloc(0, 30, 2),
        free(1, 0, 4),
        free(0, 10, 7),
        alloc(0, 40, 2),
        free(0, 20, 9),
        free(0, 30, 7),
        free(0, 40, 6),
        purge_line(2),
    ]
    .concat();
    assert_eq!(
        commands(&imported(&text)),
        [
            "alloc L13",
            "alloc L14",
            "alloc L15",
            "alloc L16",
            "lazy L13",
            "lazy L14",
            "purge window",
            "purge begin",
            "alloc L19",
            "lazy L15",
            "purge node 1",
            "lazy L16",
            "purge node 0",
            "lazy L19",
            "purge",
        ]
    );
}

/// The fall the free after a purge event shows is that purge's (its last
/// node is subtracted just before the event): 4 pages left after it, the
/// frees of L14 and L17, so the purge took L13 only, although it counted
/// two areas and L14 came before its event.
#[test]
fn a_fall_after_the_event_belongs_to_that_purge() {
    let alloc = |page: u64, pages: u64| alloc_at(0, page, pages);
    let free = |page: u64, nr_lazy: u64| free_at(0, page, nr_lazy);
    let text = [
        HEADER.to_string(),
        alloc(0, 4),
        alloc(10, 2),
        free(0, 4),
        free(10, 6),
        purge_line(2),
        alloc(20, 2),
        free(20, 4),
    ]
    .concat();
    assert_eq!(
        commands(&imported(&text)),
        [
            "alloc L13",
            "alloc L14",
            "lazy L13",
            "purge begin",
            "lazy L14",
            "purge",
            "alloc L18",
            "lazy L18",
        ]
    );
}

/// Inside a purge window the judge runs the begin at Linux's first
/// answer that the state before the begin does not give: the area that
/// the begin's decay frees (`a`, pooled on node 0, its pool of one area
/// decays whole). When Linux's answer is the one before the decay, the
/// begin waits for its line. A free-running replay begins at the line.
#[test]
fn a_purge_window_begins_at_the_first_answer_that_needs_it() {
    let trace = "lazymax 0xffffffffffffffff\nspace 0x1 0xffffffffffffffff\ncpus 2\n\
                 vmalloc 0x100000 0x1000000\n\
                 alloc a 0x2000 align 0x1000 range 0x100000 0x1000000 cpu 0\n\
                 lazy a\npurge\npurge window\n\
                 alloc c 0x2000 align 0x1000 range 0x100000 0x1000000 cpu 1\n\
                 purge begin\nlazy c\npurge\n";
    let run = |c: &str, judged: bool| {
        let linux = judge::answers(&format!("a 0x100000\nc {c}\n")).unwrap();
        judge::replay(trace, &linux, judged).unwrap()
    };
    let decayed = run("0x100000", true);
    assert_eq!((decayed.same, decayed.window_begins), (2, 1));
    let before = run("0x102000", true);
    assert_eq!((before.same, before.window_begins), (2, 0));
    let free = run("0x100000", false);
    assert_eq!((free.same, free.window_begins), (1, 0));
}

/// Judged, a request on another CPU whose event came late runs ahead
/// when it took the block the current request would get, and only when
/// its CPU allocated nothing in between; free-running, nothing moves.
#[test]
fn a_late_event_of_another_cpu_runs_ahead_when_it_took_the_block() {
    let alloc = |id: &str, cpu: u32| {
        format!("alloc {id} 0x2000 align 0x1000 range 0x100000 0x1000000 cpu {cpu}\n")
    };
    let head = "space 0x1 0xffffffffffffffff\ncpus 2\nvmalloc 0x100000 0x1000000\n";
    let run = |trace: &str, linux: &str, judged: bool| {
        let linux = judge::answers(linux).unwrap();
        judge::replay(trace, &linux, judged).unwrap()
    };
    let late = format!("{head}{}{}", alloc("a", 0), alloc("b", 1));
    let linux = "a 0x102000\nb 0x100000\n";
    let judged = run(&late, linux, true);
    assert_eq!((judged.same, judged.early_allocs), (2, 1));
    let free = run(&late, linux, false);
    assert_eq!((free.same, free.early_allocs), (0, 0));
    // CPU 1 allocated in between: its later request did not come first.
    let busy = format!("{head}{}{}{}", alloc("a", 0), alloc("c", 1), alloc("b", 1));
    let judged = run(&busy, "a 0x102000\nc 0x104000\nb 0x100000\n", true);
    assert_eq!((judged.same, judged.early_allocs), (1, 0));
}

/// The importer writes an allocation whose event came late where it took
/// the tree's lock: before CPU 0's request, which Linux's answers show
/// passed over its block.
#[test]
fn a_late_allocation_is_written_where_it_took_the_lock() {
    let text = [HEADER.to_string(), alloc_at(0, 2, 2), alloc_at(1, 0, 2)].concat();
    let t = imported(&text);
    let cpus = |t: &Imported| -> Vec<String> {
        let trace = t.trace();
        trace
            .lines()
            .skip(5)
            .map(|l| l[l.len() - 5..].to_string())
            .collect()
    };
    assert_eq!(cpus(&t), ["cpu 1", "cpu 0"]);
    let linux = judge::answers(&t.expected).unwrap();
    assert_eq!(judge::replay(&t.trace(), &linux, false).unwrap().same, 2);
    // In the order Linux wrote them, nothing moves.
    let t = imported(&[HEADER.to_string(), alloc_at(1, 0, 2), alloc_at(0, 2, 2)].concat());
    assert_eq!(cpus(&t), ["cpu 1", "cpu 0"]);
}

/// A kprobe line of trace.sh's probe `name` with `args`, by task `pid`.
fn probe_line(pid: u32, name: &str, args: &str) -> String {
    format!("  kworker/1:1-{pid} [001] ..... 1.0: {name}: (decay_va_pool_node+0x8f/0x420) {args}\n")
}

/// The kprobe line of node `node`'s decay start (nodes 0x800 bytes
/// apart from 0xffff888003c00000), by task 27.
fn decay_start(node: u64, full: bool) -> String {
    let vn = 0xffff_8880_03c0_0000u64 + node * 0x800;
    probe_line(
        27,
        "vmap_decay_start",
        &format!("vn={vn:#x} full_decay={:#x}", u8::from(full)),
    )
}

/// With the purge's kprobe events, each step is written where Linux ran
/// it (node 1's pool detached around an allocation on CPU 0), `purge
/// node N` where that node's areas were pooled, and no `purge begin`.
#[test]
fn probe_events_place_each_step_of_a_purge() {
    let text = [
        HEADER.to_string(),
        alloc_at(0, 0, 1),
        free_at(0, 0, 1),
        decay_start(0, false),
        probe_line(27, "vmap_decay_reclaim", ""),
        probe_line(27, "vmap_decay_end", "i=0"),
        probe_line(27, "vmap_lazy_take", "i=0"),
        decay_start(1, false),
        probe_line(27, "vmap_pool_detach", "i=1"),
        alloc_at(0, 4, 2),
        probe_line(27, "vmap_pool_attach", ""),
        probe_line(27, "vmap_decay_reclaim", ""),
        probe_line(27, "vmap_decay_end", "i=1"),
        probe_line(31, "vmap_purge_node", "work=0xffff888003c00440"),
        probe_line(27, "vmap_purge_node_done", ""),
        probe_line(31, "vmap_purge_node_done", ""),
        purge_line(1),
        free_at(0, 4, 2),
    ]
    .concat();
    let t = imported(&text);
    let body: Vec<String> = t.trace().lines().skip(5).map(String::from).collect();
    let alloc = |id: u32, size: &str| {
        format!("alloc L{id} {size} align 0x1000 range 0xffffc90000000000 0xffffe8ffffffffff cpu 0")
    };
    assert_eq!(
        body,
        [
            alloc(13, "0x1000"),
            "lazy L13".into(),
            "purge start".into(),
            "purge reclaim 0".into(),
            "purge take 0".into(),
            "purge detach 1 2".into(),
            alloc(21, "0x2000"),
            "purge attach 1 2".into(),
            "purge reclaim 1".into(),
            "purge node 0".into(),
            "purge".into(),
            "lazy L21".into(),
        ]
    );
    // Every line is a replay command.
    let cmds: Result<Vec<_>, _> = crate::trace::Commands::new(t.trace().as_bytes()).collect();
    assert_eq!(cmds.unwrap().len(), 4 + body.len());
}

/// A probe event the purge's order cannot hold names its line: a node
/// whose `vn` changed, an attach with no detach, a pool out of range.
#[test]
fn probe_events_out_of_order_name_their_line() {
    let start = |vn: &str| probe_line(27, "vmap_decay_start", &format!("vn={vn} full_decay=0x1"));
    let text = [
        HEADER.to_string(),
        start("0x1000"),
        start("0x1800"),
        start("0x2000"),
    ]
    .concat();
    let e = error(&text);
    assert_eq!(e.line, 15);
    assert!(e.msg.contains("node 0"), "{}", e.msg);
    let attach = format!(
        "{HEADER}{}{}",
        start("0x1000"),
        probe_line(27, "vmap_pool_attach", "")
    );
    assert_eq!(error(&attach).line, 14);
    let pool = format!("{HEADER}{}", probe_line(27, "vmap_pool_detach", "i=256"));
    assert_eq!(error(&pool).line, 13);
    let take = format!("{HEADER}{}", probe_line(27, "vmap_lazy_take", "i=2"));
    assert!(error(&take).msg.contains("out of range"));
}

/// Free-running, a request Linux failed after its purge is one try: the
/// trace carries that purge, and an area freed after the purge's take
/// stays lazy until the next purge, as in Linux.
#[test]
fn a_failed_try_after_its_purge_does_not_purge_again() {
    let alloc = |id: &str, size: u32| {
        format!("alloc {id} {size:#x} align 0x1000 range 0x100000 0x104000 cpu 0\n")
    };
    let trace = format!(
        "lazymax 0xffffffffffffffff\nspace 0x1 0xffffffffffffffff\ncpus 2\n\
         vmalloc 0x100000 0x104000\n{}purge full\nlazy a\n{}purge full\n{}",
        alloc("a", 0x4000),
        alloc("b", 0x2000),
        alloc("c", 0x2000),
    );
    let linux = judge::answers("a 0x100000\nb nospace\nc 0x100000\n").unwrap();
    let free = judge::replay(&trace, &linux, false).unwrap();
    assert_eq!((free.same, free.differ), (3, vec![]));
}

/// Judged, a request whose event follows purge steps of another task
/// runs ahead of the latest step before which the state gives Linux's
/// answer (here CPU 1 took the tree's lock before node 0's purge gave
/// `a` back); not across the purge's event, and not when no step's state
/// gives Linux's answer. Free-running, nothing moves.
#[test]
fn an_allocation_runs_ahead_of_the_purge_steps_before_its_event() {
    let alloc = |id: &str, cpu: u32| {
        format!("alloc {id} 0x2000 align 0x1000 range 0x100000 0x1000000 cpu {cpu}\n")
    };
    let trace = |between: &str| {
        format!(
            "space 0x1 0xffffffffffffffff\ncpus 2\nvmalloc 0x100000 0x1000000\n{}{}lazy a\n\
             purge full start\npurge take 0\npurge node 0\n{between}{}purge full\n{}",
            alloc("a", 0),
            alloc("b", 0),
            alloc("c", 1),
            alloc("d", 1)
        )
    };
    let run = |trace: &str, c: &str, judged: bool| {
        let linux = format!("a 0x100000\nb 0x102000\nc {c}\nd 0x100000\n");
        judge::replay(trace, &judge::answers(&linux).unwrap(), judged).unwrap()
    };
    let judged = run(&trace(""), "0x104000", true);
    assert_eq!((judged.same, judged.step_allocs), (4, 1));
    // `c` (line 10) ran before `purge node 0` (line 9).
    assert_eq!(judged.ahead, [(10, 9)]);
    let free = run(&trace(""), "0x104000", false);
    assert_eq!((free.same, free.step_allocs), (2, 0));
    // Across the purge's event: `c` could be its own task's retry.
    let judged = run(&trace("purge full\n"), "0x104000", true);
    assert_eq!((judged.same, judged.step_allocs), (3, 0));
    // No step's state gives Linux's answer.
    let judged = run(&trace(""), "0x106000", true);
    assert_eq!((judged.same, judged.step_allocs), (3, 0));
}

/// The importer writes a request whose event came after another task's
/// purge step where it ran: CPU 1's request took the tree before node
/// 0's purge gave the area back (its probe fires before that), so it
/// goes before `purge node 0`, and a free-running replay gives every
/// address Linux gave.
#[test]
fn an_allocation_after_a_purge_step_is_written_where_it_ran() {
    let failed = "  t-1 [000] ..... 1.0: alloc_vmap_area: va_start: 18446718784942112767 \
                  size=70368744177664 align=4096 vstart=0xffffc90000000000 \
                  vend=0xffffe8ffffffffff failed=1\n";
    let text = [
        HEADER.to_string(),
        alloc_at(0, 0, 2),
        alloc_at(0, 2, 2),
        free_at(0, 0, 2),
        failed.to_string(),
        decay_start(0, true),
        probe_line(27, "vmap_decay_reclaim", ""),
        probe_line(27, "vmap_decay_end", "i=0"),
        probe_line(27, "vmap_lazy_take", "i=0"),
        decay_start(1, true),
        probe_line(27, "vmap_decay_reclaim", ""),
        probe_line(27, "vmap_decay_end", "i=1"),
        probe_line(27, "vmap_purge_node", "work=0xffff888003c00440"),
        probe_line(27, "vmap_purge_node_done", ""),
        alloc_at(1, 4, 2),
        "  t-1 [000] ..... 1.0: purge_vmap_area_lazy: start=0x0 end=0x0 num_purged=1\n".to_string(),
        failed.to_string(),
        alloc_at(1, 0, 2),
    ]
    .concat();
    let t = imported(&text);
    let body: Vec<String> = t.trace().lines().skip(5).map(String::from).collect();
    let alloc = |id: u32, size: &str, cpu: u32| {
        format!(
            "alloc L{id} {size} align 0x1000 range 0xffffc90000000000 0xffffe8ffffffffff cpu {cpu}"
        )
    };
    assert_eq!(
        body,
        [
            alloc(13, "0x2000", 0),
            alloc(14, "0x2000", 0),
            "lazy L13".into(),
            "purge full start".into(),
            "purge reclaim 0".into(),
            "purge take 0".into(),
            "purge reclaim 1".into(),
            alloc(26, "0x2000", 1),
            "purge node 0".into(),
            "purge full".into(),
            alloc(16, "0x400000000000", 0),
            alloc(29, "0x2000", 1),
        ]
    );
    let linux = judge::answers(&t.expected).unwrap();
    let free = judge::replay(&t.trace(), &linux, false).unwrap();
    assert_eq!((free.same, free.allocs), (5, 5));
}
