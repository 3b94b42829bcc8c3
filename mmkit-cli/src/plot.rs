//! SVG charts for the report: lines (a figure against a scale) and grouped
//! bars (a figure per case). Every chart has a title, axis labels with
//! units, and a legend. A logarithmic axis is drawn by plotting log10 of
//! the values on a linear axis whose ticks are labelled with the values.

use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// One axis: its label (with the unit) and whether it is logarithmic.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Label, with the unit: "ns per operation".
    pub label: String,
    /// Logarithmic (values must be positive; others are left out).
    pub log: bool,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            log: false,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            log: true,
        }
    }

    /// Where `v` goes on the drawn axis (None: not drawable).
    fn at(&self, v: f64) -> Option<f64> {
        match self.log {
            true if v > 0.0 && v.is_finite() => Some(v.log10()),
            true => None,
            false => v.is_finite().then_some(v),
        }
    }

    /// The value a drawn position stands for.
    fn value(&self, at: f64) -> f64 {
        if self.log {
            10f64.powf(at)
        } else {
            at
        }
    }
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's text.
    pub label: String,
    /// (x, y) points, in order of x.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed: a reference (the seed's figures) rather than a
    /// measurement.
    pub dashed: bool,
    /// Drawn thin and light: a bound (an interval's edge), not a figure.
    pub faint: bool,
}

impl Series {
    /// A measured series.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points,
            dashed: false,
            faint: false,
        }
    }

    /// A bound, such as an interval's edge (drawn thin and light).
    pub fn faint(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            faint: true,
            ..Series::new(label, points)
        }
    }

    /// A reference series (drawn dashed).
    pub fn reference(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            dashed: true,
            ..Series::new(label, points)
        }
    }
}

/// A chart: title, axes, and what it draws.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Printed above the chart.
    pub title: String,
    /// The horizontal axis (for bars: only its label is used).
    pub x: Axis,
    /// The vertical axis.
    pub y: Axis,
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;
type Coord = RangedCoordf64;

const SIZE: (u32, u32) = (960, 540);
const COLORS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Whether `v` sits on a whole number (a decade of a log axis, a case).
fn whole(v: f64) -> bool {
    (v - v.round()).abs() < 1e-6
}

/// A short label for a tick value: 1.5k, 20M, 0.25.
fn label(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = match a {
        _ if a >= 1e9 => (v / 1e9, "G"),
        _ if a >= 1e6 => (v / 1e6, "M"),
        _ if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let s = if x == x.round() {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    };
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}{unit}")
}

/// The label of a tick at drawn position `v` (a log axis labels decades
/// only).
fn tick(axis: &Axis, v: f64) -> String {
    match axis.log {
        true if !whole(v) => String::new(),
        _ => label(axis.value(v)),
    }
}

/// The drawn range of `vals` on `axis`, with a margin; `floor` forces a
/// linear axis to include 0.
fn range(axis: &Axis, vals: impl Iterator<Item = f64>, floor: bool) -> (f64, f64) {
    let drawn: Vec<f64> = vals.filter_map(|v| axis.at(v)).collect();
    let mut lo = drawn.iter().copied().fold(f64::INFINITY, f64::min);
    let mut hi = drawn.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if axis.log {
        return (lo.floor(), hi.ceil().max(lo.floor() + 1.0));
    }
    if floor {
        lo = lo.min(0.0);
    }
    // A flat series (all zero differences) still gets a readable axis.
    let pad = match hi - lo {
        span if span > 1e-12 => span * 0.08,
        _ => (hi.abs() * 0.5).max(0.01),
    };
    // Head room above the data for the legend.
    (
        if floor && lo >= 0.0 { lo } else { lo - pad },
        hi + 3.0 * pad,
    )
}

/// The corner of the plot area the legend hides the fewest points in (a
/// bar counts as its top: a corner above it is free).
fn corner(
    xr: (f64, f64),
    yr: (f64, f64),
    pts: impl Iterator<Item = (f64, f64)>,
) -> SeriesLabelPosition {
    let (w, h) = (xr.1 - xr.0, yr.1 - yr.0);
    let (mut counts, pts) = ([0usize; 4], pts.collect::<Vec<_>>());
    for (x, y) in pts {
        let (fx, fy) = ((x - xr.0) / w, (y - yr.0) / h);
        let (left, right, top, bottom) = (fx < 0.4, fx > 0.6, fy > 0.65, fy < 0.35);
        for (i, hit) in [left && top, right && top, right && bottom, left && bottom]
            .iter()
            .enumerate()
        {
            counts[i] += usize::from(*hit);
        }
    }
    let corners = [
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::LowerRight,
        SeriesLabelPosition::LowerLeft,
    ];
    let best = (0..4).min_by_key(|&i| counts[i]).unwrap_or(0);
    corners[best].clone()
}

/// Draws the frame (title, axes with their labels) and hands the chart to
/// `draw`; returns the SVG text.
fn frame(
    c: &Chart,
    xr: (f64, f64),
    yr: (f64, f64),
    x_names: Option<&[String]>,
    legend: SeriesLabelPosition,
    draw: impl FnOnce(&mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<Coord, Coord>>) -> Result<()>,
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&c.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(84)
            .build_cartesian_2d(xr.0..xr.1, yr.0..yr.1)?;
        let name_of = |v: &f64| match x_names {
            Some(names) if whole(*v) && *v >= 0.0 => {
                names.get(v.round() as usize).cloned().unwrap_or_default()
            }
            Some(_) => String::new(),
            None => tick(&c.x, *v),
        };
        chart
            .configure_mesh()
            .x_labels(x_names.map_or(10, |n| 2 * n.len() + 1))
            .y_labels(10)
            .x_desc(&c.x.label)
            .y_desc(&c.y.label)
            .x_label_formatter(&name_of)
            .y_label_formatter(&|v| tick(&c.y, *v))
            .axis_desc_style(("sans-serif", 17))
            .label_style(("sans-serif", 14))
            .light_line_style(WHITE)
            .draw()?;
        draw(&mut chart)?;
        chart
            .configure_series_labels()
            .position(legend)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// A line chart of `series`; returns the SVG text.
///
/// # Errors
/// Drawing failed (plotters' own errors).
pub fn lines(c: &Chart, series: &[Series]) -> Result<String> {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let xr = range(&c.x, pts().map(|p| p.0), false);
    let yr = range(&c.y, pts().map(|p| p.1), true);
    let drawn = pts().filter_map(|&(x, y)| Some((c.x.at(x)?, c.y.at(y)?)));
    frame(c, xr, yr, None, corner(xr, yr, drawn), |chart| {
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            // Many points (a time series): thinner lines; bounds light.
            let many = s.points.len() > 50;
            let style = match (s.faint, many) {
                (true, _) => color.mix(0.7).stroke_width(1),
                (false, true) => color.stroke_width(2),
                (false, false) => color.stroke_width(3),
            };
            let line: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter_map(|&(x, y)| Some((c.x.at(x)?, c.y.at(y)?)))
                .collect();
            let anno = if s.dashed {
                chart.draw_series(DashedLineSeries::new(line.clone(), 10, 6, style))?
            } else {
                chart.draw_series(LineSeries::new(line.clone(), style))?
            };
            // The legend's sample: dashed like the line, or one 24 px dash.
            let (dash, gap) = if s.dashed { (6, 4) } else { (24, 1) };
            anno.label(&s.label).legend(move |(x, y)| {
                DashedPathElement::new(vec![(x, y), (x + 24, y)], dash, gap, style)
            });
            if line.len() <= 16 {
                chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
            }
        }
        Ok(())
    })
}

/// Grouped bars: for each of `cases` (along x), one bar per group
/// (label, one value per case). Returns the SVG text.
///
/// # Errors
/// Drawing failed (plotters' own errors).
pub fn bars(c: &Chart, cases: &[String], groups: &[(String, Vec<f64>)]) -> Result<String> {
    let xr = (-0.5, cases.len().max(1) as f64 - 0.5);
    let yr = range(&c.y, groups.iter().flat_map(|g| g.1.iter().copied()), true);
    let base = if c.y.log { yr.0 } else { 0f64.max(yr.0) };
    let width = 0.8 / groups.len().max(1) as f64;
    // A bar covers its foot too: the corners below it are not free.
    let tops = groups.iter().flat_map(|g| {
        g.1.iter()
            .enumerate()
            .filter_map(|(i, &v)| Some((i as f64, c.y.at(v)?)))
    });
    let tops = tops.flat_map(|(x, y)| [(x, y), (x, yr.0)]);
    frame(c, xr, yr, Some(cases), corner(xr, yr, tops), |chart| {
        for (g, (name, vals)) in groups.iter().enumerate() {
            let color = COLORS[g % COLORS.len()];
            let rects = vals.iter().enumerate().filter_map(|(i, &v)| {
                let top = c.y.at(v)?;
                let x0 = i as f64 - 0.4 + g as f64 * width;
                Some(Rectangle::new(
                    [(x0, base), (x0 + width * 0.9, top)],
                    color.filled(),
                ))
            });
            chart.draw_series(rects)?.label(name).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled())
            });
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(label(1500.0), "1500");
        assert_eq!(label(20_000_000.0), "20M");
        assert_eq!(label(0.25), "0.25");
        assert_eq!(label(12_500.0), "12.5k");
    }

    #[test]
    fn charts_render_with_title_and_legend() {
        let c = Chart {
            title: "t".into(),
            x: Axis::log("threads"),
            y: Axis::log("ns per op"),
        };
        let s = [Series::new("a", vec![(1.0, 10.0), (8.0, 1000.0)])];
        let svg = lines(&c, &s).unwrap();
        assert!(svg.contains("<svg") && svg.contains("ns per op"));
        let svg = bars(
            &c,
            &["x".into(), "y".into()],
            &[("g".into(), vec![1.0, 2.0])],
        )
        .unwrap();
        assert!(svg.contains("<rect"));
    }
}
