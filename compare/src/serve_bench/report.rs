//! The results directory of a serving benchmark: `receipt.json`, `report.md` (a table per
//! model and the target ratios) and `throughput.svg` (aggregate tokens/s by streams).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::receipt::{
    ModelResult, RunInfo, ServeReceipt, TARGET_SCALING, TARGET_STREAMS, TARGET_VS_LLAMA,
};
use super::server::Engine;
use crate::{Error, Result};

const POCKET: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const LLAMA: RGBColor = RGBColor(0xff, 0x7f, 0x0e);

/// `root/<date>-<machine>-serve/` with the receipt, report and plot; returns the directory.
pub fn write_results_dir(receipt: &ServeReceipt, root: &Path) -> Result<PathBuf> {
    write_dir(
        &receipt.run,
        root,
        "serve",
        &[
            ("receipt.json", serde_json::to_string_pretty(receipt)?),
            ("throughput.svg", throughput_svg(receipt)?),
            ("report.md", report_md(receipt)),
        ],
    )
}

/// Writes `files` (name, text) into `root/<date>-<machine>-<suffix>/`; returns the directory.
pub fn write_dir(
    run: &RunInfo,
    root: &Path,
    suffix: &str,
    files: &[(&str, String)],
) -> Result<PathBuf> {
    let date = run.created.get(..10).unwrap_or("undated");
    let dir = root.join(format!("{date}-{}-{suffix}", run.machine_name));
    std::fs::create_dir_all(&dir).map_err(Error::file(&dir))?;
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(Error::file(path))?;
    }
    Ok(dir)
}

/// The report's title and its lines on the commit, llama-server build and machine.
pub fn run_header(title: &str, r: &RunInfo) -> String {
    let mut out = format!("# {title} — {}\n\n", r.created);
    let _ = writeln!(out, "- pocket: `{}`", r.pocket_commit);
    if let Some(b) = &r.llama_server_build {
        let _ = writeln!(out, "- llama-server: {b}");
    }
    let si = &r.sysinfo;
    let _ = writeln!(
        out,
        "- machine: {} — {} ({} logical cores), load average {} before, {} after",
        r.machine_name,
        si.cpu_model,
        si.logical_cores,
        load(r.load_average[0]),
        load(r.load_average[1])
    );
    out
}

/// The markdown report.
pub fn report_md(r: &ServeReceipt) -> String {
    let s = &r.settings;
    let mut out = run_header("pocket serve vs llama-server", &r.run);
    let _ = writeln!(
        out,
        "- each request: a {}-token prompt (the same token ids for both), {} generated tokens, `{}`",
        s.n_prompt, s.n_predict, s.request
    );
    let workload = match s.workload {
        Some(super::Workload::Prose) => "prose (no repeats)",
        _ => "one paragraph repeated (copy-heavy)",
    };
    let _ = writeln!(out, "- prompt text: {workload}");
    let _ = writeln!(
        out,
        "- both servers: `-c {} -np <streams> -t {}{}`; {} batch(es) of concurrent requests per level and engine, the engines alternating\n",
        s.ctx_size,
        s.threads,
        s.server_args.iter().map(|a| format!(" {a}")).collect::<String>(),
        s.repetitions
    );
    out.push_str(
        "TTFT = time from sending a request to its first token event. Aggregate = generated \
         tokens of a batch / its wall time (median over the batches). Stream = one request's \
         tokens after the first / its time after the first token (median).\n\n",
    );
    for m in &r.models {
        model_table(&mut out, m);
    }
    out.push_str("![aggregate tokens/s](throughput.svg)\n");
    out
}

fn load(v: Option<f64>) -> String {
    v.map_or("?".into(), |l| format!("{l:.2}"))
}

fn model_table(out: &mut String, m: &ModelResult) {
    let _ = writeln!(out, "## {}\n", m.model);
    out.push_str(
        "| streams | pocket TTFT ms (median / p90) | llama-server TTFT ms (median / p90) \
         | pocket aggregate t/s | llama-server aggregate t/s | pocket / llama-server \
         | pocket scaling vs 1 | pocket stream t/s | llama-server stream t/s |\n",
    );
    out.push_str("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    let mut streams: Vec<usize> = m.levels.iter().map(|l| l.streams).collect();
    streams.dedup();
    for s in streams {
        let p = m.level(Engine::Pocket, s);
        let l = m.level(Engine::LlamaServer, s);
        let ttft = |x: Option<&super::receipt::Level>| {
            x.map_or("—".into(), |x| {
                format!("{:.0} / {:.0}", x.ttft_ms_median, x.ttft_ms_p90)
            })
        };
        let tps = |x: Option<&super::receipt::Level>| {
            x.map_or("—".into(), |x| format!("{:.1}", x.aggregate_tps))
        };
        let dec = |x: Option<&super::receipt::Level>| {
            x.map_or("—".into(), |x| {
                format!("{:.1}", x.stream_decode_tps_median)
            })
        };
        let ratio = |v: Option<&f64>| v.map_or("—".into(), |v| format!("{v:.2}×"));
        let _ = writeln!(
            out,
            "| {s} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ttft(p),
            ttft(l),
            tps(p),
            tps(l),
            ratio(m.ratios.pocket_over_llama_server.get(&s)),
            ratio(m.ratios.pocket_scaling.get(&s)),
            dec(p),
            dec(l),
        );
    }
    let verdict = |v: Option<&f64>, target: f64| match v {
        Some(v) if *v >= target => format!("{v:.2}× (target ≥ {target}×: met)"),
        Some(v) => format!("{v:.2}× (target ≥ {target}×: **missed**)"),
        None => "not measured".into(),
    };
    let _ = writeln!(
        out,
        "\nAt {TARGET_STREAMS} streams: pocket / pocket at 1 stream {}; pocket / llama-server {}.\n",
        verdict(m.ratios.pocket_scaling.get(&TARGET_STREAMS), TARGET_SCALING),
        verdict(
            m.ratios.pocket_over_llama_server.get(&TARGET_STREAMS),
            TARGET_VS_LLAMA
        ),
    );
}

/// Aggregate tokens/s by streams, one panel per model, a line per engine.
pub fn throughput_svg(r: &ServeReceipt) -> Result<String> {
    let mut svg = String::new();
    let n = r.models.len().max(1);
    {
        let root = SVGBackend::with_string(&mut svg, (640, 320 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(Error::plot)?;
        for (m, area) in r.models.iter().zip(root.split_evenly((n, 1))) {
            model_panel(m, &area)?;
        }
        root.present().map_err(Error::plot)?;
    }
    Ok(svg)
}

fn model_panel(
    m: &ModelResult,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<()> {
    let max_s = m.levels.iter().map(|l| l.streams).max().unwrap_or(1) as f64;
    let top = m.levels.iter().map(|l| l.aggregate_tps).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("aggregate tokens/s: {}", m.model),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.5f64..max_s + 0.5, 0f64..top)
        .map_err(Error::plot)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(max_s as usize + 2)
        .x_label_formatter(&|x| {
            // Streams are whole numbers: label only those ticks.
            if x.fract().abs() < 1e-9 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .x_desc("concurrent streams (= -np slots)")
        .y_desc("generated tokens/s")
        .draw()
        .map_err(Error::plot)?;
    for (engine, color) in [(Engine::Pocket, POCKET), (Engine::LlamaServer, LLAMA)] {
        let pts: Vec<(f64, f64)> = m
            .levels
            .iter()
            .filter(|l| l.engine == engine)
            .map(|l| (l.streams as f64, l.aggregate_tps))
            .collect();
        if pts.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(Error::plot)?
            .label(engine.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(Error::plot)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(Error::plot)?;
    Ok(())
}
