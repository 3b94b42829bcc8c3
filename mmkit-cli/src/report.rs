//! Result tables: printed aligned on stdout, written as Markdown and JSON.

use std::fmt;

use serde::Serialize;

/// One table of an experiment's results.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// Printed above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Cells, already formatted.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with the given title and columns.
    pub fn new(title: impl Into<String>, header: &[&str]) -> Self {
        Table {
            title: title.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "row width");
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        w
    }

    /// The table as GitHub Markdown.
    pub fn markdown(&self) -> String {
        let mut s = format!("### {}\n\n| {} |\n|", self.title, self.header.join(" | "));
        for _ in &self.header {
            s.push_str("---|");
        }
        s.push('\n');
        for r in &self.rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.widths();
        writeln!(f, "{}", self.title)?;
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            for (i, c) in cells.iter().enumerate() {
                // First column left-aligned (names), the rest right (numbers).
                if i == 0 {
                    write!(f, "  {:<width$}", c, width = w[i])?;
                } else {
                    write!(f, "  {:>width$}", c, width = w[i])?;
                }
            }
            writeln!(f)
        };
        line(f, &self.header)?;
        let total: usize = w.iter().map(|x| x + 2).sum();
        writeln!(f, "  {}", "-".repeat(total.saturating_sub(2)))?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

/// Everything one experiment produced.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// The experiment's name.
    pub name: String,
    /// Tables, printed in order.
    pub tables: Vec<Table>,
    /// Free text printed after the tables (machine, scale, caveats).
    pub notes: Vec<String>,
    /// Machine-readable rows for `--json`.
    pub rows: Vec<serde_json::Value>,
    /// SVG plots for `--out`: (file name, SVG text).
    #[serde(skip)]
    pub plots: Vec<(String, String)>,
}

impl Report {
    /// The report as a Markdown section.
    pub fn markdown(&self) -> String {
        let mut s = format!("## {}\n\n", self.name);
        for t in &self.tables {
            s.push_str(&t.markdown());
            s.push('\n');
        }
        for n in &self.notes {
            s.push_str(&format!("- {n}\n"));
        }
        for (file, _) in &self.plots {
            s.push_str(&format!("\n![{file}]({file})\n"));
        }
        s
    }
}

/// Formats a ratio `base / new` as "12.3x".
pub fn ratio(base: f64, new: f64) -> String {
    if new <= 0.0 {
        return "-".into();
    }
    format!("{:.2}x", base / new)
}
