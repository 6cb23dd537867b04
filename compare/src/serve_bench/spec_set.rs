//! Runs the speculative-decoding workload set: for every model and workload, fresh servers
//! (each engine without and with speculation, `-np 1`), one warm-up request each, then `-r`
//! rounds of one greedy streamed request per server, the servers' order rotating round by
//! round so that drift in the machine's load is shared.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::client;
use super::server::{Engine, Launch, ServerProcess};
use super::spec_receipt::{SpecModel, SpecRun, SpecSettings, WorkloadResult};
use super::workloads::{prompt_ids, PromptFormat, SpecWorkload};
use super::{check_count, in_run, progress, request_fields, ServeBenchError};

/// What the set measures.
#[derive(Debug, Clone)]
pub struct SpecPlan {
    pub models: Vec<PathBuf>,
    pub workloads: Vec<SpecWorkload>,
    pub n_predict: usize,
    pub ctx_size: usize,
    pub threads: u32,
    pub repetitions: u32,
    pub engines: Vec<Engine>,
    /// The speculating servers' flags (`--spec-type ngram-simple --spec-draft-n-max 8`).
    pub spec_args: Vec<String>,
    pub pocket_exe: PathBuf,
    pub llama_server: PathBuf,
}

impl SpecPlan {
    pub fn settings(&self) -> SpecSettings {
        SpecSettings {
            n_predict: self.n_predict,
            ctx_size: self.ctx_size,
            threads: self.threads,
            repetitions: self.repetitions,
            request: request_fields(self.n_predict).to_string(),
            spec_args: self.spec_args.clone(),
        }
    }
}

/// Runs the set; Ctrl-C stops it (and the servers).
pub fn run(plan: &SpecPlan) -> Result<Vec<SpecModel>, ServeBenchError> {
    super::interruptible(async {
        let mut models = Vec::new();
        for model in &plan.models {
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
        for &engine in &plan.engines {
            for spec in [false, true] {
                let launch = Launch {
                    model: model.to_path_buf(),
                    ctx_size: plan.ctx_size,
                    slots: 1,
                    threads: plan.threads,
                    extra: if spec {
                        plan.spec_args.clone()
                    } else {
                        Vec::new()
                    },
                };
                let s = ServerProcess::start(engine, &launch, &plan.pocket_exe, &plan.llama_server)
                    .await?;
                servers.push((s, spec));
            }
        }
        let prompt = prompt_ids(servers[0].0.addr, w, format).await?;
        if prompt.len() + plan.n_predict > plan.ctx_size {
            return Err(ServeBenchError::ContextTooSmall {
                ctx_size: plan.ctx_size,
                slots: 1,
                per_slot: plan.ctx_size,
                n_prompt: prompt.len(),
                n_predict: plan.n_predict,
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
    let mut body = request_fields(plan.n_predict);
    body["prompt"] = json!(prompt);
    let mut warm = body.clone();
    warm["n_predict"] = json!(4);
    for (s, _) in servers {
        // The first request pays for page faults and allocations.
        client::stream_completion(s.addr, &warm)
            .await
            .map_err(|e| in_run(s, 1, e))?;
    }
    let mut done = vec![Vec::new(); servers.len()];
    for rep in 0..plan.repetitions as usize {
        for k in 0..servers.len() {
            let i = (k + rep) % servers.len();
            let (s, spec) = &servers[i];
            let r = client::stream_completion(s.addr, &body)
                .await
                .and_then(|r| check_count(r, plan.n_predict as u64))
                .map_err(|e| in_run(s, 1, e))?;
            let secs = (r.total - r.ttft).as_secs_f64();
            progress(&format!(
                "{name}: {}: {}{} rep {}/{}: {:.1} t/s after the first token, {} of {} drafts kept",
                w.name(),
                s.engine.name(),
                if *spec { " spec" } else { "" },
                rep + 1,
                plan.repetitions,
                (r.tokens_predicted - 1) as f64 / secs,
                r.draft_n_accepted.unwrap_or(0),
                r.draft_n.unwrap_or(0),
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
