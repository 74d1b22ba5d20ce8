//! Plots (PNG and SVG, `plotters`): the coordinate space with super peers and clusters, and
//! convergence over time.
//!
//! The 8-dimensional Vivaldi space is shown on its first two principal components (computed
//! by power iteration on a sample), in milliseconds. Text needs a font: we register the first
//! TrueType font found among common system paths (DejaVu, Liberation, Noto) through plotters'
//! `ab_glyph` backend; with none found the plots are drawn without any text (shapes only) and a
//! warning is printed, so a machine without fonts still gets its pictures.

use super::protocol::RoundStat;
use super::world::World;
use overlay::stats::Sample;
use overlay::superpeer::point::DIMS;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
];

/// Registers a system font once; false if none was found.
pub fn init_fonts() -> bool {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DONE.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        eprintln!("peerage-lab: no TrueType font found; plots are drawn without text");
        false
    })
}

/// Two principal axes of the coordinate space.
pub struct Pca {
    mean: [f64; DIMS],
    axes: [[f64; DIMS]; 2],
}

impl Pca {
    pub fn fit(w: &World) -> Pca {
        let n = w.len();
        let step = (n / 20_000).max(1);
        let pts: Vec<[f64; DIMS]> =
            (0..n).step_by(step).map(|i| std::array::from_fn(|d| w.points[i].x[d] as f64)).collect();
        let m = pts.len().max(1) as f64;
        let mut mean = [0f64; DIMS];
        for p in &pts {
            for d in 0..DIMS {
                mean[d] += p[d] / m;
            }
        }
        let mut cov = [[0f64; DIMS]; DIMS];
        for p in &pts {
            for a in 0..DIMS {
                for b in 0..DIMS {
                    cov[a][b] += (p[a] - mean[a]) * (p[b] - mean[b]) / m;
                }
            }
        }
        let mut axes = [[0f64; DIMS]; 2];
        for (k, axis) in axes.iter_mut().enumerate() {
            let mut v = [1f64; DIMS];
            v[k % DIMS] += 1.0;
            for _ in 0..200 {
                let mut nv = [0f64; DIMS];
                for a in 0..DIMS {
                    for b in 0..DIMS {
                        nv[a] += cov[a][b] * v[b];
                    }
                }
                let norm = nv.iter().map(|x| x * x).sum::<f64>().sqrt();
                if norm <= 0.0 {
                    break;
                }
                v = nv.map(|x| x / norm);
            }
            let lambda: f64 = (0..DIMS).map(|a| (0..DIMS).map(|b| v[a] * cov[a][b] * v[b]).sum::<f64>()).sum();
            for a in 0..DIMS {
                for b in 0..DIMS {
                    cov[a][b] -= lambda * v[a] * v[b];
                }
            }
            *axis = v;
        }
        Pca { mean, axes }
    }

    /// Projection of node `i`, ms.
    pub fn project(&self, w: &World, i: u32) -> (f64, f64) {
        let p = &w.points[i as usize];
        let f = |ax: &[f64; DIMS]| (0..DIMS).map(|d| (p.x[d] as f64 - self.mean[d]) * ax[d]).sum::<f64>() * 1000.0;
        (f(&self.axes[0]), f(&self.axes[1]))
    }
}

/// One panel of the map: a title, super peers and each node's head.
pub struct MapPanel<'a> {
    pub title: String,
    pub heads: &'a [u32],
    pub head_of: &'a [u32],
}

fn colour(h: u32) -> HSLColor {
    let x = overlay::latency::sample::mix64(h as u64 ^ 0x9e37_79b9);
    HSLColor((x % 360) as f64 / 360.0, 0.75, 0.45)
}

fn draw_map<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    w: &World,
    pca: &Pca,
    panels: &[MapPanel],
    text: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let n = w.len();
    let step = (n / 8000).max(1);
    let sample: Vec<u32> = (0..n as u32).step_by(step).collect();
    let proj: Vec<(f64, f64)> = sample.iter().map(|&i| pca.project(w, i)).collect();
    // The axes span the middle 99 % of the sampled points (a few far outliers would squash
    // the map), with the project's one percentile convention (`overlay::stats`).
    let range = |v: Vec<f64>| -> anyhow::Result<(f64, f64)> {
        let s = Sample::new(v)?;
        match (s.quantile(0.005), s.quantile(0.995)) {
            (Some(lo), Some(hi)) => Ok((lo, hi)),
            _ => Ok((-1.0, 1.0)),
        }
    };
    let (x0, x1) = range(proj.iter().map(|p| p.0).collect())?;
    let (y0, y1) = range(proj.iter().map(|p| p.1).collect())?;
    let pad = |a: f64, b: f64| ((b - a) * 0.05).max(1e-3);
    let xr = (x0 - pad(x0, x1))..(x1 + pad(x0, x1));
    let yr = (y0 - pad(y0, y1))..(y1 + pad(y0, y1));
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols);
    let areas = root.split_evenly((rows, cols));
    for (area, panel) in areas.iter().zip(panels) {
        let mut b = ChartBuilder::on(area);
        b.margin(8);
        if text {
            b.caption(&panel.title, ("sans-serif", 18)).x_label_area_size(28).y_label_area_size(40);
        }
        let mut chart = b.build_cartesian_2d(xr.clone(), yr.clone()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if text {
            chart
                .configure_mesh()
                .x_desc("principal axis 1 (ms)")
                .y_desc("axis 2 (ms)")
                .label_style(("sans-serif", 12))
                .draw()
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        let inside = |p: &(f64, f64)| xr.contains(&p.0) && yr.contains(&p.1);
        chart
            .draw_series(sample.iter().zip(&proj).filter(|(_, p)| inside(p)).filter_map(|(&i, p)| {
                let h = panel.head_of[i as usize];
                (h != i && h != u32::MAX).then(|| Circle::new(*p, 1, colour(h).filled()))
            }))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let hs: Vec<(f64, f64)> =
            panel.heads.iter().take(3000).map(|&h| pca.project(w, h)).filter(|p| inside(p)).collect();
        chart
            .draw_series(hs.iter().map(|p| Cross::new(*p, 3, BLACK.stroke_width(1))))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// Writes `<stem>.png` and `<stem>.svg`: the coordinate space, one panel per method.
pub fn map(dir: &Path, stem: &str, w: &World, pca: &Pca, panels: &[MapPanel]) -> anyhow::Result<()> {
    let text = init_fonts();
    let png = dir.join(format!("{stem}.png"));
    draw_map(BitMapBackend::new(&png, (1100, 1000)).into_drawing_area(), w, pca, panels, text)?;
    let svg = dir.join(format!("{stem}.svg"));
    draw_map(SVGBackend::new(&svg, (1100, 1000)).into_drawing_area(), w, pca, panels, text)?;
    Ok(())
}

/// A convergence series: a name and its rounds.
pub struct Series<'a> {
    pub name: String,
    pub rounds: &'a [RoundStat],
}

fn draw_convergence<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &[Series],
    baselines: &[(String, f64)],
    text: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(360);
    let tmax = series.iter().flat_map(|s| s.rounds.iter().map(|r| r.time_s)).fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.rounds.iter().map(|r| r.sample_rtt_ms))
        .chain(baselines.iter().map(|b| b.1))
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.1;
    let palette = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x94, 0x67, 0xbd),
    ];
    {
        let mut b = ChartBuilder::on(&top);
        b.margin(10);
        if text {
            b.caption("mean TRUE RTT to super peer (sampled nodes)", ("sans-serif", 18))
                .x_label_area_size(30)
                .y_label_area_size(50);
        }
        let mut chart = b.build_cartesian_2d(0.0..tmax, 0.0..ymax).map_err(e)?;
        if text {
            chart.configure_mesh().x_desc("time (s)").y_desc("ms").draw().map_err(e)?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
        }
        for (k, s) in series.iter().enumerate() {
            let c = palette[k % palette.len()];
            let pts: Vec<(f64, f64)> =
                s.rounds.iter().filter(|r| r.sample_rtt_ms.is_finite()).map(|r| (r.time_s, r.sample_rtt_ms)).collect();
            let ann = chart.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(e)?;
            if text {
                ann.label(s.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            }
        }
        for (k, (name, v)) in baselines.iter().enumerate() {
            let c = palette[(k + series.len()) % palette.len()];
            let ann = chart
                .draw_series(DashedLineSeries::new(vec![(0.0, *v), (tmax, *v)], 6, 4, c.stroke_width(1)))
                .map_err(e)?;
            if text {
                ann.label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(1)));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(e)?;
        }
    }
    {
        let cmax = series
            .iter()
            .flat_map(|s| s.rounds.iter().map(|r| (r.token_moves + r.attach_changes) as f64))
            .fold(1.0, f64::max)
            .max(1.0);
        let mut b = ChartBuilder::on(&bottom);
        b.margin(10);
        if text {
            b.caption("changes per round: attachments + token moves (log)", ("sans-serif", 18))
                .x_label_area_size(30)
                .y_label_area_size(50);
        }
        let mut chart = b.build_cartesian_2d(0.0..tmax, (0.5..cmax * 2.0).log_scale()).map_err(e)?;
        if text {
            chart.configure_mesh().x_desc("time (s)").y_desc("count").draw().map_err(e)?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
        }
        for (k, s) in series.iter().enumerate() {
            let c = palette[k % palette.len()];
            let pts: Vec<(f64, f64)> =
                s.rounds.iter().map(|r| (r.time_s, ((r.token_moves + r.attach_changes) as f64).max(0.5))).collect();
            chart.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Writes `<stem>.png` and `<stem>.svg`: convergence over time.
pub fn convergence(dir: &Path, stem: &str, series: &[Series], baselines: &[(String, f64)]) -> anyhow::Result<()> {
    let text = init_fonts();
    let png = dir.join(format!("{stem}.png"));
    draw_convergence(BitMapBackend::new(&png, (1000, 720)).into_drawing_area(), series, baselines, text)?;
    let svg = dir.join(format!("{stem}.svg"));
    draw_convergence(SVGBackend::new(&svg, (1000, 720)).into_drawing_area(), series, baselines, text)?;
    Ok(())
}
