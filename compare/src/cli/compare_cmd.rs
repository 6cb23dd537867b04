//! `pocket compare`: pocket against llama.cpp, or the comparator's work on stored receipts.
//!
//!   pocket compare [-m MODEL...] [-t 2[,1]] [-p 512] [-n 128] [-r 5] [--results DIR] [--no-parity]
//!       every (model, test, threads) on both engines, repetitions interleaved, each one a
//!       fresh process; a parity line per model; writes results/<date>-<machine>/. Without
//!       -m: the fixture models and the three synthetic MNN-Pocket models (made if missing).
//!   pocket compare --history results/ [--out FILE]          trend page (HTML, inline SVG)
//!   pocket compare --baseline R --current R [--fail-below X]  regression gate (exit 1 on a drop)
//!   pocket compare --report R [--results DIR]                 results/<date>-<machine>/ from R

use std::path::PathBuf;

use clap::{ArgGroup, Args};

use super::CliResult;
use crate::receipt::Receipt;
use crate::{gate, history, report};

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("mode").args(["history", "baseline", "report"])))]
pub struct CompareArgs {
    /// Models to compare; repeat -m or separate with commas (default: fixtures + synthetic).
    #[arg(short, long = "model", value_delimiter = ',', conflicts_with = "mode")]
    pub model: Vec<PathBuf>,
    /// Thread counts, comma-separated (default: physical cores).
    #[arg(short = 't', long = "threads", conflicts_with = "mode")]
    pub threads: Option<String>,
    /// Prompt lengths (pp tests), comma-separated; 0 for none.
    #[arg(
        short = 'p',
        long = "n-prompt",
        default_value = "512",
        conflicts_with = "mode"
    )]
    pub n_prompt: String,
    /// Generation lengths (tg tests), comma-separated; 0 for none.
    #[arg(
        short = 'n',
        long = "n-gen",
        default_value = "128",
        conflicts_with = "mode"
    )]
    pub n_gen: String,
    /// Repetitions per engine, each a fresh process.
    #[arg(
        short = 'r',
        long = "repetitions",
        default_value_t = 5,
        conflicts_with = "mode"
    )]
    pub reps: u32,
    /// CPUs both engines may use, a hexadecimal mask (llama-bench's --cpu-mask).
    #[arg(
        short = 'C',
        long = "cpu-mask",
        value_name = "HEX",
        conflicts_with = "mode"
    )]
    pub cpu_mask: Option<String>,
    /// 1: each thread on its own CPU of the mask (llama-bench's --cpu-strict).
    #[arg(long = "cpu-strict", value_name = "0|1", default_value_t = 0, conflicts_with = "mode",
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub cpu_strict: u8,
    /// Spin-before-park level of idle threads, 0..100 (llama-bench's --poll).
    #[arg(long = "poll", value_name = "0..100", default_value_t = 50, conflicts_with = "mode",
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub poll: u32,
    /// Skip the parity measurements (perplexity, greedy tokens).
    #[arg(long, conflicts_with = "mode")]
    pub no_parity: bool,
    /// Skip the memory bandwidth probe (no roofline).
    #[arg(long, conflicts_with = "mode")]
    pub no_bandwidth: bool,
    /// Write an HTML page of trends across the receipts stored under DIR.
    #[arg(long, value_name = "DIR")]
    pub history: Option<PathBuf>,
    /// Where --history writes its page (default: DIR/history.html).
    #[arg(long, value_name = "FILE", requires = "history")]
    pub out: Option<PathBuf>,
    /// Regression gate: the receipt to compare against.
    #[arg(long, value_name = "RECEIPT", requires = "current")]
    pub baseline: Option<PathBuf>,
    /// Regression gate: the receipt under test.
    #[arg(long, value_name = "RECEIPT", requires = "baseline")]
    pub current: Option<PathBuf>,
    /// Regression gate: fail when a speedup falls below this fraction of the baseline's.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.95)]
    pub fail_below: f64,
    /// Write the results directory (receipt.json, results.csv, report.md, SVGs) of RECEIPT.
    #[arg(long, value_name = "RECEIPT")]
    pub report: Option<PathBuf>,
    /// Where a comparison or --report writes its results directory (default: results).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["history", "baseline"])]
    pub results: Option<PathBuf>,
}

pub fn run(args: CompareArgs) -> CliResult {
    if let Some(dir) = &args.history {
        let (receipts, skipped) = history::load_all(dir)?;
        for s in &skipped {
            eprintln!("warning: skipped {s}");
        }
        let page = history::history_html(&receipts, &skipped)?;
        let out = args.out.clone().unwrap_or_else(|| dir.join("history.html"));
        std::fs::write(&out, page).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("{} receipt(s) -> {}", receipts.len(), out.display());
        return Ok(());
    }
    if let (Some(base), Some(cur)) = (&args.baseline, &args.current) {
        if !(args.fail_below > 0.0 && args.fail_below.is_finite()) {
            return Err(
                format!("--fail-below {} is not a positive number", args.fail_below).into(),
            );
        }
        let verdict = gate::check(&Receipt::load(base)?, &Receipt::load(cur)?, args.fail_below);
        print!("{verdict}");
        if !verdict.passed() {
            return Err(format!(
                "{} speedup regression(s) against {}",
                verdict.regressions.len(),
                base.display()
            )
            .into());
        }
        return Ok(());
    }
    if let Some(path) = &args.report {
        let receipt = Receipt::load(path)?;
        let root = args.results.clone().unwrap_or_else(|| "results".into());
        let dir = report::write_results_dir(&receipt, &root)?;
        println!("{}", dir.display());
        return Ok(());
    }
    super::compare_run::run(&args)
}
