//! cargo-fuzz target `trace`: the trace parser of `mmkit replay`
//! (`mmkit_cli::trace`) on arbitrary bytes.
//!
//! Properties: parsing never panics; the checking pass and the streaming
//! pass agree (same error line, or both accept); an error names a line
//! that exists; an accepted trace, written back in canonical form, parses
//! to the same commands.
#![no_main]

use mmkit_cli::trace::{check_trace, purge_step_line, Cmd, Commands};

/// `cmd` as one canonical trace line.
fn line(cmd: &Cmd) -> String {
    match cmd {
        Cmd::Space(s, e) => format!("space {s:#x} {e}"),
        Cmd::LazyMax(b) => format!("lazymax {b}"),
        Cmd::Cpus(n) => format!("cpus {n}"),
        Cmd::Vmalloc(s, e) => format!("vmalloc {s} {e:#x}"),
        Cmd::Alloc { id, size, align, range, cpu } => {
            let r = range.map_or(String::new(), |(s, e)| format!(" range {s} {e:#x}"));
            let c = cpu.map_or(String::new(), |c| format!(" cpu {c}"));
            format!("alloc {id} {size}{c} align {align}{r}")
        }
        Cmd::Free(id) => format!("free {id}"),
        Cmd::Lazy(id) => format!("lazy {id}"),
        Cmd::FreeAt(a) => format!("freeat {a:#x}"),
        Cmd::Purge => "purge".into(),
        Cmd::PurgeFull => "purge full".into(),
        Cmd::PurgeBegin(false) => "purge begin".into(),
        Cmd::PurgeBegin(true) => "purge full begin".into(),
        Cmd::PurgeNode(n) => format!("purge node {n}"),
        Cmd::PurgeWindow(false) => "purge window".into(),
        Cmd::PurgeWindow(true) => "purge full window".into(),
        Cmd::PurgeStep(step) => purge_step_line(*step),
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let lines = data.split(|&b| b == b'\n').count();
    let checked = check_trace(data);
    let streamed: Result<Vec<(usize, Cmd)>, _> = Commands::new(data).collect();
    match (&checked, &streamed) {
        (Ok(_), Ok(cmds)) => {
            let text: String = cmds.iter().map(|(_, c)| line(c) + "\n").collect();
            let again: Vec<Cmd> = Commands::new(text.as_bytes())
                .map(|r| r.expect("a canonical trace parses").1)
                .collect();
            let cmds: Vec<Cmd> = cmds.iter().map(|(_, c)| c.clone()).collect();
            assert_eq!(cmds, again, "round trip through {text:?}");
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "the two passes disagree");
            assert!(a.line >= 1 && a.line <= lines.max(1), "line {} of {lines}", a.line);
        }
        _ => panic!("check_trace {checked:?} but streaming {streamed:?}"),
    }
});
