//! A receipt's results directory, `results/<date>-<machine>/`: receipt.json,
//! results.csv, report.md and the report's SVG charts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::engine::EngineKind;
use crate::plots;
use crate::receipt::{Comparison, Receipt};
use crate::sysinfo::{sanitize, simd_flags};
use crate::Result;

/// `<date>-<machine>` for a receipt (date from `created`).
pub fn dir_name(receipt: &Receipt) -> String {
    let date = receipt.created.get(..10).unwrap_or("undated");
    format!("{date}-{}", sanitize(&receipt.machine.name))
}

/// Writes the receipt's directory under `root` and returns its path.
pub fn write_results_dir(receipt: &Receipt, root: &Path) -> Result<PathBuf> {
    let dir = root.join(dir_name(receipt));
    std::fs::create_dir_all(&dir).map_err(crate::Error::file(&dir))?;
    receipt.save(&dir.join("receipt.json"))?;
    let write = |name: &str, text: &str| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(crate::Error::file(path))
    };
    write("results.csv", &results_csv(receipt))?;
    write("speedup.svg", &plots::speedup_svg(receipt)?)?;
    let roofline = plots::roofline_svg(receipt)?;
    if let Some(svg) = &roofline {
        write("roofline.svg", svg)?;
    }
    write("report.md", &report_md(receipt, roofline.is_some()))?;
    Ok(dir)
}

const CSV_HEADER: &str =
    "model,model_bytes,test,threads,engine,rep,ts,peak_rss_bytes,setup_ms,busy_cpu";

/// One line per (comparison, engine, repetition).
pub fn results_csv(receipt: &Receipt) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for c in &receipt.results {
        let engines = c.engines.iter().map(|(k, s)| (k.name(), s));
        for (engine, s) in std::iter::once(("pocket", &c.pocket)).chain(engines) {
            for i in 0..s.ts.len() {
                let _ = writeln!(
                    out,
                    "\"{}\",{},{},{},{engine},{},{},{},{:.1},{}",
                    c.model.replace('"', "\"\""),
                    c.model_bytes.map_or(String::new(), |b| b.to_string()),
                    c.test,
                    c.threads,
                    i + 1,
                    s.ts[i],
                    s.peak_rss_bytes[i],
                    s.setup_ms[i],
                    c.busy_cpu.map_or(String::new(), |b| b.to_string())
                );
            }
        }
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn signed_mib(bytes: i64) -> String {
    format!("{:+.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// `pocket vs llama.cpp, ik_llama.cpp`.
fn title(engines: &[EngineKind]) -> String {
    let names: Vec<&str> = engines.iter().map(|k| k.name()).collect();
    format!("pocket vs {}", names.join(", "))
}

/// The markdown report: machine, builds, the comparison tables, decode vs roofline, parity.
pub fn report_md(receipt: &Receipt, has_roofline: bool) -> String {
    let engines = receipt.measured_engines();
    let mut out = String::new();
    let _ = writeln!(out, "# {} — {}\n", title(&engines), dir_name(receipt));
    let _ = writeln!(out, "- created: {}", receipt.created);
    let _ = writeln!(out, "- pocket: `{}`", receipt.pocket_commit);
    for (kind, info) in &receipt.engines {
        let flags = if info.options.is_empty() {
            String::new()
        } else {
            format!("; every run with `{}`", info.options.join(" "))
        };
        let role = match kind {
            EngineKind::LlamaCpp => " (benchmarks, KL-divergence base)",
            _ => "",
        };
        let _ = writeln!(out, "- {kind}{role}: {}{flags}", info.build);
    }
    for skip in &receipt.skipped {
        let test = skip.test.map_or(String::new(), |t| format!(" {t}"));
        let _ = writeln!(
            out,
            "- {} not run on {}{test}: {}",
            skip.engine, skip.model, skip.why
        );
    }
    if let Some(r) = &receipt.llama_cpp_reference_build {
        let _ = writeln!(
            out,
            "- llama.cpp reference (greedy parity, ggml numerics): {r}"
        );
    }
    machine_lines(&mut out, receipt);
    speed_tables(&mut out, receipt, &engines);
    out.push_str("\n![speedup](speedup.svg)\n");
    let decode: Vec<&Comparison> = receipt
        .results
        .iter()
        .filter(|c| c.test.is_decode())
        .collect();
    if !decode.is_empty() {
        out.push_str("\n## Decode against the bandwidth roofline\n\n");
        out.push_str(
            "Roofline = read bandwidth / model tensor bytes: one full read of the weights per token.\n\n",
        );
        decode_table(&mut out, &decode, &engines);
        if has_roofline {
            out.push_str("\n![roofline](roofline.svg)\n");
        }
    }
    if !receipt.parity.is_empty() {
        out.push_str("\n## Output parity\n\n");
        out.push_str(
            "| model | pocket ppl | llama.cpp ppl | KLD vs native | same top | llama.cpp v3 KLD | greedy tokens | identical | identical, ggml numerics |\n",
        );
        out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        let opt =
            |v: Option<f64>, digits: usize| v.map_or("—".into(), |x| format!("{x:.digits$}"));
        for p in &receipt.parity {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                plots::short(&p.model),
                opt(p.perplexity_pocket, 4),
                opt(p.perplexity_llama_cpp, 4),
                opt(p.kld.as_ref().map(|k| k.mean_kld), 5),
                p.kld
                    .as_ref()
                    .map_or("—".into(), |k| format!("{:.1}%", 100.0 * k.same_top)),
                p.kld_llama_reference
                    .as_ref()
                    .map_or("same build".into(), |k| format!("{:.5}", k.mean_kld)),
                p.greedy_tokens.map_or("—".into(), |n| n.to_string()),
                p.greedy_identical_share
                    .map_or("—".into(), |s| format!("{:.1}%", 100.0 * s)),
                p.ggml_numerics_identical_share
                    .map_or("—".into(), |s| format!("{:.1}%", 100.0 * s))
            );
        }
    }
    out
}

fn machine_lines(out: &mut String, receipt: &Receipt) {
    let m = &receipt.machine;
    let si = &m.sysinfo;
    let _ = writeln!(
        out,
        "- machine: {} — {} ({} logical, {} physical cores), {} {}, memory {}",
        m.name,
        si.cpu_model,
        si.logical_cores,
        si.physical_cores.map_or("?".into(), |c| c.to_string()),
        si.os,
        si.arch,
        si.mem_total_bytes.map_or("?".into(), |b| format!(
            "{:.1} GiB",
            b as f64 / (1u64 << 30) as f64
        ))
    );
    let _ = writeln!(out, "- SIMD: {}", simd_flags(&si.cpu_flags).join(" "));
    if let Some(bw) = &m.bandwidth {
        let _ = writeln!(
            out,
            "- read bandwidth: {:.1} GB/s (1 thread), {:.1} GB/s ({} threads), {} MiB buffer",
            bw.single_gbs,
            bw.multi_gbs,
            bw.threads,
            bw.buffer_bytes >> 20
        );
    }
}

/// The speed table (t/s of every engine, pocket's speedup over each) and the memory and
/// setup table (peak RSS and setup time of every engine).
fn speed_tables(out: &mut String, receipt: &Receipt, engines: &[EngineKind]) {
    out.push_str("\n## Speed\n\n");
    out.push_str(
        "Each repetition is a fresh process; the engines take turns within each repetition. \
         × E = pocket t/s / E t/s, pocket's speedup over E (> 1: pocket is faster).\n\n",
    );
    let names: Vec<String> = engines.iter().map(|e| format!("{e} t/s")).collect();
    let speedups: Vec<String> = engines.iter().map(|e| format!("× {e}")).collect();
    results_head(out, "pocket t/s", &[&names, &speedups]);
    for c in &receipt.results {
        let d = &c.derived;
        let pocket = format!("{:.2} ± {:.2}", d.pocket_ts_mean, d.pocket_ts_sd);
        row_start(out, c, &pocket);
        engine_cells(out, engines, |e| {
            let v = d.engines.get(&e)?;
            Some(format!("{:.2} ± {:.2}", v.ts_mean, v.ts_sd))
        });
        engine_cells(out, engines, |e| Some(format!("{:.3}", c.speedup(e)?)));
        out.push('\n');
    }
    out.push_str("\n## Memory and setup\n\n");
    out.push_str(
        "Peak RSS of each engine's process (in parentheses: pocket's minus the engine's); \
         setup = process wall time outside the timed run (load, warm-up, exit).\n\n",
    );
    let rss: Vec<String> = engines.iter().map(|e| format!("{e} RSS MiB")).collect();
    let mut setup = vec!["pocket setup ms".to_string()];
    setup.extend(engines.iter().map(|e| format!("{e} setup ms")));
    results_head(out, "pocket RSS MiB", &[&rss, &setup]);
    for c in &receipt.results {
        let d = &c.derived;
        row_start(out, c, &mib(d.pocket_peak_rss_bytes));
        engine_cells(out, engines, |e| {
            let v = d.engines.get(&e)?;
            let delta = signed_mib(v.rss_delta_bytes);
            Some(format!("{} ({delta})", mib(v.peak_rss_bytes)))
        });
        let _ = write!(out, " {:.0} |", d.pocket_setup_ms_mean);
        engine_cells(out, engines, |e| {
            Some(format!("{:.0}", d.engines.get(&e)?.setup_ms_mean))
        });
        out.push('\n');
    }
}

/// The header of a table whose rows begin with [`row_start`]: model, test, threads and
/// `pocket`, then the `more` column groups.
fn results_head(out: &mut String, pocket: &str, more: &[&Vec<String>]) {
    table_head(out, &["model", "test", "threads", pocket], more);
}

/// A table row's first cells: the comparison's model, test and threads, then `pocket`.
fn row_start(out: &mut String, c: &Comparison, pocket: &str) {
    let label = c.label();
    let model = plots::short(&label);
    let _ = write!(out, "| {model} | {} | {} | {pocket} |", c.test, c.threads);
}

/// A cell per engine: `cell` of it, or — where it has none.
fn engine_cells(
    out: &mut String,
    engines: &[EngineKind],
    cell: impl Fn(EngineKind) -> Option<String>,
) {
    for &e in engines {
        let cell = cell(e).unwrap_or_else(|| "—".into());
        let _ = write!(out, " {cell} |");
    }
}

/// A markdown table's header and rule: `fixed` columns (the first three left-aligned),
/// then the `more` groups of right-aligned columns.
fn table_head(out: &mut String, fixed: &[&str], more: &[&Vec<String>]) {
    let cols: Vec<&str> = fixed
        .iter()
        .copied()
        .chain(more.iter().flat_map(|g| g.iter().map(String::as_str)))
        .collect();
    let rule: Vec<&str> = (0..cols.len())
        .map(|i| if i < 2 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(out, "| {} |\n| {} |", cols.join(" | "), rule.join(" | "));
}

/// Decode t/s of every engine against the roofline.
fn decode_table(out: &mut String, decode: &[&Comparison], engines: &[EngineKind]) {
    let fixed = [
        "model",
        "test",
        "threads",
        "model MiB",
        "roofline t/s",
        "pocket t/s",
        "% of roof",
    ];
    let per_engine: Vec<String> = engines
        .iter()
        .flat_map(|e| [format!("{e} t/s"), "% of roof".to_string()])
        .collect();
    table_head(out, &fixed, &[&per_engine]);
    for c in decode {
        let d = &c.derived;
        let pct = |ts: f64| {
            d.roofline_ts
                .map_or("—".into(), |r| format!("{:.0}%", 100.0 * ts / r))
        };
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {:.2} | {} |",
            plots::short(&c.label()),
            c.test,
            c.threads,
            c.model_bytes.map_or("—".into(), mib),
            d.roofline_ts.map_or("—".into(), |r| format!("{r:.1}")),
            d.pocket_ts_mean,
            pct(d.pocket_ts_mean)
        );
        for e in engines {
            match d.engines.get(e) {
                Some(v) => {
                    let _ = write!(out, " {:.2} | {} |", v.ts_mean, pct(v.ts_mean));
                }
                None => out.push_str(" — | — |"),
            }
        }
        out.push('\n');
    }
}
