//! Runs a plan — models × tests × threads, each repeated in fresh processes — on two
//! engines and collects a [`Receipt`]. Repetitions alternate between the engines so that
//! drift in the machine's state (heat, neighbours) falls on both alike.

use std::path::PathBuf;

use crate::engine::{Engine, Sample, Test};
use crate::receipt::{Comparison, EngineSamples, Machine, Receipt};
use crate::Result;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    pub models: Vec<PathBuf>,
    pub tests: Vec<Test>,
    pub threads: Vec<u32>,
    /// Repetitions per engine, each a fresh process.
    pub reps: u32,
}

/// Measures `plan` on both engines; `progress` hears one line per repetition.
pub fn run(
    plan: &Plan,
    pocket: &dyn Engine,
    llama_cpp: &dyn Engine,
    receipt: Receipt,
    mut progress: impl FnMut(&str),
) -> Result<Receipt> {
    if plan.reps == 0 {
        return Err(crate::Error::NoRepetitions);
    }
    let mut receipt = receipt;
    let bandwidth = receipt.machine.bandwidth.clone();
    for model in &plan.models {
        let name = model.file_name().map_or_else(
            || model.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        for &test in &plan.tests {
            for &threads in &plan.threads {
                let mut ours: Vec<Sample> = Vec::new();
                let mut theirs: Vec<Sample> = Vec::new();
                for rep in 1..=plan.reps {
                    for (engine, into) in [(pocket, &mut ours), (llama_cpp, &mut theirs)] {
                        let s = engine.bench(model, test, threads).map_err(|e| {
                            crate::Error::Engine {
                                run: format!("{} on {name} {test} t{threads}", engine.name()),
                                source: Box::new(e),
                            }
                        })?;
                        progress(&format!(
                            "{name} {test} t{threads} rep {rep}/{}: {} {:.2} t/s, peak RSS {:.1} MiB",
                            plan.reps,
                            engine.name(),
                            s.ts,
                            s.peak_rss_bytes as f64 / (1 << 20) as f64
                        ));
                        into.push(s);
                    }
                }
                // llama-bench's model_size is the tensor bytes a decoded token reads.
                let model_bytes = theirs
                    .iter()
                    .chain(&ours)
                    .map(|s| s.row.model_size)
                    .find(|&b| b > 0);
                receipt.results.push(Comparison::new(
                    &name,
                    model_bytes,
                    test,
                    threads,
                    EngineSamples::from_samples(&ours),
                    EngineSamples::from_samples(&theirs),
                    bandwidth.as_ref(),
                ));
            }
        }
    }
    receipt.validate()?;
    Ok(receipt)
}

/// A receipt for this machine (with `bandwidth`, if probed), both builds, and no results.
pub fn new_receipt(
    bandwidth: Option<crate::bandwidth::Bandwidth>,
    repo: &std::path::Path,
) -> Receipt {
    let machine = Machine {
        name: crate::sysinfo::machine_name(),
        sysinfo: crate::sysinfo::SysInfo::detect(),
        bandwidth,
    };
    let mut r = Receipt::new(
        machine,
        crate::sysinfo::pocket_commit(repo),
        crate::sysinfo::llama_build_info(),
    );
    r.llama_cpp_reference_build = crate::llama_bench::LlamaTools::locate()
        .ok()
        .and_then(|t| t.reference_info());
    r
}
