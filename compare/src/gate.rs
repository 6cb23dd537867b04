//! The regression gate: every (model, test, threads, reference engine) of a baseline
//! receipt whose speedup in the current receipt fell below a fraction of the baseline's.
//! Each speedup is held against the same engine's in the baseline; an engine measured in
//! only one of the receipts is reported, not failed.

use std::fmt;

use crate::engine::{EngineKind, Test};
use crate::receipt::Receipt;

/// One (model, test, threads) whose speedup over one engine fell below the bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    pub model: String,
    pub test: Test,
    pub threads: u32,
    pub engine: EngineKind,
    pub baseline_speedup: f64,
    pub current_speedup: f64,
}

impl Regression {
    /// current / baseline speedup.
    pub fn ratio(&self) -> f64 {
        self.current_speedup / self.baseline_speedup
    }
}

/// The gate's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct GateReport {
    pub fail_below: f64,
    /// (comparison, engine) pairs present in both receipts.
    pub checked: usize,
    pub regressions: Vec<Regression>,
    /// In the baseline, not measured in the current receipt (reported, not failed).
    pub missing: Vec<(String, Test, u32)>,
    /// A comparison in both receipts, an engine in the baseline's only (reported, not failed).
    pub missing_engines: Vec<(String, Test, u32, EngineKind)>,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.regressions.is_empty()
    }
}

/// Compares `current` against `baseline`: a comparison regresses against an engine when
/// `current speedup < fail_below × baseline speedup` over that engine.
pub fn check(baseline: &Receipt, current: &Receipt, fail_below: f64) -> GateReport {
    let mut report = GateReport {
        fail_below,
        checked: 0,
        regressions: Vec::new(),
        missing: Vec::new(),
        missing_engines: Vec::new(),
    };
    for base in &baseline.results {
        let Some(cur) = current.find(&base.key()) else {
            report.missing.push(base.key());
            continue;
        };
        for (&engine, versus) in &base.derived.engines {
            let Some(c) = cur.speedup(engine) else {
                let (model, test, threads) = base.key();
                report.missing_engines.push((model, test, threads, engine));
                continue;
            };
            report.checked += 1;
            let b = versus.speedup;
            if c < fail_below * b {
                report.regressions.push(Regression {
                    model: base.model.clone(),
                    test: base.test,
                    threads: base.threads,
                    engine,
                    baseline_speedup: b,
                    current_speedup: c,
                });
            }
        }
    }
    report
}

impl fmt::Display for GateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            writeln!(
                f,
                "gate passed: {} speedup(s), none below {} × the baseline's speedup",
                self.checked, self.fail_below
            )?;
        } else {
            writeln!(
                f,
                "gate FAILED: {} of {} speedup(s) below {} × the baseline's speedup:",
                self.regressions.len(),
                self.checked,
                self.fail_below
            )?;
            for r in &self.regressions {
                writeln!(
                    f,
                    "  {} {} t{}: speedup over {} {:.3} (baseline {:.3}, {:.1}% of it)",
                    r.model,
                    r.test,
                    r.threads,
                    r.engine,
                    r.current_speedup,
                    r.baseline_speedup,
                    100.0 * r.ratio()
                )?;
            }
        }
        for (model, test, threads) in &self.missing {
            writeln!(f, "  not measured now: {model} {test} t{threads}")?;
        }
        for (model, test, threads, engine) in &self.missing_engines {
            writeln!(
                f,
                "  not measured now: {engine} on {model} {test} t{threads}"
            )?;
        }
        Ok(())
    }
}
