//! What a comparison's samples give: pocket's mean, spread, peak RSS and setup time, and
//! against each reference engine its own and pocket's speedup over it. Stored for readers;
//! [`crate::receipt::Receipt::load`] recomputes and checks it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{EngineSamples, TOLERANCE};
use crate::bandwidth::Bandwidth;
use crate::engine::{EngineKind, Test};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derived {
    pub pocket_ts_mean: f64,
    pub pocket_ts_sd: f64,
    pub pocket_peak_rss_bytes: u64,
    pub pocket_setup_ms_mean: f64,
    /// Each reference engine, and pocket against it.
    pub engines: BTreeMap<EngineKind, Versus>,
    /// Decode tests: read bandwidth / model bytes, the t/s no engine can beat.
    #[serde(default)]
    pub roofline_ts: Option<f64>,
}

/// One reference engine's figures and pocket's against them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versus {
    pub ts_mean: f64,
    pub ts_sd: f64,
    pub peak_rss_bytes: u64,
    pub setup_ms_mean: f64,
    /// pocket t/s / this engine's t/s (> 1: pocket is faster).
    pub speedup: f64,
    /// pocket's peak RSS minus this engine's (negative: pocket uses less).
    pub rss_delta_bytes: i64,
}

/// Mean and sample standard deviation (0 for one value).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

fn peak(samples: &EngineSamples) -> u64 {
    samples.peak_rss_bytes.iter().copied().max().unwrap_or(0)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1e-12)
}

impl Derived {
    /// Derives from pocket's and each engine's samples; `bandwidth` and `model_bytes` give
    /// the roofline of decode tests.
    pub fn compute(
        pocket: &EngineSamples,
        engines: &BTreeMap<EngineKind, EngineSamples>,
        test: Test,
        threads: u32,
        model_bytes: Option<u64>,
        bandwidth: Option<&Bandwidth>,
    ) -> Derived {
        let (pm, psd) = mean_sd(&pocket.ts);
        let prss = peak(pocket);
        let engines = engines
            .iter()
            .map(|(&kind, s)| {
                let (m, sd) = mean_sd(&s.ts);
                let rss = peak(s);
                let versus = Versus {
                    ts_mean: m,
                    ts_sd: sd,
                    peak_rss_bytes: rss,
                    setup_ms_mean: mean_sd(&s.setup_ms).0,
                    speedup: if m > 0.0 { pm / m } else { 0.0 },
                    rss_delta_bytes: prss as i64 - rss as i64,
                };
                (kind, versus)
            })
            .collect();
        let roofline_ts = match (test.is_decode(), model_bytes, bandwidth) {
            (true, Some(bytes), Some(bw)) if bytes > 0 => {
                Some(bw.for_threads(threads) * 1e9 / bytes as f64)
            }
            _ => None,
        };
        Derived {
            pocket_ts_mean: pm,
            pocket_ts_sd: psd,
            pocket_peak_rss_bytes: prss,
            pocket_setup_ms_mean: mean_sd(&pocket.setup_ms).0,
            engines,
            roofline_ts,
        }
    }

    /// The first field that differs from `other` beyond rounding (`engines.llama.cpp.speedup`).
    pub(super) fn differs_from(&self, other: &Derived) -> Option<String> {
        let floats = [
            ("pocket_ts_mean", self.pocket_ts_mean, other.pocket_ts_mean),
            ("pocket_ts_sd", self.pocket_ts_sd, other.pocket_ts_sd),
            (
                "pocket_setup_ms_mean",
                self.pocket_setup_ms_mean,
                other.pocket_setup_ms_mean,
            ),
        ];
        if let Some((name, ..)) = floats.iter().find(|(_, a, b)| !close(*a, *b)) {
            return Some(name.to_string());
        }
        if self.pocket_peak_rss_bytes != other.pocket_peak_rss_bytes {
            return Some("pocket_peak_rss_bytes".into());
        }
        if !self.engines.keys().eq(other.engines.keys()) {
            return Some("engines (not the engines of the samples)".into());
        }
        for (kind, v) in &self.engines {
            if let Some(field) = v.differs_from(&other.engines[kind]) {
                return Some(format!("engines.{kind}.{field}"));
            }
        }
        match (self.roofline_ts, other.roofline_ts) {
            (None, None) => None,
            (Some(a), Some(b)) if close(a, b) => None,
            _ => Some("roofline_ts".into()),
        }
    }
}

impl Versus {
    fn differs_from(&self, other: &Versus) -> Option<&'static str> {
        let floats = [
            ("ts_mean", self.ts_mean, other.ts_mean),
            ("ts_sd", self.ts_sd, other.ts_sd),
            ("setup_ms_mean", self.setup_ms_mean, other.setup_ms_mean),
            ("speedup", self.speedup, other.speedup),
        ];
        if let Some((name, ..)) = floats.iter().find(|(_, a, b)| !close(*a, *b)) {
            return Some(name);
        }
        if self.peak_rss_bytes != other.peak_rss_bytes {
            return Some("peak_rss_bytes");
        }
        (self.rss_delta_bytes != other.rss_delta_bytes).then_some("rss_delta_bytes")
    }
}
