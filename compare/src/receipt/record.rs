//! A [`Comparison`] as a receipt stores it: the test's name without its depth (`pp512`),
//! and the depth beside it as llama-bench's `n_depth`, written when not 0. Receipts from
//! before `-d` have no `n_depth`, and mean depth 0.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Comparison, Derived, EngineSamples};
use crate::engine::{EngineKind, Test};

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ComparisonRecord {
    model: String,
    #[serde(default)]
    model_bytes: Option<u64>,
    test: Test,
    #[serde(default, skip_serializing_if = "is_zero")]
    n_depth: u32,
    threads: u32,
    pocket: EngineSamples,
    engines: BTreeMap<EngineKind, EngineSamples>,
    derived: Derived,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    busy_cpu: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<Comparison> for ComparisonRecord {
    fn from(c: Comparison) -> ComparisonRecord {
        ComparisonRecord {
            model: c.model,
            model_bytes: c.model_bytes,
            test: c.test.without_depth(),
            n_depth: c.test.n_depth,
            threads: c.threads,
            pocket: c.pocket,
            engines: c.engines,
            derived: c.derived,
            busy_cpu: c.busy_cpu,
        }
    }
}

impl TryFrom<ComparisonRecord> for Comparison {
    type Error = String;

    /// A test written with its depth (`pp512 @ d4096`) reads too, if `n_depth` agrees.
    fn try_from(r: ComparisonRecord) -> Result<Comparison, String> {
        let depth = match (r.test.n_depth, r.n_depth) {
            (0, d) | (d, 0) => d,
            (a, b) if a == b => a,
            (a, b) => {
                return Err(format!(
                    "test `{}` is at depth {a} but n_depth is {b}",
                    r.test
                ))
            }
        };
        Ok(Comparison {
            model: r.model,
            model_bytes: r.model_bytes,
            test: r.test.at_depth(depth),
            threads: r.threads,
            pocket: r.pocket,
            engines: r.engines,
            derived: r.derived,
            busy_cpu: r.busy_cpu,
        })
    }
}
