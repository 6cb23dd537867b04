//! Trends across stored receipts: an HTML page with inline SVG charts of pocket's speedup
//! over each reference engine and of every engine's t/s per (model, test, threads), oldest
//! receipt to newest. Receipts with different sets of engines mix: a series has a point
//! where its engine was measured.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::engine::{EngineKind, Test};
use crate::receipt::Receipt;
use crate::Result;

/// Every `receipt.json` under `dir` (up to three levels down), sorted by path.
pub fn find_receipts(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() && depth > 0 {
                walk(&path, depth - 1, out)?;
            } else if path.file_name().is_some_and(|n| n == "receipt.json") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, 3, &mut out).map_err(crate::Error::file(dir))?;
    out.sort();
    Ok(out)
}

/// Whether the file at `path` is another benchmark's receipt (the serving benchmark's,
/// `"kind": "pocket-serve-bench"`, or its speculative workload set's, `"pocket-spec-bench"`):
/// it has its own history and is neither loaded nor an error.
pub fn is_other_kind(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    let kind = value.get("kind").and_then(|k| k.as_str());
    kind == Some(crate::serve_bench::receipt::KIND)
        || kind == Some(crate::serve_bench::spec_receipt::KIND)
}

/// The `pocket compare` receipts under `dir`, oldest first, and a message for each file that
/// would not load. Receipts of the serving benchmark are left out (see [`is_other_kind`]).
pub fn load_all(dir: &Path) -> Result<(Vec<Receipt>, Vec<String>)> {
    let mut receipts = Vec::new();
    let mut skipped = Vec::new();
    for path in find_receipts(dir)? {
        if is_other_kind(&path) {
            continue;
        }
        match Receipt::load(&path) {
            Ok(r) => receipts.push(r),
            Err(e) => skipped.push(e.to_string()),
        }
    }
    receipts.sort_by(|a, b| a.created.cmp(&b.created));
    Ok((receipts, skipped))
}

type Key = (String, Test, u32);

fn key_label((model, test, threads): &Key) -> String {
    format!("{} {test} t{threads}", crate::plots::short(model))
}

use crate::plots::{chart_on, finish_with_legend, plot_err};

const PALETTE: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// A line chart over receipt index; each series is (label, points (index, value)).
fn trend_svg(
    title: &str,
    y_desc: &str,
    dates: &[String],
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String> {
    let n = dates.len().max(1);
    let top = series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = chart_on(&root, title, -0.5..n as f64 - 0.5, top)?;
        chart
            .configure_mesh()
            .x_labels(n.min(12))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 {
                    return String::new();
                }
                dates.get(i as usize).cloned().unwrap_or_default()
            })
            .y_desc(y_desc)
            .draw()
            .map_err(plot_err)?;
        for (i, (label, pts)) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(plot_err)?;
        }
        finish_with_legend(&root, &mut chart, SeriesLabelPosition::LowerRight)?;
    }
    Ok(svg)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One receipt's figures for one (model, test, threads): its index, pocket's t/s, and each
/// engine's t/s and pocket's speedup over it.
struct Point {
    index: f64,
    pocket_ts: f64,
    engines: BTreeMap<EngineKind, (f64, f64)>,
}

/// Every comparison of `receipts`, by key, oldest receipt first.
fn points_by_key(receipts: &[Receipt]) -> BTreeMap<Key, Vec<Point>> {
    let mut keys: BTreeMap<Key, Vec<Point>> = BTreeMap::new();
    for (i, r) in receipts.iter().enumerate() {
        for c in &r.results {
            let d = &c.derived;
            let engines = d
                .engines
                .iter()
                .map(|(k, v)| (*k, (v.ts_mean, v.speedup)))
                .collect();
            keys.entry(c.key()).or_default().push(Point {
                index: i as f64,
                pocket_ts: d.pocket_ts_mean,
                engines,
            });
        }
    }
    keys
}

/// `engine`'s series of `pts`: `pick` of (t/s, speedup) where the engine was measured.
fn engine_series(
    pts: &[Point],
    engine: EngineKind,
    pick: fn((f64, f64)) -> f64,
) -> Vec<(f64, f64)> {
    pts.iter()
        .filter_map(|p| p.engines.get(&engine).map(|&v| (p.index, pick(v))))
        .collect()
}

/// `llama.cpp b11434 ...; ik_llama.cpp ...` for the receipts table.
fn builds(r: &Receipt) -> String {
    let lines: Vec<String> = r
        .engines
        .iter()
        .map(|(k, info)| format!("{k}: {}", info.build))
        .collect();
    lines.join("; ")
}

/// The history page for `receipts` (oldest first); `skipped` lists files that did not load.
pub fn history_html(receipts: &[Receipt], skipped: &[String]) -> Result<String> {
    let dates: Vec<String> = receipts
        .iter()
        .map(|r| r.created.get(..10).unwrap_or(&r.created).to_string())
        .collect();
    let keys = points_by_key(receipts);
    let mut html = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pocket vs its reference engines: history</title>\n\
         <style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>\n\
         <h1>pocket vs its reference engines: history</h1>\n",
    );
    html.push_str("<table><tr><th>#</th><th>created</th><th>machine</th><th>pocket</th><th>engines</th><th>comparisons</th></tr>\n");
    for (i, r) in receipts.iter().enumerate() {
        let _ = writeln!(
            html,
            "<tr><td>{i}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            html_escape(&r.created),
            html_escape(&r.machine.name),
            html_escape(&r.pocket_commit),
            html_escape(&builds(r)),
            r.results.len()
        );
    }
    html.push_str("</table>\n");
    html.push_str(&machines_table(receipts));
    for s in skipped {
        let _ = writeln!(html, "<p>skipped: {}</p>", html_escape(s));
    }
    if keys.is_empty() {
        html.push_str("<p>No comparisons stored yet.</p>\n</body></html>\n");
        return Ok(html);
    }
    let mut engines: Vec<EngineKind> = receipts.iter().flat_map(|r| r.measured_engines()).collect();
    engines.sort();
    engines.dedup();
    for &e in &engines {
        let speedups: Vec<(String, Vec<(f64, f64)>)> = keys
            .iter()
            .map(|(k, pts)| (key_label(k), engine_series(pts, e, |v| v.1)))
            .filter(|(_, pts)| !pts.is_empty())
            .collect();
        let _ = writeln!(html, "<h2>Speedup (pocket / {e})</h2>");
        html.push_str(&trend_svg(
            &format!("speedup over {e}"),
            "speedup (×)",
            &dates,
            &speedups,
        )?);
        html.push('\n');
    }
    html.push_str("\n<h2>t/s per comparison</h2>\n");
    for (k, pts) in &keys {
        let mut series = vec![(
            "pocket".to_string(),
            pts.iter().map(|p| (p.index, p.pocket_ts)).collect(),
        )];
        for &e in &engines {
            let s = engine_series(pts, e, |v| v.0);
            if !s.is_empty() {
                series.push((e.name().to_string(), s));
            }
        }
        html.push_str(&trend_svg(&key_label(k), "t/s", &dates, &series)?);
        html.push('\n');
    }
    html.push_str("</body></html>\n");
    Ok(html)
}

/// The latest receipt of each machine, side by side: a row per (model, test, threads), a
/// column per machine, cells `pocket t/s; speedup× over each engine (its t/s)`. Empty with
/// one machine.
fn machines_table(receipts: &[Receipt]) -> String {
    let mut latest: BTreeMap<&str, &Receipt> = BTreeMap::new();
    for r in receipts {
        let e = latest.entry(r.machine.name.as_str()).or_insert(r);
        if r.created > e.created {
            *e = r;
        }
    }
    if latest.len() < 2 {
        return String::new();
    }
    let mut rows: BTreeMap<Key, BTreeMap<&str, String>> = BTreeMap::new();
    for (m, r) in &latest {
        for c in &r.results {
            let d = &c.derived;
            let mut cell = format!("pocket {:.1} t/s", d.pocket_ts_mean);
            for (k, v) in &d.engines {
                let _ = write!(cell, "; {:.2}× {k} ({:.1})", v.speedup, v.ts_mean);
            }
            rows.entry(c.key()).or_default().insert(m, cell);
        }
    }
    let mut html = String::from(
        "<h2>Machines side by side (latest receipt of each)</h2>\n<table><tr><th>comparison</th>",
    );
    for m in latest.keys() {
        let _ = write!(html, "<th>{}</th>", html_escape(m));
    }
    html.push_str("</tr>\n");
    for (k, cells) in &rows {
        let _ = write!(html, "<tr><td>{}</td>", html_escape(&key_label(k)));
        for m in latest.keys() {
            let _ = write!(
                html,
                "<td>{}</td>",
                cells.get(m).map_or("—", String::as_str)
            );
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}
