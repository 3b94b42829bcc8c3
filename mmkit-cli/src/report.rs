//! Where results go besides the terminal: the `--json` file and the
//! `--out` report directory (`index.md`, `index.html`, one SVG per plot).
//! Both are opened before anything runs, so a bad path fails at once,
//! naming the path, instead of after the whole run.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::render::{esc, Report, Target};
use crate::run::Machine;

/// The output files of a run, opened (and so checked) before it starts.
#[derive(Debug, Default)]
pub struct Outputs {
    json: Option<(PathBuf, File)>,
    dir: Option<(PathBuf, File, File)>,
}

/// "PATH: why", for an output that cannot be written.
fn named(path: &Path, e: io::Error) -> String {
    format!("{}: {e}", path.display())
}

impl Outputs {
    /// Opens `json` for writing and creates `dir` with its `index.md` and
    /// `index.html`.
    ///
    /// # Errors
    /// A path that cannot be written, named in the message.
    pub fn open(json: Option<&Path>, dir: Option<&Path>) -> Result<Self, String> {
        // The directory first: the JSON file may go inside it.
        let dir = match dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| named(d, e))?;
                let open = |f: &str| File::create(d.join(f)).map_err(|e| named(&d.join(f), e));
                Some((d.to_path_buf(), open("index.md")?, open("index.html")?))
            }
            None => None,
        };
        let json = match json {
            Some(p) => Some((p.to_path_buf(), File::create(p).map_err(|e| named(p, e))?)),
            None => None,
        };
        Ok(Outputs { json, dir })
    }

    /// Writes `doc` as pretty JSON to the `--json` file, if any.
    ///
    /// # Errors
    /// Writing failed; the message names the file.
    pub fn write_json(&mut self, doc: &impl Serialize) -> Result<(), String> {
        let Some((path, file)) = &mut self.json else {
            return Ok(());
        };
        serde_json::to_writer_pretty(&mut *file, doc)
            .map_err(io::Error::from)
            .and_then(|()| file.write_all(b"\n"))
            .map_err(|e| named(path, e))
    }

    /// Writes the report directory, if any: every plot, `index.md` and
    /// `index.html`.
    ///
    /// # Errors
    /// Writing failed; the message names the file.
    pub fn write_dir(&mut self, page: &Page<'_>) -> Result<(), String> {
        let Some((dir, md, html)) = &mut self.dir else {
            return Ok(());
        };
        for p in page.reports.iter().flat_map(|(r, _)| &r.plots) {
            let path = dir.join(&p.file);
            std::fs::write(&path, &p.svg).map_err(|e| named(&path, e))?;
        }
        md.write_all(page.markdown().as_bytes())
            .map_err(|e| named(&dir.join("index.md"), e))?;
        html.write_all(page.html().as_bytes())
            .map_err(|e| named(&dir.join("index.html"), e))
    }
}

/// The report page: the machine, the command, every report with the
/// one-line description of its experiment.
pub struct Page<'a> {
    /// The machine the run measured.
    pub machine: &'a Machine,
    /// The command line that produced it.
    pub command: String,
    /// Each report and what its experiment reproduces.
    pub reports: Vec<(&'a Report, &'static str)>,
    /// A relative link to `docs/provenance.md`, when the report directory
    /// sits in the repository (as `results/` does).
    pub provenance: Option<String>,
}

/// The link from report directory `dir` to the repository's
/// `docs/provenance.md`, if `dir` sits at the repository's top.
pub fn provenance_link(dir: &Path) -> Option<String> {
    let link = "../docs/provenance.md";
    dir.join(link).is_file().then(|| link.to_string())
}

const INTRO: &str = "Each section is one experiment: the seed's published figures beside the \
    old design and the new one measured here. The seeds are the kernel patches mmkit follows, \
    described in docs/provenance.md of the mmkit repository. Times on a shared machine are \
    noisy: compare ratios within one run; a target reads met, NOT met or not evaluated.";

impl Page<'_> {
    /// The introduction, with the provenance page linked by `link`.
    fn intro(&self, link: impl Fn(&str) -> String) -> String {
        match &self.provenance {
            Some(l) => INTRO.replace("docs/provenance.md", &link(l)),
            None => INTRO.to_string(),
        }
    }

    fn targets(&self) -> impl Iterator<Item = (&str, &Target)> {
        self.reports
            .iter()
            .flat_map(|(r, _)| r.targets.iter().map(|t| (r.name.as_str(), t)))
    }

    /// The page as Markdown.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# mmkit experiments\n\nMachine: {} ({}). Command: `{}`.\n\n{}\n\n## Targets\n\n\
             | experiment | target | measured | verdict |\n|---|---|---|---|\n",
            self.machine,
            self.machine.os,
            self.command,
            self.intro(|l| format!("[docs/provenance.md]({l})"))
        );
        for (name, t) in self.targets() {
            let v = if t.met == Some(false) {
                "**NOT met**"
            } else {
                t.verdict()
            };
            let _ = writeln!(
                s,
                "| [{name}](#{name}) | {} | {} | {v} |",
                t.what, t.measured
            );
        }
        s.push('\n');
        for (r, about) in &self.reports {
            s.push_str(&r.markdown(about));
            s.push('\n');
        }
        s
    }

    /// The page as HTML (self-contained but for the SVG files beside it).
    pub fn html(&self) -> String {
        let mut s = format!(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>mmkit experiments</title>\n\
             <style>{STYLE}</style></head><body>\n<h1>mmkit experiments</h1>\n\
             <p>Machine: {} ({}). Command: <code>{}</code>.</p>\n<p>{}</p>\n<h2>Targets</h2>\n\
             <table><tr><th>experiment</th><th>target</th><th>measured</th><th>verdict</th></tr>\n",
            esc(&self.machine.to_string()),
            esc(&self.machine.os),
            esc(&self.command),
            self.intro(|l| format!("<a href=\"{l}\">docs/provenance.md</a>"))
        );
        for (name, t) in self.targets() {
            let class = if t.met == Some(false) {
                "missed"
            } else {
                "met"
            };
            let _ = writeln!(
                s,
                "<tr><td><a href=\"#{name}\">{name}</a></td><td>{}</td><td>{}</td>\
                 <td class=\"{class}\">{}</td></tr>",
                esc(&t.what),
                esc(&t.measured),
                t.verdict()
            );
        }
        s.push_str("</table>\n");
        for (r, about) in &self.reports {
            s.push_str(&r.html(about));
        }
        s.push_str("</body></html>\n");
        s
    }
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;\
    line-height:1.4}table{border-collapse:collapse;margin:1em 0;font-size:90%}\
    td,th{border:1px solid #ccc;padding:3px 8px}td{text-align:right}td:first-child{text-align:left}\
    th{background:#f0f0f0}img{max-width:100%}figcaption{font-style:italic;margin-bottom:2em}\
    .missed{color:#b00;font-weight:bold}.met{color:#070}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_path_fails_at_once_naming_it() {
        let e = Outputs::open(Some(Path::new("/nonexistent-dir/x.json")), None).unwrap_err();
        assert!(e.starts_with("/nonexistent-dir/x.json: "), "{e}");
        let e = Outputs::open(None, Some(Path::new("/proc/version/out"))).unwrap_err();
        assert!(e.contains("/proc/version/out"), "{e}");
    }
}
