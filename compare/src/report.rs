//! A receipt's results directory, `results/<date>-<machine>/`: receipt.json,
//! results.csv, report.md and the report's SVG charts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plots;
use crate::receipt::Receipt;
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

const CSV_HEADER: &str = "model,model_bytes,test,threads,engine,rep,ts,peak_rss_bytes,setup_ms";

/// One line per (comparison, engine, repetition).
pub fn results_csv(receipt: &Receipt) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for c in &receipt.results {
        for (engine, s) in [("pocket", &c.pocket), ("llama.cpp", &c.llama_cpp)] {
            for i in 0..s.ts.len() {
                let _ = writeln!(
                    out,
                    "\"{}\",{},{},{},{engine},{},{},{},{:.1}",
                    c.model.replace('"', "\"\""),
                    c.model_bytes.map_or(String::new(), |b| b.to_string()),
                    c.test,
                    c.threads,
                    i + 1,
                    s.ts[i],
                    s.peak_rss_bytes[i],
                    s.setup_ms[i]
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

/// The markdown report: machine, builds, the comparison table, decode vs roofline, parity.
pub fn report_md(receipt: &Receipt, has_roofline: bool) -> String {
    let m = &receipt.machine;
    let si = &m.sysinfo;
    let mut out = String::new();
    let _ = writeln!(out, "# pocket vs llama.cpp — {}\n", dir_name(receipt));
    let _ = writeln!(out, "- created: {}", receipt.created);
    let _ = writeln!(out, "- pocket: `{}`", receipt.pocket_commit);
    let _ = writeln!(
        out,
        "- llama.cpp (benchmarks, KL-divergence base): {}",
        receipt.llama_cpp_build
    );
    if let Some(r) = &receipt.llama_cpp_reference_build {
        let _ = writeln!(
            out,
            "- llama.cpp reference (greedy parity, ggml numerics): {r}"
        );
    }
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
    out.push_str("\n## Speed and memory\n\n");
    out.push_str(
        "Each repetition is a fresh process. Speedup = pocket t/s / llama.cpp t/s. \
         Setup = process wall time outside the timed run (load, warm-up, exit).\n\n",
    );
    out.push_str(
        "| model | test | threads | pocket t/s | llama.cpp t/s | speedup | pocket RSS MiB | llama.cpp RSS MiB | RSS Δ MiB | pocket setup ms | llama.cpp setup ms |\n",
    );
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for c in &receipt.results {
        let d = &c.derived;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} ± {:.2} | {:.2} ± {:.2} | {:.3} | {} | {} | {} | {:.0} | {:.0} |",
            plots::short(&c.model),
            c.test,
            c.threads,
            d.pocket_ts_mean,
            d.pocket_ts_sd,
            d.llama_cpp_ts_mean,
            d.llama_cpp_ts_sd,
            d.speedup,
            mib(d.pocket_peak_rss_bytes),
            mib(d.llama_cpp_peak_rss_bytes),
            signed_mib(d.rss_delta_bytes),
            d.pocket_setup_ms_mean,
            d.llama_cpp_setup_ms_mean
        );
    }
    out.push_str("\n![speedup](speedup.svg)\n");
    let decode: Vec<_> = receipt
        .results
        .iter()
        .filter(|c| c.test.is_decode())
        .collect();
    if !decode.is_empty() {
        out.push_str("\n## Decode against the bandwidth roofline\n\n");
        out.push_str(
            "Roofline = read bandwidth / model tensor bytes: one full read of the weights per token.\n\n",
        );
        out.push_str("| model | test | threads | model MiB | roofline t/s | pocket t/s | % of roof | llama.cpp t/s | % of roof |\n");
        out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for c in decode {
            let d = &c.derived;
            let pct = |ts: f64| {
                d.roofline_ts
                    .map_or("—".into(), |r| format!("{:.0}%", 100.0 * ts / r))
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.2} | {} | {:.2} | {} |",
                plots::short(&c.model),
                c.test,
                c.threads,
                c.model_bytes.map_or("—".into(), mib),
                d.roofline_ts.map_or("—".into(), |r| format!("{r:.1}")),
                d.pocket_ts_mean,
                pct(d.pocket_ts_mean),
                d.llama_cpp_ts_mean,
                pct(d.llama_cpp_ts_mean)
            );
        }
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
