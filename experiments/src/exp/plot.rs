//! Line charts as PNG and SVG (plotters). Text needs a font: the first of a few common
//! TrueType files found at run time is registered; without one, charts are drawn without
//! text (axes, lines and colours only) and the CSV beside them carries the numbers.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Fonts tried in order (Debian/Ubuntu and Fedora locations).
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
/// Chart size, pixels.
const SIZE: (u32, u32) = (900, 540);

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y), drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Points drawn as dots and not joined (each run behind a line of medians).
    pub dots: Vec<(f64, f64)>,
}

impl Series {
    /// A line through the given points.
    pub fn line(name: String, points: Vec<(f64, f64)>) -> Series {
        Series {
            name,
            points,
            dots: Vec::new(),
        }
    }

    /// Repeated runs of a sweep: a line through the median (nearest rank) of the runs at
    /// each x, and every run as a dot, so that one run far from its repetitions shows.
    pub fn repetitions(name: String, runs: &[(f64, f64)]) -> Series {
        let mut dots = runs.to_vec();
        dots.sort_by(|a, b| a.0.total_cmp(&b.0));
        let points = dots
            .chunk_by(|a, b| a.0 == b.0)
            .filter_map(|at_x| {
                let ys: Vec<f64> = at_x.iter().map(|p| p.1).collect();
                Some((at_x[0].0, super::metrics::percentile(&ys, 50.0)?))
            })
            .collect();
        Series { name, points, dots }
    }
}

/// Axis texts and options.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Draw steps (CDFs) instead of straight segments.
    pub steps: bool,
}

/// Why a chart could not be written.
#[derive(Debug, thiserror::Error)]
#[error("plotting {path}: {reason}")]
pub struct PlotError {
    path: String,
    reason: String,
}

fn have_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        FONT_CANDIDATES.iter().any(|p| {
            std::fs::read(p).ok().is_some_and(|bytes| {
                // The registry keeps fonts for the life of the process.
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok()
            })
        })
    })
}

fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter().chain(&s.dots))
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0f64, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    ((x0, x1), (y0, y1 * 1.05))
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    chart: &Chart<'_>,
    series: &[Series],
) -> Result<(), String> {
    let text = have_font();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let ((x0, x1), (y0, y1)) = bounds(series);
    let mut b = ChartBuilder::on(&root);
    b.margin(15);
    if text {
        b.caption(chart.title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(70);
    } else {
        b.x_label_area_size(5).y_label_area_size(5);
    }
    let mut c = b
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| e.to_string())?;
    let mut mesh = c.configure_mesh();
    if text {
        mesh.x_desc(chart.x_label).y_desc(chart.y_label);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut pts = Vec::with_capacity(s.points.len() * 2);
        for (k, &(x, y)) in s.points.iter().enumerate() {
            if chart.steps && k > 0 {
                pts.push((x, s.points[k - 1].1));
            }
            pts.push((x, y));
        }
        c.draw_series(s.dots.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
        let drawn = c
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        if text {
            drawn.label(s.name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    if text && !series.is_empty() {
        c.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// Writes `<stem>.png` and `<stem>.svg`.
pub fn line_chart(stem: &Path, chart: &Chart<'_>, series: &[Series]) -> Result<(), PlotError> {
    for ext in ["png", "svg"] {
        let path = stem.with_extension(ext);
        let result = if ext == "png" {
            draw(
                BitMapBackend::new(&path, SIZE).into_drawing_area(),
                chart,
                series,
            )
        } else {
            draw(
                SVGBackend::new(&path, SIZE).into_drawing_area(),
                chart,
                series,
            )
        };
        result.map_err(|reason| PlotError {
            path: path.display().to_string(),
            reason,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("ccp-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let stem = dir.join("chart");
        let series = [
            Series::line("a".into(), vec![(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)]),
            Series::line("b".into(), vec![]),
            Series::repetitions("c".into(), &[(0.0, 0.5), (1.0, 0.9), (0.0, 0.2)]),
        ];
        let chart = Chart {
            title: "t",
            x_label: "x",
            y_label: "y",
            steps: true,
        };
        line_chart(&stem, &chart, &series).expect("plots");
        let png = std::fs::read(stem.with_extension("png")).expect("png written");
        assert_eq!(&png[1..4], b"PNG");
        let svg = std::fs::read_to_string(stem.with_extension("svg")).expect("svg written");
        assert!(svg.contains("<svg"));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn repetitions_draw_the_median_line_and_every_run() {
        let runs = [
            (2.0, 0.93),
            (1.0, 0.90),
            (2.0, 0.315),
            (1.0, 0.91),
            (2.0, 1.4),
        ];
        let s = Series::repetitions("proteus-s".into(), &runs);
        assert_eq!(s.points, vec![(1.0, 0.90), (2.0, 0.93)]);
        assert_eq!(s.dots.len(), runs.len());
        assert!(s.dots.contains(&(2.0, 0.315)));
        let (_, (_, y1)) = bounds(std::slice::from_ref(&s));
        assert!(y1 >= 1.4, "the axis reaches the outlying run");
    }
}
