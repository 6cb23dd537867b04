//! SVG charts of a receipt: pocket's speedup over each reference engine per (model, test,
//! threads), and decode t/s of every engine against the bandwidth roofline.

use std::ops::Range;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::engine::EngineKind;
use crate::receipt::Receipt;
use crate::Result;

const POCKET: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const ROOF: RGBColor = RGBColor(0x55, 0x55, 0x55);

/// Each reference engine's colour in every chart.
pub fn engine_color(kind: EngineKind) -> RGBColor {
    match kind {
        EngineKind::LlamaCpp => RGBColor(0xff, 0x7f, 0x0e),
        EngineKind::IkLlamaCpp => RGBColor(0x2c, 0xa0, 0x2c),
        EngineKind::Mnn => RGBColor(0xd6, 0x27, 0x28),
    }
}

use crate::Error;

pub(crate) fn plot_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::plot(e)
}

/// A chart of linear x and y on an SVG.
pub(crate) type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// `root`'s chart with `caption`, x over `x` and y from 0 to `top`, framed as every chart
/// of the receipts and history is (margin, label areas).
pub(crate) fn chart_on<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    x: Range<f64>,
    top: f64,
) -> Result<Chart<'a, 'b>> {
    ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(x, 0f64..top)
        .map_err(plot_err)
}

/// Draws `chart`'s legend at `position` (a white box with a black border) and completes
/// the SVG of `root`.
pub(crate) fn finish_with_legend<'a, 'b: 'a>(
    root: &DrawingArea<SVGBackend<'b>, Shift>,
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// Bars of pocket's speedup over each engine, a group per (model, test, threads), a
/// colour per engine, with a line at 1.
pub fn speedup_svg(receipt: &Receipt) -> Result<String> {
    // One model: its name goes in the caption and the bars are named by test and threads.
    let one_model = receipt.results.windows(2).all(|w| w[0].model == w[1].model);
    let engines = receipt.measured_engines();
    let labels: Vec<String> = receipt
        .results
        .iter()
        .map(|c| {
            if one_model {
                format!("{} t{}", c.test, c.threads)
            } else {
                format!("{} {} t{}", short(&c.label()), c.test, c.threads)
            }
        })
        .collect();
    let names: Vec<&str> = engines.iter().map(|e| e.name()).collect();
    let over = format!("pocket speedup over {}", names.join(", "));
    let caption = match receipt.results.first() {
        Some(c) if one_model => format!("{over}: {}", short(&c.label())),
        _ => over,
    };
    // (group, slot in the group, engine, speedup) of every bar.
    let width = 0.7 / engines.len().max(1) as f64;
    let bars: Vec<(f64, EngineKind, f64)> = receipt
        .results
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            engines.iter().enumerate().filter_map(move |(j, &e)| {
                let left = i as f64 - 0.35 + j as f64 * width;
                c.speedup(e).map(|s| (left, e, s))
            })
        })
        .collect();
    let top = bars.iter().map(|b| b.2).fold(1.0, f64::max) * 1.15;
    let bar_px = (if one_model { 90 } else { 220 }) + 40 * engines.len().saturating_sub(1) as u32;
    let n = labels.len().max(1);
    let mut svg = String::new();
    {
        let px = (160 + bar_px * n as u32).max(480);
        let root = SVGBackend::with_string(&mut svg, (px, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = chart_on(&root, &caption, -0.5..n as f64 - 0.5, top)?;
        let labels_ref = &labels;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                // Ticks fall on group centres (whole numbers); name only those.
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 {
                    return String::new();
                }
                labels_ref.get(i as usize).cloned().unwrap_or_default()
            })
            .y_desc("speedup (×)")
            .draw()
            .map_err(plot_err)?;
        for &e in &engines {
            let color = engine_color(e);
            chart
                .draw_series(bars.iter().filter(|b| b.1 == e).map(|&(left, _, s)| {
                    Rectangle::new([(left, 0.0), (left + width * 0.9, s)], color.filled())
                }))
                .map_err(plot_err)?
                .label(format!("over {e}"))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        chart
            .draw_series(bars.iter().map(|&(left, _, s)| {
                Text::new(
                    format!("{s:.2}"),
                    (left, s + top * 0.03),
                    ("sans-serif", 12),
                )
            }))
            .map_err(plot_err)?;
        chart
            .draw_series(LineSeries::new(
                [(-0.5, 1.0), (n as f64 - 0.5, 1.0)],
                ROOF.stroke_width(1),
            ))
            .map_err(plot_err)?;
        finish_with_legend(&root, &mut chart, SeriesLabelPosition::MiddleRight)?;
    }
    Ok(svg)
}

/// Decode (tg) t/s of every engine per threads, with each model's roofline
/// (bandwidth / model bytes); `None` if the receipt has no decode test.
pub fn roofline_svg(receipt: &Receipt) -> Result<Option<String>> {
    let decode: Vec<_> = receipt
        .results
        .iter()
        .filter(|c| c.test.is_decode())
        .collect();
    if decode.is_empty() {
        return Ok(None);
    }
    let max_threads = decode.iter().map(|c| c.threads).max().unwrap_or(1);
    let one_model = decode.windows(2).all(|w| w[0].model == w[1].model);
    let top = decode
        .iter()
        .flat_map(|c| {
            let engines = c.derived.engines.values().map(|v| v.ts_mean);
            engines.chain([
                c.derived.pocket_ts_mean,
                c.derived.roofline_ts.unwrap_or(0.0),
            ])
        })
        .fold(1.0, f64::max)
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let caption = if one_model {
            format!(
                "decode t/s against the bandwidth roofline: {}",
                short(&decode[0].model)
            )
        } else {
            "decode t/s against the bandwidth roofline".to_string()
        };
        let mut chart = chart_on(&root, &caption, 0.5..max_threads as f64 + 0.5, top)?;
        chart
            .configure_mesh()
            .x_labels(max_threads as usize)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("threads")
            .y_desc("t/s")
            .draw()
            .map_err(plot_err)?;
        let point = |c: &crate::receipt::Comparison, ts: f64| (c.threads as f64, ts);
        chart
            .draw_series(
                decode
                    .iter()
                    .map(|c| Circle::new(point(c, c.derived.pocket_ts_mean), 5, POCKET.filled())),
            )
            .map_err(plot_err)?
            .label("pocket")
            .legend(|(x, y)| Circle::new((x + 10, y), 5, POCKET.filled()));
        for e in receipt.measured_engines() {
            let color = engine_color(e);
            chart
                .draw_series(decode.iter().filter_map(|c| {
                    let v = c.derived.engines.get(&e)?;
                    Some(TriangleMarker::new(point(c, v.ts_mean), 6, color.filled()))
                }))
                .map_err(plot_err)?
                .label(e.name())
                .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, color.filled()));
        }
        let roofs: Vec<_> = decode
            .iter()
            .filter_map(|c| c.derived.roofline_ts.map(|r| (c, r)))
            .collect();
        for (c, r) in &roofs {
            let x = c.threads as f64;
            chart
                .draw_series(LineSeries::new(
                    [(x - 0.3, *r), (x + 0.3, *r)],
                    ROOF.stroke_width(2),
                ))
                .map_err(plot_err)?;
            chart
                .draw_series([Text::new(
                    if one_model {
                        format!("roof {r:.1}")
                    } else {
                        format!("roof {} {r:.1}", short(&c.label()))
                    },
                    (x - 0.3, r + top * 0.02),
                    ("sans-serif", 11),
                )])
                .map_err(plot_err)?;
        }
        finish_with_legend(&root, &mut chart, SeriesLabelPosition::MiddleRight)?;
    }
    Ok(Some(svg))
}

/// A model file name without its `.gguf`.
pub fn short(model: &str) -> &str {
    model.strip_suffix(".gguf").unwrap_or(model)
}
