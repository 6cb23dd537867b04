//! Version 1 of the receipt schema (pocket against llama.cpp alone), read and turned into
//! the current schema so that stored receipts keep loading. Its stored derived values are
//! carried over as they are, so that [`super::Receipt::validate`] still catches a hand edit.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    Comparison, Derived, EngineSamples, Machine, Parity, PlacementRecord, Receipt, Versus, VERSION,
};
use crate::engine::{EngineInfo, EngineKind, Test};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReceiptV1 {
    version: u32,
    created: String,
    machine: Machine,
    pocket_commit: String,
    llama_cpp_build: String,
    #[serde(default)]
    llama_cpp_reference_build: Option<String>,
    results: Vec<ComparisonV1>,
    #[serde(default)]
    parity: Vec<Parity>,
    #[serde(default)]
    placement: Option<PlacementRecord>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ComparisonV1 {
    model: String,
    #[serde(default)]
    model_bytes: Option<u64>,
    test: Test,
    threads: u32,
    pocket: EngineSamples,
    llama_cpp: EngineSamples,
    derived: DerivedV1,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DerivedV1 {
    pocket_ts_mean: f64,
    pocket_ts_sd: f64,
    llama_cpp_ts_mean: f64,
    llama_cpp_ts_sd: f64,
    speedup: f64,
    pocket_peak_rss_bytes: u64,
    llama_cpp_peak_rss_bytes: u64,
    rss_delta_bytes: i64,
    pocket_setup_ms_mean: f64,
    llama_cpp_setup_ms_mean: f64,
    #[serde(default)]
    roofline_ts: Option<f64>,
}

impl From<ReceiptV1> for Receipt {
    fn from(v1: ReceiptV1) -> Receipt {
        debug_assert_eq!(v1.version, 1);
        // A version 1 receipt's llama.cpp ran with the receipt's placement flags.
        let options = v1
            .placement
            .as_ref()
            .map(PlacementRecord::flags)
            .unwrap_or_default();
        let info = EngineInfo {
            build: v1.llama_cpp_build,
            options,
        };
        Receipt {
            version: VERSION,
            created: v1.created,
            machine: v1.machine,
            pocket_commit: v1.pocket_commit,
            engines: BTreeMap::from([(EngineKind::LlamaCpp, info)]),
            llama_cpp_reference_build: v1.llama_cpp_reference_build,
            results: v1.results.into_iter().map(Comparison::from).collect(),
            parity: v1.parity,
            placement: v1.placement,
            skipped: Vec::new(),
        }
    }
}

impl From<ComparisonV1> for Comparison {
    fn from(c: ComparisonV1) -> Comparison {
        let d = c.derived;
        let versus = Versus {
            ts_mean: d.llama_cpp_ts_mean,
            ts_sd: d.llama_cpp_ts_sd,
            peak_rss_bytes: d.llama_cpp_peak_rss_bytes,
            setup_ms_mean: d.llama_cpp_setup_ms_mean,
            speedup: d.speedup,
            rss_delta_bytes: d.rss_delta_bytes,
        };
        Comparison {
            model: c.model,
            model_bytes: c.model_bytes,
            test: c.test,
            threads: c.threads,
            pocket: c.pocket,
            engines: BTreeMap::from([(EngineKind::LlamaCpp, c.llama_cpp)]),
            derived: Derived {
                pocket_ts_mean: d.pocket_ts_mean,
                pocket_ts_sd: d.pocket_ts_sd,
                pocket_peak_rss_bytes: d.pocket_peak_rss_bytes,
                pocket_setup_ms_mean: d.pocket_setup_ms_mean,
                engines: BTreeMap::from([(EngineKind::LlamaCpp, versus)]),
                roofline_ts: d.roofline_ts,
            },
            busy_cpu: None,
        }
    }
}
