//! `pocket compare --serve --workload set`: the speculative-decoding workload set, each
//! engine with and without `--spec-type` (ngram-simple unless told otherwise), one stream.
//! Writes results/<date>-<machine>-spec-workloads/ (receipt.json, report.md) and prints
//! the directory.

use super::serve_bench_cmd::{BenchSpec, ServeBenchArgs};
use super::{CliError, CliResult};
use crate::serve_bench::spec_receipt::{SpecReceipt, KIND};
use crate::serve_bench::spec_set::{self, SpecPlan};
use crate::serve_bench::workloads::SpecWorkload;
use crate::serve_bench::{load_average, run_info, spec_report};

pub fn run(args: &ServeBenchArgs, workloads: Vec<SpecWorkload>) -> CliResult {
    match &args.parallel {
        Some(p) if p[..] != [1] => return Err(CliError::SpecSetStreams(p.clone()).into()),
        _ => {}
    }
    let mut spec = args.clone();
    spec.spec_type = match (args.spec_type, &args.model_draft) {
        (Some(BenchSpec::None), _) => return Err(CliError::SpecSetWithoutSpec.into()),
        // The comparison: n-gram drafts, unless a draft model is given.
        (None, None) => Some(BenchSpec::NgramSimple),
        (t, _) => t,
    };
    let spec_args = spec.server_args()?;
    let plan = SpecPlan {
        runs: args.runs()?,
        workloads,
        spec_args,
    };
    let load_before = load_average();
    let models = spec_set::run(&plan)?;
    let receipt = SpecReceipt {
        run: run_info(
            KIND,
            &plan.runs.engines,
            &plan.runs.llama_server,
            load_before,
        ),
        settings: plan.settings(),
        models,
    };
    let dir = spec_report::write_results_dir(&receipt, &args.results)?;
    eprint!("{}", spec_report::report_md(&receipt));
    println!("{}", dir.display());
    Ok(())
}
