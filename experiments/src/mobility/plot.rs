//! The mobility figures (PNG and SVG, `plotters`): a metric against node speed, one panel per
//! (node count, radio range), one curve per pause time, with optional dashed reference lines
//! (the paper's 97-99 % band). Text uses the font found by [`crate::superpeers::plot::init_fonts`];
//! without one the figures are drawn without text.

use crate::superpeers::plot::init_fonts;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One curve: (speed, value) points.
pub struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One panel of a figure.
pub struct Panel {
    pub title: String,
    pub curves: Vec<Curve>,
}

/// A drawing error as an `anyhow` error (plotters' errors are generic over the backend).
fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("{e:?}")
}

const PALETTE: [RGBColor; 4] =
    [RGBColor(0x1f, 0x77, 0xb4), RGBColor(0xd6, 0x27, 0x28), RGBColor(0x2c, 0xa0, 0x2c), RGBColor(0x94, 0x67, 0xbd)];

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    y: (f64, f64),
    panels: &[Panel],
    refs: &[(String, f64)],
    text: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(plot_error)?;
    let root = if text { root.titled(title, ("sans-serif", 20)).map_err(plot_error)? } else { root };
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    let areas = root.split_evenly((rows, cols));
    let xmax =
        panels.iter().flat_map(|p| p.curves.iter().flat_map(|c| c.points.iter().map(|q| q.0))).fold(1.0, f64::max);
    for (panel, area) in panels.iter().zip(areas) {
        let mut b = ChartBuilder::on(&area);
        b.margin(8);
        if text {
            b.caption(&panel.title, ("sans-serif", 15)).x_label_area_size(30).y_label_area_size(55);
        }
        let mut chart = b.build_cartesian_2d(0.0..xmax * 1.05, y.0..y.1).map_err(plot_error)?;
        if text {
            chart.configure_mesh().x_desc("mean speed (m/s)").draw().map_err(plot_error)?;
        } else {
            chart.configure_mesh().x_labels(0).y_labels(0).draw().map_err(plot_error)?;
        }
        for (k, c) in panel.curves.iter().enumerate() {
            let colour = PALETTE[k % PALETTE.len()];
            let ann =
                chart.draw_series(LineSeries::new(c.points.clone(), colour.stroke_width(2))).map_err(plot_error)?;
            if text {
                ann.label(c.label.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
            }
            chart.draw_series(c.points.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(plot_error)?;
        }
        for (name, v) in refs {
            let ann = chart
                .draw_series(DashedLineSeries::new(vec![(0.0, *v), (xmax * 1.05, *v)], 6, 4, BLACK.stroke_width(1)))
                .map_err(plot_error)?;
            if text {
                ann.label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(plot_error)?;
        }
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

/// Writes `<stem>.png` and `<stem>.svg` in `dir`.
pub fn figure(
    dir: &Path,
    stem: &str,
    title: &str,
    y: (f64, f64),
    panels: &[Panel],
    refs: &[(String, f64)],
) -> anyhow::Result<()> {
    let text = init_fonts();
    let cols = panels.len().clamp(1, 3) as u32;
    let rows = panels.len().div_ceil(cols as usize).max(1) as u32;
    let size = (420 * cols, 60 + 340 * rows);
    let png = dir.join(format!("{stem}.png"));
    draw(BitMapBackend::new(&png, size).into_drawing_area(), title, y, panels, refs, text)?;
    let svg = dir.join(format!("{stem}.svg"));
    draw(SVGBackend::new(&svg, size).into_drawing_area(), title, y, panels, refs, text)?;
    Ok(())
}
