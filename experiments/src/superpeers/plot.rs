//! Plots (PNG and SVG, `plotters`): the coordinate space with super peers and clusters, the
//! protocols' convergence over time with the crash marked, the CDF of member-to-super-peer
//! RTT per method, and the per-seed ratios to the yardsticks.
//!
//! The map shows the 8-dimensional Vivaldi space on its first two principal components
//! (computed by power iteration on a sample), in milliseconds, and says so on its axes.
//! Clusters are coloured from a palette of ten so that no two neighbouring clusters share a
//! colour (a greedy colouring of each head's nearest heads in the picture). Text needs a font: we register the first
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

/// Ten colours that tell apart (Tableau 10).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// A palette index per head (by node index): greedily, each head takes the first colour
/// none of its nearest heads in the picture (up to 9) already has.
fn colours(points: &[(f64, f64)]) -> Vec<usize> {
    let mut tree: kiddo::KdTree<f64, 2> = kiddo::KdTree::with_capacity(points.len().max(1));
    for (i, p) in points.iter().enumerate() {
        tree.add(&[p.0, p.1], i as u64);
    }
    let mut colour = vec![usize::MAX; points.len()];
    for (i, p) in points.iter().enumerate() {
        let near = tree.nearest_n::<kiddo::SquaredEuclidean>(&[p.0, p.1], 10.min(points.len()));
        let used: Vec<usize> = near.iter().map(|nb| colour[nb.item as usize]).collect();
        colour[i] = (0..PALETTE.len()).find(|c| !used.contains(c)).unwrap_or(i % PALETTE.len());
    }
    colour
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
                .x_desc("Vivaldi coordinates, 1st principal component (ms)")
                .y_desc("2nd principal component (ms)")
                .label_style(("sans-serif", 12))
                .draw()
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        let inside = |p: &(f64, f64)| xr.contains(&p.0) && yr.contains(&p.1);
        let head_points: Vec<(f64, f64)> = panel.heads.iter().map(|&h| pca.project(w, h)).collect();
        let palette_of = colours(&head_points);
        let mut colour_of = vec![usize::MAX; n];
        for (&h, &c) in panel.heads.iter().zip(&palette_of) {
            colour_of[h as usize] = c;
        }
        let nodes = chart
            .draw_series(sample.iter().zip(&proj).filter(|(_, p)| inside(p)).filter_map(|(&i, p)| {
                let h = panel.head_of[i as usize];
                (h != i && h != u32::MAX).then(|| Circle::new(*p, 1, PALETTE[colour_of[h as usize]].filled()))
            }))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if text {
            nodes
                .label("node, coloured by its cluster")
                .legend(|(x, y)| Circle::new((x + 6, y), 3, PALETTE[0].filled()));
        }
        let lone = chart
            .draw_series(
                sample
                    .iter()
                    .zip(&proj)
                    .filter(|(&i, p)| inside(p) && panel.head_of[i as usize] == u32::MAX)
                    .map(|(_, p)| Circle::new(*p, 2, BLACK.stroke_width(1))),
            )
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if text {
            lone.label("unattached node").legend(|(x, y)| Circle::new((x + 6, y), 3, BLACK.stroke_width(1)));
        }
        let hs: Vec<(f64, f64)> = head_points.iter().copied().filter(|p| inside(p)).collect();
        let crosses = chart
            .draw_series(hs.iter().map(|p| Cross::new(*p, 4, BLACK.stroke_width(2))))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if text {
            crosses.label("super peer").legend(|(x, y)| Cross::new((x + 6, y), 4, BLACK.stroke_width(2)));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
    }
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// Writes `<stem>.png` and `<stem>.svg`: the coordinate space, one panel per method.
pub fn map(dir: &Path, stem: &str, w: &World, pca: &Pca, panels: &[MapPanel]) -> anyhow::Result<()> {
    let text = init_fonts();
    let rows = panels.len().div_ceil(2) as u32;
    let size = (1400, 560 * rows.max(1));
    let png = dir.join(format!("{stem}.png"));
    draw_map(BitMapBackend::new(&png, size).into_drawing_area(), w, pca, panels, text)?;
    let svg = dir.join(format!("{stem}.svg"));
    draw_map(SVGBackend::new(&svg, size).into_drawing_area(), w, pca, panels, text)?;
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
            b.caption("mean TRUE RTT to the super peer (a fixed sample of nodes)", ("sans-serif", 18))
                .x_label_area_size(30)
                .y_label_area_size(50);
        }
        let mut chart = b.build_cartesian_2d(0.0..tmax, 0.0..ymax).map_err(e)?;
        if text {
            chart
                .configure_mesh()
                .x_desc("simulated time (s, one round a second)")
                .y_desc("mean RTT (ms)")
                .draw()
                .map_err(e)?;
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
        if let Some(t) = crash_time(series) {
            let ann = chart
                .draw_series(std::iter::once(PathElement::new(vec![(t, 0.0), (t, ymax)], BLACK.stroke_width(2))))
                .map_err(e)?;
            if text {
                ann.label("crash of super peers")
                    .legend(|(x, y)| PathElement::new(vec![(x + 9, y - 6), (x + 9, y + 6)], BLACK.stroke_width(2)));
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
            chart
                .configure_mesh()
                .x_desc("simulated time (s, one round a second)")
                .y_desc("changes in the round")
                .draw()
                .map_err(e)?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
        }
        for (k, s) in series.iter().enumerate() {
            let c = palette[k % palette.len()];
            let pts: Vec<(f64, f64)> =
                s.rounds.iter().map(|r| (r.time_s, ((r.token_moves + r.attach_changes) as f64).max(0.5))).collect();
            chart.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(e)?;
        }
        if let Some(t) = crash_time(series) {
            chart
                .draw_series(std::iter::once(PathElement::new(vec![(t, 0.5), (t, cmax * 2.0)], BLACK.stroke_width(2))))
                .map_err(e)?;
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

/// When the super peers were crashed: the end of the last round before recovery began.
fn crash_time(series: &[Series]) -> Option<f64> {
    series.iter().find_map(|s| {
        let first = s.rounds.iter().position(|r| r.phase == "recover")?;
        Some(if first == 0 { 0.0 } else { s.rounds[first - 1].time_s })
    })
}

/// Writes `<stem>.png` and `<stem>.svg`: the CDF of the TRUE RTT from each member to its
/// super peer, one line per placement (`values` need not be sorted).
pub fn cdf(dir: &Path, stem: &str, n: usize, series: &[(String, Vec<f64>)]) -> anyhow::Result<()> {
    let text = init_fonts();
    let png = dir.join(format!("{stem}.png"));
    draw_cdf(BitMapBackend::new(&png, (1000, 620)).into_drawing_area(), n, series, text)?;
    let svg = dir.join(format!("{stem}.svg"));
    draw_cdf(SVGBackend::new(&svg, (1000, 620)).into_drawing_area(), n, series, text)?;
    Ok(())
}

fn draw_cdf<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    n: usize,
    series: &[(String, Vec<f64>)],
    text: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    root.fill(&WHITE).map_err(e)?;
    let all = || series.iter().flat_map(|s| s.1.iter().copied()).filter(|v| v.is_finite() && *v > 0.0);
    let lo = all().fold(f64::INFINITY, f64::min).max(0.1);
    let hi = all().fold(1.0, f64::max) * 1.2;
    let mut b = ChartBuilder::on(&root);
    b.margin(12);
    if text {
        b.caption(format!("member-to-super-peer TRUE RTT, N = {n}"), ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(55);
    }
    let lo = if lo.is_finite() { lo } else { 0.1 };
    let mut chart = b.build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0).map_err(e)?;
    if text {
        chart
            .configure_mesh()
            .x_desc("RTT from a member to its super peer (ms, log scale)")
            .y_desc("share of members with at most this RTT")
            .draw()
            .map_err(e)?;
    } else {
        chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
    }
    for (k, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            continue;
        }
        let step = (v.len() / 2000).max(1);
        let len = v.len() as f64;
        let mut pts: Vec<(f64, f64)> =
            (0..v.len()).step_by(step).map(|i| (v[i].max(lo), (i + 1) as f64 / len)).collect();
        pts.push((v[v.len() - 1].max(lo), 1.0));
        let c = PALETTE[k % PALETTE.len()];
        let dashed = k >= series.len().saturating_sub(3) && series.len() > 3;
        let ann = if dashed {
            chart.draw_series(DashedLineSeries::new(pts, 8, 4, c.stroke_width(2))).map_err(e)?
        } else {
            chart.draw_series(LineSeries::new(pts, c.stroke_width(2))).map_err(e)?
        };
        if text {
            ann.label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)?;
    Ok(())
}

/// Reads one value of a per-seed point (seed, method, x kmedian, x random).
type SeedValue = fn(&(u64, String, f64, f64)) -> f64;

/// Writes `<stem>.png` and `<stem>.svg`: per seed, each protocol's mean RTT over the
/// k-median's and over the random draws' mean, with the targets; `points` are (seed, method,
/// x k-median, x random), `bound_ok` says per seed whether the lower bound lets any placement
/// reach the random target (seeds where it does not are drawn hollow).
pub fn ratios(
    dir: &Path,
    stem: &str,
    n: usize,
    points: &[(u64, String, f64, f64)],
    bound_ok: &[(u64, bool)],
) -> anyhow::Result<()> {
    let text = init_fonts();
    let png = dir.join(format!("{stem}.png"));
    draw_ratios(BitMapBackend::new(&png, (1000, 760)).into_drawing_area(), n, points, bound_ok, text)?;
    let svg = dir.join(format!("{stem}.svg"));
    draw_ratios(SVGBackend::new(&svg, (1000, 760)).into_drawing_area(), n, points, bound_ok, text)?;
    Ok(())
}

fn draw_ratios<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    n: usize,
    points: &[(u64, String, f64, f64)],
    bound_ok: &[(u64, bool)],
    text: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    root.fill(&WHITE).map_err(e)?;
    let (s0, s1) = points.iter().fold((u64::MAX, 0), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let xr = (s0 as f64 - 0.5)..(s1 as f64 + 0.5);
    let mut methods: Vec<&str> = Vec::new();
    for p in points {
        if !methods.contains(&p.1.as_str()) {
            methods.push(&p.1);
        }
    }
    let halves = root.split_evenly((2, 1));
    let panels: [(&str, f64, SeedValue); 2] = [
        ("mean RTT / capacitated k-median's (target <= 1.10)", 1.10, |p| p.2),
        ("mean RTT / mean of the random draws (target <= 0.6; hollow: no placement can)", 0.6, |p| p.3),
    ];
    for (area, (title, target, value)) in halves.iter().zip(panels) {
        let ymax = points.iter().map(value).fold(target, f64::max) * 1.1;
        let mut b = ChartBuilder::on(area);
        b.margin(10);
        if text {
            b.caption(format!("N = {n}: {title}"), ("sans-serif", 17)).x_label_area_size(32).y_label_area_size(50);
        }
        let mut chart = b.build_cartesian_2d(xr.clone(), 0.0..ymax).map_err(e)?;
        if text {
            chart
                .configure_mesh()
                .x_desc("seed")
                .y_desc("ratio")
                .x_labels(((s1 - s0) as usize + 1).min(40))
                .draw()
                .map_err(e)?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(e)?;
        }
        let ann = chart
            .draw_series(DashedLineSeries::new(vec![(xr.start, target), (xr.end, target)], 8, 5, BLACK.stroke_width(1)))
            .map_err(e)?;
        if text {
            ann.label(format!("target {target}"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
        }
        for (k, m) in methods.iter().enumerate() {
            let c = PALETTE[k % PALETTE.len()];
            let mine: Vec<&(u64, String, f64, f64)> = points.iter().filter(|p| p.1 == *m).collect();
            let ann = chart
                .draw_series(mine.iter().map(|p| {
                    let ok = target != 0.6 || bound_ok.iter().any(|b| b.0 == p.0 && b.1);
                    let style = if ok { c.filled() } else { c.stroke_width(2) };
                    Circle::new((p.0 as f64, value(p)), 5, style)
                }))
                .map_err(e)?;
            if text {
                ann.label(m.to_string()).legend(move |(x, y)| Circle::new((x + 6, y), 5, c.filled()));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}
