//! The regression gate: every (model, test, threads) of a baseline receipt whose speedup
//! in the current receipt fell below a fraction of the baseline's.

use std::fmt;

use crate::engine::Test;
use crate::receipt::Receipt;

/// One (model, test, threads) that fell below the bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    pub model: String,
    pub test: Test,
    pub threads: u32,
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
    /// Comparisons present in both receipts.
    pub checked: usize,
    pub regressions: Vec<Regression>,
    /// In the baseline, not measured in the current receipt (reported, not failed).
    pub missing: Vec<(String, Test, u32)>,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.regressions.is_empty()
    }
}

/// Compares `current` against `baseline`: a comparison regresses when
/// `current speedup < fail_below × baseline speedup`.
pub fn check(baseline: &Receipt, current: &Receipt, fail_below: f64) -> GateReport {
    let mut report = GateReport {
        fail_below,
        checked: 0,
        regressions: Vec::new(),
        missing: Vec::new(),
    };
    for base in &baseline.results {
        let Some(cur) = current.find(&base.key()) else {
            report.missing.push(base.key());
            continue;
        };
        report.checked += 1;
        let (b, c) = (base.derived.speedup, cur.derived.speedup);
        if c < fail_below * b {
            report.regressions.push(Regression {
                model: base.model.clone(),
                test: base.test,
                threads: base.threads,
                baseline_speedup: b,
                current_speedup: c,
            });
        }
    }
    report
}

impl fmt::Display for GateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            writeln!(
                f,
                "gate passed: {} comparison(s), none below {} × the baseline's speedup",
                self.checked, self.fail_below
            )?;
        } else {
            writeln!(
                f,
                "gate FAILED: {} of {} comparison(s) below {} × the baseline's speedup:",
                self.regressions.len(),
                self.checked,
                self.fail_below
            )?;
            for r in &self.regressions {
                writeln!(
                    f,
                    "  {} {} t{}: speedup {:.3} (baseline {:.3}, {:.1}% of it)",
                    r.model,
                    r.test,
                    r.threads,
                    r.current_speedup,
                    r.baseline_speedup,
                    100.0 * r.ratio()
                )?;
            }
        }
        for (model, test, threads) in &self.missing {
            writeln!(f, "  not measured now: {model} {test} t{threads}")?;
        }
        Ok(())
    }
}
