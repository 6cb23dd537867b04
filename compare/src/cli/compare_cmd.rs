//! `pocket compare`: the comparator's work on stored receipts.
//!
//!   pocket compare --history results/ [--out FILE]          trend page (HTML, inline SVG)
//!   pocket compare --baseline R --current R [--fail-below X]  regression gate (exit 1 on a drop)
//!   pocket compare --report R [--results DIR]                 results/<date>-<machine>/ from R

use std::path::PathBuf;

use clap::{ArgGroup, Args};

use super::CliResult;
use crate::receipt::Receipt;
use crate::{gate, history, report};

#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("mode").required(true).args(["history", "baseline", "report"])))]
pub struct CompareArgs {
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
    /// Where --report writes (default: results).
    #[arg(long, value_name = "DIR", requires = "report")]
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
    Err("nothing to do: give --history, --baseline/--current or --report".into())
}
