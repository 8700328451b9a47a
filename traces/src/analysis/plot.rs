//! Figures for `gpuless analyze --plot DIR` (SVG and PNG, plotters): sync points over the call
//! timeline weighted by bytes transferred, and the ECDF of segment sizes, one line per policy.
//!
//! Text needs a TrueType font: `GPULESS_FONT`, else common system font paths, else the first
//! `.ttf`/`.otf` under the system font directories. Without any, the figures are drawn without
//! text and [`PlotOutput::warnings`] says so.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::TraceAnalysis;

/// What [`write_plots`] produced.
#[derive(Debug, Clone, Default)]
pub struct PlotOutput {
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Degradations (no font found, ...).
    pub warnings: Vec<String>,
}

/// Errors while drawing.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Creating the output directory failed.
    #[error("creating {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// plotters failed.
    #[error("drawing {path}: {reason}")]
    Draw {
        /// The figure.
        path: PathBuf,
        /// What plotters said.
        reason: String,
    },
}

const COLORS: [RGBColor; 3] = [RGBColor(214, 39, 40), RGBColor(31, 119, 180), RGBColor(44, 160, 44)];

const CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

fn find_fonts(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    if depth == 0 || out.len() > 64 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).take(4096).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            find_fonts(&p, depth - 1, out);
        } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf") || e.eq_ignore_ascii_case("otf")) {
            out.push(p);
        }
    }
}

/// Register a font for plotters once per process; `false` when none could be found.
fn ensure_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        if std::env::var_os("GPULESS_NO_FONT").is_some() {
            return false;
        }
        let mut paths: Vec<PathBuf> = std::env::var_os("GPULESS_FONT").map(PathBuf::from).into_iter().collect();
        paths.extend(CANDIDATES.iter().map(PathBuf::from));
        let mut found = Vec::new();
        for d in ["/usr/share/fonts", "/usr/local/share/fonts"] {
            find_fonts(Path::new(d), 4, &mut found);
        }
        paths.extend(found);
        for p in paths {
            let Ok(m) = std::fs::metadata(&p) else {
                continue;
            };
            if !m.is_file() || m.len() > 32 << 20 {
                continue;
            }
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
        false
    })
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn human(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.0} {}", units.get(i).unwrap_or(&"B"))
}

fn timeline<DB: DrawingBackend>(a: &TraceAnalysis, root: DrawingArea<DB, Shift>, text: bool) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let calls = a.sync.iter().map(|r| r.calls).max().unwrap_or(0).max(1);
    let n = a.sync.len() as f64;
    let max_bytes = a
        .sync
        .iter()
        .flat_map(|r| r.timeline.bins.iter().map(|b| b.bytes_up.saturating_add(b.bytes_down)))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let mut b = ChartBuilder::on(&root);
    b.margin(16);
    if text {
        let title =
            format!("Sync points over the call timeline (area ~ bytes moved; largest bin {})", human(max_bytes));
        b.caption(title, ("sans-serif", 20)).x_label_area_size(40).y_label_area_size(110);
    }
    let mut chart = b.build_cartesian_2d(0f64..calls as f64, -0.5f64..n - 0.5)?;
    let names: Vec<&str> = a.sync.iter().map(|r| r.policy).collect();
    let label = |y: &f64| {
        let i = y.round();
        if (y - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).map(|s| s.to_string()).unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_y_mesh().y_labels(names.len());
    if text {
        mesh.x_desc("call index")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&label)
            .light_line_style(WHITE);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    for (row, r) in a.sync.iter().enumerate() {
        let color = COLORS.get(row % COLORS.len()).copied().unwrap_or(BLACK);
        let w = r.timeline.bin_width as f64;
        chart.draw_series(r.timeline.bins.iter().filter(|b| b.syncs > 0).map(|b| {
            let bytes = b.bytes_up.saturating_add(b.bytes_down) as f64;
            let radius = 2.0 + 14.0 * ((1.0 + bytes).ln() / (1.0 + max_bytes).ln()).sqrt();
            Circle::new((b.first_call as f64 + w / 2.0, row as f64), radius as i32, color.mix(0.45).filled())
        }))?;
    }
    root.present()?;
    Ok(())
}

fn ecdf<DB: DrawingBackend>(a: &TraceAnalysis, root: DrawingArea<DB, Shift>, text: bool) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let max = a.sync.iter().map(|r| r.segments.max).max().unwrap_or(1).max(2) as f64;
    let mut b = ChartBuilder::on(&root);
    b.margin(16);
    if text {
        b.caption("Segment sizes (calls per round trip), ECDF", ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(50);
    }
    let mut chart = b.build_cartesian_2d((1f64..max * 1.2).log_scale(), 0f64..1.02)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("calls per segment").y_desc("fraction of segments").x_label_formatter(&|x| format!("{x:.0}"));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    for (i, r) in a.sync.iter().enumerate() {
        let color = COLORS.get(i % COLORS.len()).copied().unwrap_or(BLACK);
        let mut pts = vec![(1f64, 0f64)];
        let mut prev = 0.0;
        for p in &r.segments.ecdf {
            pts.push((p.size as f64, prev));
            pts.push((p.size as f64, p.fraction));
            prev = p.fraction;
        }
        pts.push((max * 1.2, prev));
        let s = chart.draw_series(LineSeries::new(pts, color.stroke_width(2)))?;
        if text {
            let label = format!("{} ({} syncs)", r.policy, r.syncs);
            s.label(label).legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Write `sync-timeline.{svg,png}` and `segment-ecdf.{svg,png}` into `dir`.
pub fn write_plots(a: &TraceAnalysis, dir: &Path) -> Result<PlotOutput, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Io { path: dir.to_path_buf(), source })?;
    let mut out = PlotOutput::default();
    let text = ensure_font();
    if !text {
        out.warnings.push("no TrueType font found (set GPULESS_FONT=/path/to/font.ttf): figures have no text".into());
    }
    let draw = |name: &str, which: u8, out: &mut PlotOutput| -> Result<(), PlotError> {
        let p = dir.join(format!("{name}.svg"));
        let area = SVGBackend::new(&p, (1000, 480)).into_drawing_area();
        let r = if which == 0 { timeline(a, area, text) } else { ecdf(a, area, text) };
        r.map_err(|e| PlotError::Draw { path: p.clone(), reason: e.to_string() })?;
        out.files.push(p);
        let p = dir.join(format!("{name}.png"));
        let area = BitMapBackend::new(&p, (1000, 480)).into_drawing_area();
        let r = if which == 0 { timeline(a, area, text) } else { ecdf(a, area, text) };
        r.map_err(|e| PlotError::Draw { path: p.clone(), reason: e.to_string() })?;
        out.files.push(p);
        Ok(())
    };
    draw("sync-timeline", 0, &mut out)?;
    draw("segment-ecdf", 1, &mut out)?;
    Ok(out)
}
