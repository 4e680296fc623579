//! Plots of the suite's reports, as SVG or PNG by the file's extension:
//! lines (time per create against entries, as seed 000's figures) and
//! grouped bars (per-phase times, one bar per variant; seek distances).
//!
//! No system libraries: plotters renders PNG text with `ab_glyph` from a
//! TrueType font read at run time — `EXT4KIT_FONT`, else DejaVu Sans or
//! Liberation Sans where Debian installs them (`fonts-dejavu-core`).
//! Without one, text cannot be measured, so plotting fails with a message
//! naming the package.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One line of a line plot.
pub struct Series {
    /// Its legend.
    pub name: String,
    /// (x, y) in x order.
    pub points: Vec<(f64, f64)>,
}

/// A group of segments of a segment plot.
pub struct Segments {
    /// Its legend.
    pub name: String,
    /// (from, to) points.
    pub segments: Vec<((f64, f64), (f64, f64))>,
}

/// Grouped bars: per category, one bar per group.
pub struct Bars {
    /// Names under the x axis.
    pub categories: Vec<String>,
    /// (legend, one value per category).
    pub groups: Vec<(String, Vec<f64>)>,
}

const SIZE: (u32, u32) = (960, 560);
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Registers the font once per process.
fn font() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let r = DONE.get_or_init(|| {
        let env = std::env::var_os("EXT4KIT_FONT").map(std::path::PathBuf::from);
        let path = env
            .into_iter()
            .chain(FONTS.iter().map(Into::into))
            .find(|p| p.is_file())
            .ok_or("no TrueType font for plot text: install fonts-dejavu-core or set EXT4KIT_FONT=FILE.ttf")?;
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // plotters keeps a 'static reference; one font per process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{}: not a TrueType font plotters can read", path.display()))
    });
    r.clone().map_err(|e| anyhow!(e))
}

/// Draws with `f` into an SVG or PNG at `path`.
fn render(
    path: &Path,
    f: impl Fn(&DrawingArea<SVGBackend, Shift>) -> Result<()>,
    g: impl Fn(&DrawingArea<BitMapBackend, Shift>) -> Result<()>,
) -> Result<()> {
    font()?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            f(&root)?;
            root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            g(&root)?;
            root.present().map_err(|e| anyhow!("writing {}: {e}", path.display()))
        }
        _ => bail!("{}: a plot is written as .svg or .png", path.display()),
    }
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

/// The span of `v` with a margin, never empty.
fn range(v: impl Iterator<Item = f64>, from_zero: bool) -> std::ops::Range<f64> {
    let (mut lo, mut hi) = v.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    if lo > hi {
        (lo, hi) = (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-9);
    (lo - if from_zero { 0.0 } else { pad })..(hi + pad)
}

/// A legend entry and its polylines.
type PathGroup<'a> = (&'a str, Vec<Vec<(f64, f64)>>);

/// A line plot of `series` at `path`.
pub fn lines(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series]) -> Result<()> {
    let groups: Vec<PathGroup<'_>> = series
        .iter()
        .map(|s| (s.name.as_str(), vec![s.points.clone()]))
        .collect();
    paths(path, (title, x_desc, y_desc), &groups, (false, true))
}

/// Line segments, one colour per group: a file's extents as (logical,
/// physical) from their first block to one past their last, so a
/// contiguous file is one diagonal and every jump is a gap in it.
pub fn segments(path: &Path, title: &str, x_desc: &str, y_desc: &str, groups: &[Segments]) -> Result<()> {
    let groups: Vec<PathGroup<'_>> = groups
        .iter()
        .map(|g| (g.name.as_str(), g.segments.iter().map(|&(a, b)| vec![a, b]).collect()))
        .collect();
    paths(path, (title, x_desc, y_desc), &groups, (true, false))
}

/// Polylines, one colour and one legend entry per group; `from_zero`
/// says for x and y whether the axis starts at 0.
fn paths(
    path: &Path,
    (title, x_desc, y_desc): (&str, &str, &str),
    groups: &[PathGroup<'_>],
    from_zero: (bool, bool),
) -> Result<()> {
    let points = || groups.iter().flat_map(|g| g.1.iter().flatten());
    let xs = range(points().map(|p| p.0), from_zero.0);
    let ys = range(points().map(|p| p.1), from_zero.1);
    macro_rules! draw {
        ($root:expr) => {{
            let root = $root;
            root.fill(&WHITE).map_err(err)?;
            let mut chart = ChartBuilder::on(root)
                .caption(title, ("sans-serif", 22))
                .margin(14)
                .x_label_area_size(44)
                .y_label_area_size(90)
                .build_cartesian_2d(xs.clone(), ys.clone())
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .draw()
                .map_err(err)?;
            for (k, (name, lines)) in groups.iter().enumerate() {
                let colour = Palette99::pick(k).to_rgba();
                chart
                    .draw_series(
                        lines
                            .iter()
                            .map(|l| PathElement::new(l.clone(), colour.stroke_width(2))),
                    )
                    .map_err(err)?
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
            Ok(())
        }};
    }
    render(path, |r| draw!(r), |r| draw!(r))
}

/// Grouped bars at `path`.
pub fn bars(path: &Path, title: &str, y_desc: &str, b: &Bars) -> Result<()> {
    let n = b.categories.len().max(1);
    let groups = b.groups.len().max(1);
    let ys = range(b.groups.iter().flat_map(|g| g.1.iter().copied()), true);
    let width = 0.8 / groups as f64;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            b.categories.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    macro_rules! draw {
        ($root:expr) => {{
            let root = $root;
            root.fill(&WHITE).map_err(err)?;
            let mut chart = ChartBuilder::on(root)
                .caption(title, ("sans-serif", 22))
                .margin(14)
                .x_label_area_size(44)
                .y_label_area_size(70)
                .build_cartesian_2d(-0.5..(n as f64 - 0.5), ys.clone())
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&label)
                .y_desc(y_desc)
                .draw()
                .map_err(err)?;
            for (k, (name, values)) in b.groups.iter().enumerate() {
                let colour = Palette99::pick(k).to_rgba();
                let left = |i: usize| i as f64 - 0.4 + k as f64 * width;
                chart
                    .draw_series(
                        values
                            .iter()
                            .enumerate()
                            .map(|(i, &v)| Rectangle::new([(left(i), 0.0), (left(i) + width, v)], colour.filled())),
                    )
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
            Ok(())
        }};
    }
    render(path, |r| draw!(r), |r| draw!(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_bars_are_written_as_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let s = [Series {
            name: "create".into(),
            points: (1..20)
                .map(|i| (f64::from(i) * 1000.0, f64::from(i % 5) + 10.0))
                .collect(),
        }];
        let b = Bars {
            categories: vec!["write".into(), "read".into()],
            groups: vec![("base".into(), vec![3.0, 4.0]), ("ssd".into(), vec![1.0, 0.5])],
        };
        for ext in ["svg", "png"] {
            let l = dir.path().join(format!("l.{ext}"));
            let g = dir.path().join(format!("b.{ext}"));
            lines(&l, "µs per create", "entries", "µs", &s).unwrap();
            bars(&g, "phases", "ms", &b).unwrap();
            let seg = [Segments {
                name: "file".into(),
                segments: vec![((0.0, 100.0), (10.0, 110.0)), ((10.0, 500.0), (20.0, 510.0))],
            }];
            segments(
                &dir.path().join(format!("s.{ext}")),
                "layout",
                "logical",
                "physical",
                &seg,
            )
            .unwrap();
            let (l, g) = (std::fs::read(&l).unwrap(), std::fs::read(&g).unwrap());
            if ext == "svg" {
                let text = String::from_utf8(l).unwrap();
                assert!(text.contains("<svg") && text.contains("entries") && text.contains("create"));
                assert!(String::from_utf8(g).unwrap().contains("ssd"));
            } else {
                assert_eq!(&l[..8], b"\x89PNG\r\n\x1a\n");
                assert_eq!(&g[..8], b"\x89PNG\r\n\x1a\n");
            }
        }
        assert!(lines(&dir.path().join("x.gif"), "t", "x", "y", &s).is_err());
    }
}
