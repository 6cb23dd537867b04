//! `pocket compare` with models: the live comparison (see `compare_cmd`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::compare_cmd::CompareArgs;
use super::CliResult;
use crate::comparator::{self, Plan};
use crate::engine::{EngineKind, Pocket, Reference};
use crate::llama_bench::{cache_dir, LlamaTools, Provisioned, ToolError};
use crate::receipt::{PlacementRecord, Receipt};
use crate::{parity, report};

/// The fixture models (fetched by `tests/fixtures.sh`).
pub const FIXTURES: [&str; 2] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m-q4_k_m.gguf",
];
/// The synthetic MNN-Pocket models, by quantization type.
pub const SYNTH_TYPES: [&str; 3] = ["q4_0", "q4_1", "q8_0"];

/// `<cache>/models/mnn-pocket-0.3b-synth-<type>.gguf`.
pub fn synth_path(ty: &str) -> PathBuf {
    cache_dir()
        .join("models")
        .join(format!("mnn-pocket-0.3b-synth-{ty}.gguf"))
}

/// The default model list: fixtures present in the cache (a warning for the missing) and
/// the synthetic models, written with `pocket synth` when missing.
fn default_models(pocket: &Pocket) -> crate::Result<Vec<PathBuf>> {
    let mut models = Vec::new();
    for f in FIXTURES {
        let p = cache_dir().join("models").join(f);
        if p.is_file() {
            models.push(p);
        } else {
            eprintln!(
                "warning: fixture {} missing (fetch it with `bash tests/fixtures.sh`); skipped",
                p.display()
            );
        }
    }
    for ty in SYNTH_TYPES {
        let p = synth_path(ty);
        if !p.is_file() {
            eprintln!("writing {} with pocket synth ...", p.display());
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let status = Command::new(&pocket.exe)
                .args(["synth", "--preset", "mnn-pocket-0.3b", "--type", ty, "-o"])
                .arg(&p)
                .status()
                .map_err(|source| ToolError::Spawn {
                    tool: "pocket synth".into(),
                    source,
                })?;
            if !status.success() {
                return Err(ToolError::Failed {
                    command: format!("pocket synth for {}", p.display()),
                    failure: format!("({status})"),
                }
                .into());
            }
        }
        models.push(p);
    }
    Ok(models)
}

pub fn run(args: &CompareArgs) -> CliResult {
    let tests = args.tests.tests(&[])?;
    let (placement, class_threads) = args.placement.resolve()?;
    let threads = super::bench_cmd::threads_or_default(&args.threads, class_threads);
    // The engines first: their absence is the most likely failure, and says how to fix it.
    let kinds = if args.engines.is_empty() {
        EngineKind::provisioned()
    } else {
        dedup(&args.engines)
    };
    if kinds.is_empty() {
        return Err(ToolError::NoEngines.into());
    }
    let engines = kinds
        .iter()
        .map(|k| k.locate(Some(placement)))
        .collect::<crate::Result<Vec<_>>>()?;
    // Parity is against llama.cpp (perplexity, KL-divergence base, greedy tokens).
    let parity_tools = if args.no_parity {
        None
    } else {
        let tools = LlamaTools::locate()?;
        tools.tool("llama-perplexity")?;
        tools.reference_tool("llama-completion")?;
        Some(tools)
    };
    let mut pocket = Pocket::current()?;
    pocket.placement = Some(placement);
    let models = if args.model.is_empty() {
        default_models(&pocket)?
    } else {
        for m in &args.model {
            if !m.is_file() {
                return Err(crate::Error::ModelNotFound(m.clone()));
            }
        }
        args.model.clone()
    };
    for m in &models {
        crate::pocket_bench::check_file_fits(m, &tests)?;
    }
    let plan = Plan {
        models: models.clone(),
        tests,
        threads: threads.clone(),
        reps: args.reps,
        contention: args.contention,
    };

    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut receipt = comparator::new_receipt(None, &repo);
    receipt.placement = Some(PlacementRecord::from(&placement));

    let conditions = 1 + plan.contention.is_some() as usize;
    let total = (plan.models.len() * plan.tests.len() * plan.threads.len() * conditions) as u64
        * u64::from(plan.reps)
        * (engines.len() as u64 + 1);
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} runs (eta {eta}) {wide_msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    let references: Vec<&dyn Reference> = engines.iter().map(|e| e.as_ref()).collect();
    let mut receipt = comparator::run(&plan, &pocket, &references, receipt, |line| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        bar.set_message(line.split(':').next().unwrap_or("").to_string());
        bar.inc(1);
    })?;
    bar.finish_with_message("done");

    // The bandwidth probe (a large buffer) and parity (models loaded here) come after the
    // timed runs: Linux carries a parent's peak RSS into each child it starts (exec records
    // the old mm's high-water mark), so this process must stay small while it measures.
    if !args.no_bandwidth {
        let sp = spinner("probing read bandwidth");
        let bw = crate::bandwidth::probe_default();
        sp.finish_with_message(format!(
            "read bandwidth {:.1} GB/s (1 thread), {:.1} GB/s ({} threads)",
            bw.single_gbs, bw.multi_gbs, bw.threads
        ));
        for c in &mut receipt.results {
            c.rederive(Some(&bw));
        }
        receipt.machine.bandwidth = Some(bw);
        receipt.validate()?;
    }

    if let Some(tools) = &parity_tools {
        let t = threads.iter().copied().max().unwrap_or(1);
        for m in &models {
            let sp = spinner(&format!(
                "parity on {}",
                m.file_name().unwrap_or_default().to_string_lossy()
            ));
            let (p, warnings) = parity::measure(tools, m, t);
            sp.finish_and_clear();
            for w in warnings {
                eprintln!("warning: parity: {w}");
            }
            println!("{}", parity_line(&p));
            receipt.parity.push(p);
        }
    }

    let root = args.results.clone().unwrap_or_else(|| "results".into());
    let dir = report::write_results_dir(&receipt, &root)?;
    println!();
    print_summary(&receipt);
    println!("{}", dir.display());
    Ok(())
}

/// The engines of `kinds` in report order, each once.
fn dedup(kinds: &[EngineKind]) -> Vec<EngineKind> {
    let mut out = kinds.to_vec();
    out.sort();
    out.dedup();
    out
}

/// A line per comparison: pocket's t/s and RSS, and each engine's with pocket's speedup.
fn print_summary(receipt: &Receipt) {
    for c in &receipt.results {
        let d = &c.derived;
        let mut line = format!(
            "{:<40} {:>7} t{}  pocket {:>9.2} t/s {:>4.0} MiB",
            c.label(),
            c.test.to_string(),
            c.threads,
            d.pocket_ts_mean,
            d.pocket_peak_rss_bytes as f64 / (1 << 20) as f64,
        );
        for (k, v) in &d.engines {
            line.push_str(&format!(
                " | {k} {:>9.2} t/s {:>4.0} MiB, speedup {:.3}",
                v.ts_mean,
                v.peak_rss_bytes as f64 / (1 << 20) as f64,
                v.speedup
            ));
        }
        println!("{line}");
    }
}

/// `parity MODEL: ppl pocket X / llama.cpp Y, greedy N tokens, Z% identical`.
pub fn parity_line(p: &crate::receipt::Parity) -> String {
    let f = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.4}"));
    format!(
        "parity {}: ppl pocket {} / llama.cpp {} (c={}, {} chunks); KLD from native llama.cpp {}; greedy {} tokens, {} identical ({} in ggml numerics)",
        p.model,
        f(p.perplexity_pocket),
        f(p.perplexity_llama_cpp),
        parity::PPL_CTX,
        parity::PPL_CHUNKS,
        kld_text(p),
        p.greedy_tokens.map_or("—".into(), |n| n.to_string()),
        p.greedy_identical_share
            .map_or("—".into(), |s| format!("{:.1}%", 100.0 * s)),
        p.ggml_numerics_identical_share
            .map_or("—".into(), |s| format!("{:.1}%", 100.0 * s)),
    )
}

/// `0.00123, same top 97.2 %` (and llama.cpp's own reference-vs-native spread when measured).
fn kld_text(p: &crate::receipt::Parity) -> String {
    let one = |k: &crate::receipt::KldParity| {
        format!("{:.5}, same top {:.1}%", k.mean_kld, 100.0 * k.same_top)
    };
    match (&p.kld, &p.kld_llama_reference) {
        (None, _) => "—".into(),
        (Some(k), None) => one(k),
        (Some(k), Some(r)) => format!("{} (llama.cpp x86-64-v3 build: {})", one(k), one(r)),
    }
}

fn spinner(msg: &str) -> ProgressBar {
    let sp = ProgressBar::new_spinner();
    sp.set_message(msg.to_string());
    sp.enable_steady_tick(Duration::from_millis(200));
    sp
}
