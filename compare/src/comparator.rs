//! Runs a plan — models × tests × threads, each repeated in fresh processes — on pocket
//! and every reference engine and collects a [`Receipt`]. Each repetition runs every
//! engine once, the order rotating from one repetition to the next, so that drift in the
//! machine's state (heat, neighbours) falls on all engines alike and no engine always
//! runs right after the same one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::engine::{Engine, EngineKind, Reference, Sample, Test};
use crate::llama_bench::{LlamaTools, Provisioned};
use crate::receipt::{Comparison, EngineSamples, Machine, Receipt, Skipped};
use crate::Result;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    pub models: Vec<PathBuf>,
    pub tests: Vec<Test>,
    pub threads: Vec<u32>,
    /// Repetitions per engine, each a fresh process.
    pub reps: u32,
    /// Also measure every cell with a busy loop pinned to this CPU (`--contention`): each
    /// cell quiet, then busy, so both land in one receipt.
    pub contention: Option<u32>,
}

/// Measures `plan` on pocket and `references`; `progress` hears one line per repetition.
/// The references' builds and flags go into the receipt's `engines`.
pub fn run(
    plan: &Plan,
    pocket: &dyn Engine,
    references: &[&dyn Reference],
    receipt: Receipt,
    mut progress: impl FnMut(&str),
) -> Result<Receipt> {
    if plan.reps == 0 {
        return Err(crate::Error::NoRepetitions);
    }
    if references.is_empty() {
        return Err(crate::llama_bench::ToolError::NoEngines.into());
    }
    // A test no engine can run fails the plan before any run, not hours into it; a test
    // only some refuse (ik_llama.cpp's pp at a depth) is run without them.
    for &test in &plan.tests {
        if let Some(why) = references
            .iter()
            .map(|r| r.refuses(test))
            .collect::<Option<Vec<_>>>()
        {
            let engine = references[0].kind().name();
            return Err(crate::Error::Unsupported {
                engine,
                test,
                why: why[0],
            });
        }
    }
    let mut receipt = receipt;
    for r in references {
        receipt.engines.insert(r.kind(), r.info());
    }
    let bandwidth = receipt.machine.bandwidth.clone();
    for model in &plan.models {
        let name = model.file_name().map_or_else(
            || model.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        // An engine that cannot run the model (MNN-LLM off the MNN-Pocket shapes) sits
        // its cells out, with a note in the receipt; a model no engine runs is skipped.
        let mut runs: Vec<&dyn Reference> = Vec::new();
        for &r in references {
            match r.cannot_run(model) {
                None => runs.push(r),
                Some(why) => {
                    let (model, engine) = (name.clone(), r.kind());
                    let skipped = Skipped {
                        model,
                        engine,
                        test: None,
                        why,
                    };
                    sit_out(&mut receipt, &mut progress, skipped);
                }
            }
        }
        if runs.is_empty() {
            progress(&format!("{name}: no engine to compare with; skipped"));
            continue;
        }
        for &test in &plan.tests {
            let mut references: Vec<&dyn Reference> = Vec::new();
            for &r in &runs {
                match r.refuses(test) {
                    None => references.push(r),
                    Some(why) => {
                        let (model, engine, why) = (name.clone(), r.kind(), why.to_string());
                        let skipped = Skipped {
                            model,
                            engine,
                            test: Some(test),
                            why,
                        };
                        sit_out(&mut receipt, &mut progress, skipped);
                    }
                }
            }
            if references.is_empty() {
                progress(&format!(
                    "{name} {test}: no engine to compare with; skipped"
                ));
                continue;
            }
            let references = references.as_slice();
            let quiet_then_busy = std::iter::once(None).chain(plan.contention.map(Some));
            let cells = plan
                .threads
                .iter()
                .flat_map(|&t| quiet_then_busy.clone().map(move |b| (t, b)));
            for (threads, busy_cpu) in cells {
                let cell = Cell {
                    model,
                    name: &name,
                    test,
                    threads,
                };
                let busy = crate::contention::busy(busy_cpu)?;
                if let Some(cpu) = busy_cpu {
                    progress(&format!(
                        "{name} {test} t{threads}: a busy loop on CPU {cpu}"
                    ));
                }
                let (ours, theirs) = cell.measure(plan.reps, pocket, references, &mut progress)?;
                drop(busy);
                // Mainline llama-bench's model_size is the tensor bytes a decoded token
                // reads, and pocket prints the same; ik_llama.cpp counts its own way.
                let model_bytes = theirs
                    .get(&EngineKind::LlamaCpp)
                    .into_iter()
                    .flatten()
                    .chain(&ours)
                    .chain(theirs.values().flatten())
                    .map(|s| s.row.model_size)
                    .find(|&b| b > 0);
                let engines = theirs
                    .iter()
                    .map(|(k, s)| (*k, EngineSamples::from_samples(s)))
                    .collect();
                let mut row = Comparison::new(
                    &name,
                    model_bytes,
                    test,
                    threads,
                    EngineSamples::from_samples(&ours),
                    engines,
                    bandwidth.as_ref(),
                );
                row.busy_cpu = busy_cpu;
                receipt.results.push(row);
            }
        }
    }
    receipt.validate()?;
    Ok(receipt)
}

/// Notes in the receipt and the progress that an engine sits out a model (or one test of
/// it).
fn sit_out(receipt: &mut Receipt, progress: &mut impl FnMut(&str), skipped: Skipped) {
    let test = skipped.test.map_or(String::new(), |t| format!(" {t}"));
    let Skipped {
        model, engine, why, ..
    } = &skipped;
    progress(&format!("{model}{test}: {engine} skipped: {why}"));
    receipt.skipped.push(skipped);
}

/// One (model, test, threads) of the plan.
struct Cell<'a> {
    model: &'a std::path::Path,
    name: &'a str,
    test: Test,
    threads: u32,
}

type CellSamples = (Vec<Sample>, BTreeMap<EngineKind, Vec<Sample>>);

impl Cell<'_> {
    /// `reps` repetitions of every engine, the engines' order rotating by one each time.
    fn measure(
        &self,
        reps: u32,
        pocket: &dyn Engine,
        references: &[&dyn Reference],
        progress: &mut impl FnMut(&str),
    ) -> Result<CellSamples> {
        let mut ours = Vec::new();
        let mut theirs: BTreeMap<EngineKind, Vec<Sample>> = BTreeMap::new();
        let n = references.len() + 1;
        for rep in 1..=reps {
            for slot in 0..n {
                // Slot 0 of the rotation is pocket; slot i > 0 is references[i - 1].
                let which = (slot + rep as usize - 1) % n;
                let engine: &dyn Engine = match which {
                    0 => pocket,
                    i => references[i - 1],
                };
                let s = self.one(engine, rep, reps, progress)?;
                match which {
                    0 => ours.push(s),
                    i => theirs.entry(references[i - 1].kind()).or_default().push(s),
                }
            }
        }
        Ok((ours, theirs))
    }

    fn one(
        &self,
        engine: &dyn Engine,
        rep: u32,
        reps: u32,
        progress: &mut impl FnMut(&str),
    ) -> Result<Sample> {
        let (name, test, threads) = (self.name, self.test, self.threads);
        let s = engine
            .bench(self.model, test, threads)
            .map_err(|e| crate::Error::Engine {
                run: format!("{} on {name} {test} t{threads}", engine.name()),
                source: Box::new(e),
            })?;
        progress(&format!(
            "{name} {test} t{threads} rep {rep}/{reps}: {} {:.2} t/s, peak RSS {:.1} MiB",
            engine.name(),
            s.ts,
            s.peak_rss_bytes as f64 / (1 << 20) as f64
        ));
        Ok(s)
    }
}

/// A receipt for this machine (with `bandwidth`, if probed), llama.cpp's reference build
/// (what parity runs against), and no engines or results yet.
pub fn new_receipt(
    bandwidth: Option<crate::bandwidth::Bandwidth>,
    repo: &std::path::Path,
) -> Receipt {
    let machine = Machine {
        name: crate::sysinfo::machine_name(),
        sysinfo: crate::sysinfo::SysInfo::detect(),
        bandwidth,
    };
    let mut r = Receipt::new(machine, crate::sysinfo::pocket_commit(repo));
    r.llama_cpp_reference_build = LlamaTools::locate().ok().and_then(|t| t.reference_info());
    r
}
