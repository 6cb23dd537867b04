//! Runs the speculative-decoding workload set: for every model and workload, fresh servers
//! (each engine without and with speculation, `-np 1`), one warm-up request each, then `-r`
//! rounds of one greedy streamed request per server, the servers' order rotating round by
//! round so that drift in the machine's load is shared.

use std::path::Path;

use super::client;
use super::server::{Launch, ServerProcess};
use super::spec_receipt::{SpecModel, SpecRun, SpecSettings, WorkloadResult};
use super::workloads::{prompt_ids, PromptFormat, SpecWorkload};
use super::{check_count, in_run, progress, request_bodies, request_fields, Runs, ServeBenchError};

/// What the set measures.
#[derive(Debug, Clone)]
pub struct SpecPlan {
    pub runs: Runs,
    pub workloads: Vec<SpecWorkload>,
    /// The speculating servers' flags (`--spec-type ngram-simple --spec-draft-n-max 8`).
    pub spec_args: Vec<String>,
}

impl SpecPlan {
    pub fn settings(&self) -> SpecSettings {
        SpecSettings {
            n_predict: self.runs.n_predict,
            ctx_size: self.runs.ctx_size,
            threads: self.runs.threads,
            repetitions: self.runs.repetitions,
            request: request_fields(self.runs.n_predict).to_string(),
            spec_args: self.spec_args.clone(),
        }
    }
}

/// Runs the set; Ctrl-C stops it (and the servers).
pub fn run(plan: &SpecPlan) -> Result<Vec<SpecModel>, ServeBenchError> {
    super::interruptible(async {
        let mut models = Vec::new();
        for model in &plan.runs.models {
            models.push(measure_model(plan, model).await?);
        }
        Ok(models)
    })
}

async fn measure_model(plan: &SpecPlan, model: &Path) -> Result<SpecModel, ServeBenchError> {
    let name = super::model_name(model);
    let format = PromptFormat::of_model(model)?;
    let mut workloads = Vec::new();
    for &w in &plan.workloads {
        progress(&format!("{name}: {}: starting the servers", w.name()));
        let mut servers = Vec::new();
        for &engine in &plan.runs.engines {
            for spec in [false, true] {
                let launch = Launch {
                    model: model.to_path_buf(),
                    ctx_size: plan.runs.ctx_size,
                    slots: 1,
                    threads: plan.runs.threads,
                    extra: if spec {
                        plan.spec_args.clone()
                    } else {
                        Vec::new()
                    },
                };
                let s = ServerProcess::start(
                    engine,
                    &launch,
                    &plan.runs.pocket_exe,
                    &plan.runs.llama_server,
                )
                .await?;
                servers.push((s, spec));
            }
        }
        let prompt = prompt_ids(servers[0].0.addr, w, format).await?;
        if prompt.len() + plan.runs.n_predict > plan.runs.ctx_size {
            return Err(ServeBenchError::ContextTooSmall {
                ctx_size: plan.runs.ctx_size,
                slots: 1,
                per_slot: plan.runs.ctx_size,
                n_prompt: prompt.len(),
                n_predict: plan.runs.n_predict,
            });
        }
        let runs = measure_workload(plan, &name, w, &servers, &prompt).await?;
        workloads.push(WorkloadResult::new(w, prompt.len(), runs));
        // The servers stop here: the next workload starts fresh ones.
    }
    Ok(SpecModel {
        model: name,
        path: model.display().to_string(),
        prompt_format: format,
        workloads,
    })
}

async fn measure_workload(
    plan: &SpecPlan,
    name: &str,
    w: SpecWorkload,
    servers: &[(ServerProcess, bool)],
    prompt: &[u32],
) -> Result<Vec<SpecRun>, ServeBenchError> {
    let (body, warm) = request_bodies(plan.runs.n_predict, prompt);
    for (s, _) in servers {
        // The first request pays for page faults and allocations.
        client::stream_completion(s.addr, &warm)
            .await
            .map_err(|e| in_run(s, 1, e))?;
    }
    let mut done = vec![Vec::new(); servers.len()];
    for rep in 0..plan.runs.repetitions as usize {
        for k in 0..servers.len() {
            let i = (k + rep) % servers.len();
            let (s, spec) = &servers[i];
            let r = client::stream_completion(s.addr, &body)
                .await
                .and_then(|r| check_count(r, plan.runs.n_predict as u64))
                .map_err(|e| in_run(s, 1, e))?;
            let secs = (r.total - r.ttft).as_secs_f64();
            progress(&format!(
                "{name}: {}: {}{} rep {}/{}: {:.1} t/s after the first token, {} of {} drafts kept",
                w.name(),
                s.engine.name(),
                if *spec { " spec" } else { "" },
                rep + 1,
                plan.runs.repetitions,
                (r.server.tokens_predicted - 1) as f64 / secs,
                r.server.draft_n_accepted.unwrap_or(0),
                r.server.draft_n.unwrap_or(0),
            ));
            done[i].push(r);
        }
    }
    servers
        .iter()
        .zip(&done)
        .map(|((s, spec), reqs)| SpecRun::of(s.engine, *spec, reqs))
        .collect()
}
