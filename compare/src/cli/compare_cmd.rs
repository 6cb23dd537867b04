//! `pocket compare`: pocket against its reference engines (llama.cpp, ik_llama.cpp), or the
//! comparator's work on stored receipts.
//!
//!   pocket compare [--engines llama.cpp,ik_llama.cpp] [-m MODEL...] [-t 2[,1]] [-p 512] [-n 128]
//!                  [-d 0[,4096]] [-r 5] [--results DIR] [--no-parity]
//!       every (model, test, threads) on pocket and each engine (default: every provisioned
//!       one; each gets the depth `-d`), repetitions interleaved, each one a fresh process; a parity line per model
//!       (against llama.cpp); writes results/<date>-<machine>/. Without -m: the fixture
//!       models and the three synthetic MNN-Pocket models (made if missing).
//!   pocket compare --history results/ [--out FILE]          trend page (HTML, inline SVG)
//!   pocket compare --baseline R --current R [--fail-below X]  regression gate (exit 1 on a drop)
//!   pocket compare --report R [--results DIR]                 results/<date>-<machine>/ from R

use std::path::PathBuf;

use clap::{ArgGroup, Args};

use super::engine_args::{positive, PlacementArgs, TestLists};
use super::{CliError, CliResult};
use crate::engine::EngineKind;
use crate::receipt::Receipt;
use crate::{gate, history, report};

/// The flags of a live comparison, which do not mix with the receipt modes.
const LIVE: [&str; 12] = [
    "engines",
    "model",
    "threads",
    "n_prompt",
    "n_gen",
    "n_depth",
    "reps",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "no_parity",
    "no_bandwidth",
];

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("mode").args(["history", "baseline", "report"]).conflicts_with_all(LIVE)))]
pub struct CompareArgs {
    /// Engines to compare pocket with, comma-separated (default: every provisioned one;
    /// ik_llama.cpp runs with `-rtr 1 -fa 1`).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub engines: Vec<EngineKind>,
    /// Models to compare; repeat -m or separate with commas (default: fixtures + synthetic).
    #[arg(short, long = "model", value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    /// Thread counts, comma-separated (default: physical cores).
    #[arg(short = 't', long = "threads", value_delimiter = ',', value_parser = positive)]
    pub threads: Vec<u32>,
    #[command(flatten)]
    pub tests: TestLists,
    /// Repetitions per engine, each a fresh process.
    #[arg(short = 'r', long = "repetitions", default_value = "5", value_parser = positive)]
    pub reps: u32,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Skip the parity measurements (perplexity, greedy tokens).
    #[arg(long)]
    pub no_parity: bool,
    /// Skip the memory bandwidth probe (no roofline).
    #[arg(long)]
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
    /// Measure every test twice: quiet, then with a busy loop pinned to CPU (the app's
    /// own work on a shared core); both rows go into the receipt.
    #[arg(long, value_name = "CPU")]
    pub contention: Option<u32>,
}

pub fn run(args: CompareArgs) -> CliResult {
    if let Some(dir) = &args.history {
        let (receipts, skipped) = history::load_all(dir)?;
        for s in &skipped {
            eprintln!("warning: skipped {s}");
        }
        let page = history::history_html(&receipts, &skipped)?;
        let out = args.out.clone().unwrap_or_else(|| dir.join("history.html"));
        std::fs::write(&out, page).map_err(|source| CliError::File {
            action: "write",
            path: out.clone(),
            source,
        })?;
        println!("{} receipt(s) -> {}", receipts.len(), out.display());
        return Ok(());
    }
    if let (Some(base), Some(cur)) = (&args.baseline, &args.current) {
        if !(args.fail_below > 0.0 && args.fail_below.is_finite()) {
            return Err(CliError::BadFraction(args.fail_below).into());
        }
        let verdict = gate::check(&Receipt::load(base)?, &Receipt::load(cur)?, args.fail_below);
        print!("{verdict}");
        if !verdict.passed() {
            return Err(CliError::Regressions {
                count: verdict.regressions.len(),
                baseline: base.clone(),
            }
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
