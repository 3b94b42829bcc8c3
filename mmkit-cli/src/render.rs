//! One path for results: experiments and bench workloads build typed rows
//! (`#[derive(Serialize)]` structs); a [`Table`] names the columns to show
//! and how to format each; this module renders the same rows as the
//! terminal table, the JSON, and the Markdown and HTML report.
//!
//! ```text
//!  typed rows ──serialize──> Table { rows: JSON values }  ──> terminal (≤ 120 columns)
//!                                 │  + Col { key, head, Fmt }   ──> --json
//!                                 └─────────────────────────────> index.md / index.html
//! ```

use std::fmt::{self, Write as _};

use serde::Serialize;
use serde_json::Value;

/// How a column shows its value (every number is formatted here, once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fmt {
    /// A string, or an integer as is.
    Text,
    /// A number with this many decimals.
    Dec(usize),
    /// A number: 2 decimals below 10, none above.
    Auto,
    /// A ratio: "3.25x".
    Ratio,
    /// A percentage with this many decimals: "99.2%".
    Pct(usize),
    /// A signed number with this many decimals: "+0.0012".
    Signed(usize),
    /// A [`crate::stats::MeanSd`]: "12.3 ± 0.4".
    MeanSd(usize),
    /// An interval `{lo, hi}`: "[-0.0012, +0.0003]".
    Interval(usize),
    /// A [`crate::stats::Spread`]: "12.3 (11.0-19.2)", median (min-max).
    Spread(usize),
}

/// One column: the row field it shows, its heading, its format.
#[derive(Debug, Clone, Copy)]
pub struct Col {
    /// The field name in the serialized row; `a.b` is field `b` of `a`.
    pub key: &'static str,
    /// The heading, with the unit where there is one.
    pub head: &'static str,
    /// How the value is written.
    pub fmt: Fmt,
}

/// A column (for `const` column lists).
pub const fn col(key: &'static str, head: &'static str, fmt: Fmt) -> Col {
    Col { key, head, fmt }
}

/// A table: a title, its columns, and typed rows (kept serialized, so the
/// JSON is exactly what the table shows, unrounded).
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// Printed above the table.
    pub title: String,
    /// The columns shown (keys and headings).
    #[serde(skip)]
    pub cols: Vec<Col>,
    /// The rows, as serialized.
    pub rows: Vec<Value>,
}

/// The widest a terminal table may be.
pub const MAX_WIDTH: usize = 120;

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// `x` with `d` decimals, or "-" when it is not a number.
fn fixed(x: f64, d: usize) -> String {
    if x.is_finite() {
        format!("{x:.d$}")
    } else {
        "-".into()
    }
}

impl Fmt {
    /// The cell for `v`.
    pub fn cell(self, v: &Value) -> String {
        let x = v.as_f64().unwrap_or(f64::NAN);
        match (self, v) {
            (_, Value::Null) => "-".into(),
            (_, Value::String(s)) => s.clone(),
            (_, Value::Bool(b)) => if *b { "yes" } else { "no" }.into(),
            (Fmt::Text, _) => v.to_string(),
            (Fmt::Dec(d), _) => fixed(x, d),
            (Fmt::Auto, _) => fixed(x, if x.abs() < 10.0 { 2 } else { 0 }),
            (Fmt::Ratio, _) => format!("{}x", fixed(x, 2)),
            (Fmt::Pct(d), _) => format!("{}%", fixed(x, d)),
            (Fmt::Signed(d), _) if x.is_finite() => format!("{x:+.d$}"),
            (Fmt::Signed(_), _) => "-".into(),
            (Fmt::MeanSd(d), _) => match num(v, "n") {
                0.0 => "-".into(),
                _ => format!("{} ± {}", fixed(num(v, "mean"), d), fixed(num(v, "sd"), d)),
            },
            (Fmt::Interval(d), _) => match (num(v, "lo"), num(v, "hi")) {
                (lo, hi) if lo.is_finite() && hi.is_finite() => format!("[{lo:+.d$}, {hi:+.d$}]"),
                _ => "-".into(),
            },
            (Fmt::Spread(d), _) if num(v, "runs") > 1.0 => format!(
                "{} ({}-{})",
                fixed(num(v, "median"), d),
                fixed(num(v, "min"), d),
                fixed(num(v, "max"), d)
            ),
            (Fmt::Spread(d), _) => fixed(num(v, "median"), d),
        }
    }
}

impl Table {
    /// A table of `rows`, showing `cols`.
    pub fn of<R: Serialize>(title: impl Into<String>, cols: &[Col], rows: &[R]) -> Self {
        Table {
            title: title.into(),
            cols: cols.to_vec(),
            rows: rows
                .iter()
                .map(|r| serde_json::to_value(r).expect("rows are plain structs"))
                .collect(),
        }
    }

    /// Every row's cells, formatted.
    pub fn cells(&self) -> Vec<Vec<String>> {
        let none = Value::Null;
        let field = |r: &'_ Value, key: &str| {
            let mut v = r;
            for part in key.split('.') {
                v = v.get(part).unwrap_or(&none);
            }
            v.clone()
        };
        self.rows
            .iter()
            .map(|r| {
                self.cols
                    .iter()
                    .map(|c| c.fmt.cell(&field(r, c.key)))
                    .collect()
            })
            .collect()
    }

    /// The table as GitHub Markdown.
    pub fn markdown(&self) -> String {
        let heads: Vec<&str> = self.cols.iter().map(|c| c.head).collect();
        let mut s = format!("### {}\n\n| {} |\n|", self.title, heads.join(" | "));
        s.push_str(&"---|".repeat(heads.len()));
        s.push('\n');
        for r in self.cells() {
            let r: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }

    /// The table as HTML.
    pub fn html(&self) -> String {
        let mut s = format!("<h3>{}</h3>\n<table>\n<tr>", esc(&self.title));
        for c in &self.cols {
            let _ = write!(s, "<th>{}</th>", esc(c.head));
        }
        s.push_str("</tr>\n");
        for r in self.cells() {
            s.push_str("<tr>");
            for c in r {
                let _ = write!(s, "<td>{}</td>", esc(&c));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        s
    }
}

/// Splits `text` into lines of at most `width` characters at spaces (a
/// longer word stays whole).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

fn longest_word(s: &str) -> usize {
    s.split(' ').map(|w| w.chars().count()).max().unwrap_or(0)
}

impl fmt::Display for Table {
    /// Aligned columns, the first left-aligned (names), the rest right
    /// (numbers); headings wrap onto several lines when the table would
    /// otherwise be wider than [`MAX_WIDTH`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cells = self.cells();
        let data = |i: usize| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        };
        let full: Vec<usize> = (0..self.cols.len())
            .map(|i| data(i).max(self.cols[i].head.chars().count()))
            .collect();
        let wide = full.iter().map(|w| w + 2).sum::<usize>() > MAX_WIDTH;
        let w: Vec<usize> = match wide {
            true => (0..self.cols.len())
                .map(|i| data(i).max(longest_word(self.cols[i].head)).max(6))
                .collect(),
            false => full,
        };
        let left: Vec<bool> = (0..w.len()).map(|i| i == 0 || words(&cells, i)).collect();
        for line in wrap(&self.title, MAX_WIDTH) {
            writeln!(f, "{line}")?;
        }
        let heads: Vec<Vec<String>> = self
            .cols
            .iter()
            .zip(&w)
            .map(|(c, &w)| wrap(c.head, w))
            .collect();
        let depth = heads.iter().map(Vec::len).max().unwrap_or(1);
        for k in 0..depth {
            // Bottom-aligned headings: short ones sit on the last line.
            let line: Vec<String> = heads
                .iter()
                .map(|h| {
                    h.get((k + h.len()).wrapping_sub(depth))
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            row(f, &line, &w, &left)?;
        }
        let total: usize = w.iter().map(|x| x + 2).sum();
        writeln!(f, "  {}", "-".repeat(total.saturating_sub(2)))?;
        for r in &cells {
            row(f, r, &w, &left)?;
        }
        Ok(())
    }
}

/// Whether column `i` holds words (left-aligned) rather than numbers.
fn words(cells: &[Vec<String>], i: usize) -> bool {
    cells
        .iter()
        .any(|r| r[i].chars().next().is_some_and(char::is_alphabetic))
}

fn row(f: &mut fmt::Formatter<'_>, cells: &[String], w: &[usize], left: &[bool]) -> fmt::Result {
    let mut line = String::new();
    for (i, c) in cells.iter().enumerate() {
        if left[i] {
            let _ = write!(line, "  {:<width$}", c, width = w[i]);
        } else {
            let _ = write!(line, "  {:>width$}", c, width = w[i]);
        }
    }
    writeln!(f, "{}", line.trim_end())
}

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A target an experiment checks its measurement against.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is asked: "bitmap free spread <= 2x".
    pub what: String,
    /// What was measured: "1.3x".
    pub measured: String,
    /// Whether it was met; `None`: not evaluated at this scale.
    pub met: Option<bool>,
}

impl Target {
    /// A target checked on a measurement.
    pub fn new(what: impl Into<String>, measured: impl Into<String>, met: bool) -> Self {
        Target {
            what: what.into(),
            measured: measured.into(),
            met: Some(met),
        }
    }

    /// A target this run could not evaluate, and why.
    pub fn skipped(what: impl Into<String>, why: impl Into<String>) -> Self {
        Target {
            what: what.into(),
            measured: why.into(),
            met: None,
        }
    }

    /// "met", "NOT met" or "not evaluated": the same words everywhere.
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not evaluated",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "target: {}: {}: {}",
            self.what,
            self.measured,
            self.verdict()
        )
    }
}

/// A plot of a report: its file name, what it shows, the SVG.
#[derive(Debug, Clone)]
pub struct Plot {
    /// File name in the report directory.
    pub file: String,
    /// One sentence: what the picture shows and how to read it.
    pub caption: String,
    /// The SVG text.
    pub svg: String,
}

/// Everything one experiment or bench workload produced.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// The experiment's name.
    pub name: String,
    /// Tables, printed in order.
    pub tables: Vec<Table>,
    /// The targets, each met or NOT met.
    pub targets: Vec<Target>,
    /// Free text printed after the tables (scale, method, caveats).
    pub notes: Vec<String>,
    /// Per-run rows for `--json` only (too many to print).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raw: Vec<Table>,
    /// SVG plots for the report directory.
    #[serde(skip)]
    pub plots: Vec<Plot>,
}

impl Report {
    /// An empty report named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Report {
            name: name.into(),
            ..Report::default()
        }
    }

    /// Adds a plot, or a note saying why it could not be drawn.
    pub fn plot(
        &mut self,
        file: &str,
        caption: impl Into<String>,
        svg: Result<String, Box<dyn std::error::Error>>,
    ) {
        match svg {
            Ok(svg) => self.plots.push(Plot {
                file: file.into(),
                caption: caption.into(),
                svg,
            }),
            Err(e) => self.notes.push(format!("plot {file} failed: {e}")),
        }
    }

    /// The tables, targets and notes as the terminal shows them.
    pub fn terminal(&self) -> String {
        let mut s = String::new();
        for t in &self.tables {
            let _ = write!(s, "\n{t}");
        }
        if !self.targets.is_empty() || !self.notes.is_empty() {
            s.push('\n');
        }
        let items = self.targets.iter().map(ToString::to_string);
        for item in items.chain(self.notes.iter().cloned()) {
            let mut lines = wrap(&item, MAX_WIDTH - 4).into_iter();
            let _ = writeln!(s, "  * {}", lines.next().unwrap_or_default());
            for l in lines {
                let _ = writeln!(s, "    {l}");
            }
        }
        s
    }

    /// The report as a Markdown section (level-2 heading).
    pub fn markdown(&self, about: &str) -> String {
        let mut s = format!("## {}\n\n{about}\n\n", self.name);
        for t in &self.tables {
            s.push_str(&t.markdown());
            s.push('\n');
        }
        for t in &self.targets {
            let v = match t.met {
                Some(false) => "**NOT met**",
                _ => t.verdict(),
            };
            let _ = writeln!(s, "- target: {}: {}: {v}", t.what, t.measured);
        }
        for n in &self.notes {
            let _ = writeln!(s, "- {n}");
        }
        for p in &self.plots {
            let _ = write!(s, "\n![{}]({})\n\n*{}*\n", p.file, p.file, p.caption);
        }
        s
    }

    /// The report as an HTML section.
    pub fn html(&self, about: &str) -> String {
        let id = self.name.replace(' ', "-");
        let mut s = format!(
            "<h2 id=\"{id}\">{}</h2>\n<p>{}</p>\n",
            esc(&self.name),
            esc(about)
        );
        for t in &self.tables {
            s.push_str(&t.html());
        }
        s.push_str("<ul>\n");
        for t in &self.targets {
            let class = if t.met == Some(false) {
                "missed"
            } else {
                "met"
            };
            let _ = writeln!(
                s,
                "<li>target: {}: {}: <span class=\"{class}\">{}</span></li>",
                esc(&t.what),
                esc(&t.measured),
                t.verdict()
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "<li>{}</li>", esc(n));
        }
        s.push_str("</ul>\n");
        for p in &self.plots {
            let _ = writeln!(
                s,
                "<figure><img src=\"{}\" alt=\"{}\"><figcaption>{}</figcaption></figure>",
                esc(&p.file),
                esc(&p.file),
                esc(&p.caption)
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{MeanSd, Spread};

    #[derive(Serialize)]
    struct R {
        name: &'static str,
        ms: f64,
        ratio: Option<f64>,
        spread: Spread,
        m: MeanSd,
    }

    const COLS: [Col; 5] = [
        col("name", "test", Fmt::Text),
        col("ms", "time ms", Fmt::Dec(1)),
        col("ratio", "old/new", Fmt::Ratio),
        col("spread", "median (min-max)", Fmt::Spread(1)),
        col("m", "mean ± sd", Fmt::MeanSd(2)),
    ];

    #[test]
    fn one_row_gives_the_cells_and_the_json() {
        let r = R {
            name: "a",
            ms: 1.25,
            ratio: None,
            spread: Spread::of(&[3.0, 1.0, 2.0]),
            m: MeanSd::of(&[]),
        };
        let t = Table::of("t", &COLS, &[r]);
        assert_eq!(t.cells()[0], ["a", "1.2", "-", "2.0 (1.0-3.0)", "-"]);
        assert_eq!(t.rows[0]["ms"], 1.25);
    }

    #[test]
    fn a_wide_table_wraps_its_headings() {
        const WIDE: [Col; 12] = [col("name", "a very long heading indeed", Fmt::Text); 12];
        let t = Table::of("t", &WIDE, &[serde_json::json!({"name": "x"})]);
        let text = t.to_string();
        assert!(
            text.lines().all(|l| l.chars().count() <= MAX_WIDTH),
            "{text}"
        );
    }

    #[test]
    fn targets_use_the_same_words() {
        assert!(Target::new("x", "1", false)
            .to_string()
            .ends_with(": NOT met"));
        assert!(Target::new("x", "1", true).to_string().ends_with(": met"));
        assert!(Target::skipped("x", "too small")
            .to_string()
            .ends_with("not evaluated"));
    }
}
