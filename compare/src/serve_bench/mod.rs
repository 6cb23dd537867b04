//! `pocket compare --serve`: `pocket serve` against llama-server under concurrent load.
//!
//! For each model and each number of streams S, both servers run with the same model and
//! `-c`, `-np S`, `-t`; each receives batches of S concurrent greedy streaming `/completion`
//! requests (a fixed prompt of N token ids, `n_predict` M, `ignore_eos`, `cache_prompt:
//! false` so that every request prefills), the engines alternating batch by batch. Measured
//! per request: time to first token; per batch: generated tokens / wall time.
//!
//! Files: `server` (the child processes, killed on drop), `client` (hyper), `sse` (the
//! stream's events), `receipt` (results, statistics, ratios), `report` (results directory).

mod client;
mod error;
pub mod receipt;
pub mod report;
pub mod server;
pub mod spec_receipt;
pub mod spec_report;
pub mod spec_set;
pub mod sse;
pub mod workloads;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::task::JoinSet;

pub use error::ServeBenchError;
use receipt::{Batch, Level, ModelResult, RunInfo, ServeReceipt, Settings};
use server::{Engine, Launch, ServerProcess};

/// Which text the prompt is cut from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// One paragraph repeated to the prompt's length: the continuation copies it, as an
    /// extraction answer copies its input (where n-gram drafts are kept).
    Repeat,
    /// Prose without repetition (PROSE_TEXT, cut to the prompt's length).
    Prose,
}

/// Text without repeats, ~300 tokens, for the prose workload.
const PROSE_TEXT: &str = "Marta had kept the lighthouse for eleven winters before the     letter came. It arrived folded twice, smelling faintly of diesel and oranges, and it     asked her, in a careful hand she did not recognise, to meet a stranger at the harbour     on the first calm morning of spring. She read it by the lamp, turned it over, found     nothing on the back but a drawing of a small boat with a red sail. The island had no     red sails; the fishermen painted theirs grey, or left them the colour of old bread.     For a week she told herself she would not go. She mended the stove, counted the tins     in the pantry, wrote the weather in the log with more care than usual, and watched     the sea as if it might answer for her. On the eighth day the wind dropped, the gulls     came back to the rocks, and the water lay so flat that the mainland hills seemed to     float above it. She put on her good coat, the one with the brass buttons her father     had sewn on, and walked down the cliff path before she could change her mind. ";

/// Text the repeat prompt is cut from (tokenized by the first server, then repeated).
const PROMPT_TEXT: &str = "The history of the city begins with a small settlement on the \
    river, where farmers and traders met to exchange grain, wool and tools. Over the \
    centuries it grew into a market town, then a port, and finally a capital whose \
    libraries, bridges and gardens drew visitors from every part of the continent. ";

/// What both serving benchmarks share: the models, the engines and their binaries, the
/// servers' `-c` and `-t`, and how long and how many the requests are.
#[derive(Debug, Clone)]
pub struct Runs {
    pub models: Vec<PathBuf>,
    pub engines: Vec<Engine>,
    /// This program (started as `pocket serve`).
    pub pocket_exe: PathBuf,
    pub llama_server: PathBuf,
    pub n_predict: usize,
    pub ctx_size: usize,
    pub threads: u32,
    pub repetitions: u32,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    pub runs: Runs,
    pub streams: Vec<usize>,
    pub n_prompt: usize,
    /// The prompt's text: repeated (copy-heavy) or prose.
    pub workload: Workload,
    /// Flags both servers get (speculative decoding), recorded in the receipt.
    pub server_args: Vec<String>,
}

impl Plan {
    /// Refuses a context too small for a request in each slot (both servers split `-c`).
    pub fn check(&self) -> Result<(), ServeBenchError> {
        let slots = self.streams.iter().copied().max().unwrap_or(1);
        let per_slot = self.runs.ctx_size / slots;
        if per_slot < self.n_prompt + self.runs.n_predict {
            return Err(ServeBenchError::ContextTooSmall {
                ctx_size: self.runs.ctx_size,
                slots,
                per_slot,
                n_prompt: self.n_prompt,
                n_predict: self.runs.n_predict,
            });
        }
        Ok(())
    }

    /// The settings as the receipt records them.
    pub fn settings(&self) -> Settings {
        Settings {
            n_prompt: self.n_prompt,
            n_predict: self.runs.n_predict,
            ctx_size: self.runs.ctx_size,
            threads: self.runs.threads,
            repetitions: self.runs.repetitions,
            streams: self.streams.clone(),
            request: request_fields(self.runs.n_predict).to_string(),
            workload: Some(self.workload),
            server_args: self.server_args.clone(),
        }
    }
}

/// Runs the plan; Ctrl-C stops it (and the servers) with [`ServeBenchError::Interrupted`].
pub fn run(plan: &Plan) -> Result<Vec<ModelResult>, ServeBenchError> {
    plan.check()?;
    interruptible(bench(plan))
}

/// Runs `work` to its end or to Ctrl-C ([`ServeBenchError::Interrupted`]; the servers it
/// started are dropped, so killed, either way).
fn interruptible<T>(
    work: impl std::future::Future<Output = Result<T, ServeBenchError>>,
) -> Result<T, ServeBenchError> {
    // One thread: the client does little work, and leaves the cores to the servers.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        tokio::select! {
            r = work => r,
            _ = tokio::signal::ctrl_c() => Err(ServeBenchError::Interrupted),
        }
    })
}

/// The model's file name without `.gguf`.
fn model_name(model: &std::path::Path) -> String {
    model.file_stem().map_or_else(
        || model.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// `r`, if it generated exactly `n_predict` tokens (as `ignore_eos` asks). The server's
/// final count decides: a token event may carry more than one token, because both servers
/// hold back a token that ends inside a multi-byte character until the character is
/// complete (a synthetic model's random text meets that often), so there may be fewer
/// events than tokens, never more.
fn check_count(
    r: client::StreamTiming,
    n_predict: u64,
) -> Result<client::StreamTiming, ServeBenchError> {
    if r.server.tokens_predicted != n_predict || r.token_events > n_predict {
        return Err(ServeBenchError::TokenCount {
            got: if r.token_events > n_predict {
                r.token_events
            } else {
                r.server.tokens_predicted
            },
            want: n_predict,
        });
    }
    Ok(r)
}

/// The constant fields of every request.
pub fn request_fields(n_predict: usize) -> Value {
    json!({
        "n_predict": n_predict,
        "temperature": 0,
        "ignore_eos": true,
        "cache_prompt": false,
        "stream": true,
    })
}

/// A measured request of `prompt` ([`request_fields`]) and the server's warm-up request
/// (the same, 4 tokens).
fn request_bodies(n_predict: usize, prompt: &[u32]) -> (Value, Value) {
    let mut body = request_fields(n_predict);
    body["prompt"] = json!(prompt);
    let mut warm = body.clone();
    warm["n_predict"] = json!(4);
    (body, warm)
}

async fn bench(plan: &Plan) -> Result<Vec<ModelResult>, ServeBenchError> {
    let mut results = Vec::new();
    for model in &plan.runs.models {
        let name = model_name(model);
        let mut levels = Vec::new();
        let mut prompt: Option<Vec<u32>> = None;
        for &streams in &plan.streams {
            let launch = Launch {
                model: model.clone(),
                ctx_size: plan.runs.ctx_size,
                slots: streams,
                threads: plan.runs.threads,
                extra: plan.server_args.clone(),
            };
            progress(&format!(
                "{name}: {streams} stream(s): starting the servers"
            ));
            let mut servers = Vec::new();
            for &e in &plan.runs.engines {
                servers.push(
                    ServerProcess::start(
                        e,
                        &launch,
                        &plan.runs.pocket_exe,
                        &plan.runs.llama_server,
                    )
                    .await?,
                );
            }
            let ids = match &prompt {
                Some(p) => p.clone(),
                None => fixed_prompt(servers[0].addr, plan.n_prompt, plan.workload).await?,
            };
            prompt = Some(ids.clone());
            levels.extend(measure_level(plan, &name, streams, &servers, &ids).await?);
        }
        results.push(ModelResult::new(name, model.display().to_string(), levels));
    }
    Ok(results)
}

/// Every engine's batches at one number of streams (the servers already running).
async fn measure_level(
    plan: &Plan,
    name: &str,
    streams: usize,
    servers: &[ServerProcess],
    prompt: &[u32],
) -> Result<Vec<Level>, ServeBenchError> {
    let (body, warm) = request_bodies(plan.runs.n_predict, prompt);
    for s in servers {
        // The first request pays for page faults and allocations.
        client::stream_completion(s.addr, &warm)
            .await
            .map_err(|e| in_run(s, streams, e))?;
    }
    let mut batches: HashMap<Engine, Vec<Batch>> = HashMap::new();
    for rep in 0..plan.runs.repetitions {
        // Alternate which engine goes first, so that drift in the machine's load is shared.
        let mut order: Vec<&ServerProcess> = servers.iter().collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for s in order {
            let b = run_batch(s.addr, &body, streams, plan.runs.n_predict as u64)
                .await
                .map_err(|e| in_run(s, streams, e))?;
            progress(&format!(
                "{name}: {} {streams} stream(s) rep {}/{}: {:.1} t/s aggregate, TTFT {:.0} ms (median)",
                s.engine.name(),
                rep + 1,
                plan.runs.repetitions,
                b.aggregate_tps(),
                receipt::median(
                    &b.requests
                        .iter()
                        .map(|r| r.ttft.as_secs_f64() * 1e3)
                        .collect::<Vec<_>>()
                ),
            ));
            batches.entry(s.engine).or_default().push(b);
        }
    }
    Ok(servers
        .iter()
        .map(|s| Level::from_batches(s.engine, streams, &batches[&s.engine]))
        .collect())
}

/// The error of a run, naming the server; if the server died, its stderr says why.
fn in_run(s: &ServerProcess, streams: usize, e: ServeBenchError) -> ServeBenchError {
    let source = match e {
        ServeBenchError::Http(what) => s.failed(&format!("stopped answering ({what})")),
        other => other,
    };
    ServeBenchError::Run {
        engine: s.engine.name(),
        streams,
        source: Box::new(source),
    }
}

/// `streams` concurrent requests, each on its own connection, sent together.
async fn run_batch(
    addr: SocketAddr,
    body: &Value,
    streams: usize,
    n_predict: u64,
) -> Result<Batch, ServeBenchError> {
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..streams {
        let b = body.clone();
        set.spawn(async move { client::stream_completion(addr, &b).await });
    }
    let mut requests = Vec::with_capacity(streams);
    while let Some(r) = set.join_next().await {
        let r = r.map_err(|e| ServeBenchError::Http(format!("request task: {e}")))??;
        requests.push(check_count(r, n_predict)?);
    }
    Ok(Batch { started, requests })
}

/// `n` token ids: the server's tokens of [`PROMPT_TEXT`], repeated and cut.
async fn fixed_prompt(
    addr: SocketAddr,
    n: usize,
    workload: Workload,
) -> Result<Vec<u32>, ServeBenchError> {
    let text = match workload {
        Workload::Repeat => PROMPT_TEXT,
        Workload::Prose => PROSE_TEXT,
    };
    let ids = client::tokenize(addr, text, false).await?;
    if workload == Workload::Prose && ids.len() < n {
        return Err(ServeBenchError::ProseTooShort {
            tokens: ids.len(),
            n_prompt: n,
        });
    }
    Ok(ids.iter().copied().cycle().take(n).collect())
}

fn progress(msg: &str) {
    eprintln!("[serve bench] {msg}");
}

/// The whole receipt of a finished run.
pub fn receipt_of(plan: &Plan, models: Vec<ModelResult>, load_before: Option<f64>) -> ServeReceipt {
    ServeReceipt {
        run: run_info(
            receipt::KIND,
            &plan.runs.engines,
            &plan.runs.llama_server,
            load_before,
        ),
        settings: plan.settings(),
        models,
    }
}

/// The receipt's head: when, which commit and llama-server build, on what machine.
pub fn run_info(
    kind: &str,
    engines: &[Engine],
    llama_server: &std::path::Path,
    load_before: Option<f64>,
) -> RunInfo {
    let build = llama_server
        .parent()
        .and_then(|bin| bin.parent())
        .map(|d| d.join("BUILD_INFO"));
    let llama_server_build = build
        .filter(|_| engines.contains(&Engine::LlamaServer))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "));
    RunInfo {
        kind: kind.into(),
        created: crate::receipt::utc_now(),
        pocket_commit: crate::sysinfo::pocket_commit(std::path::Path::new(env!(
            "CARGO_MANIFEST_DIR"
        ))),
        llama_server_build,
        machine_name: crate::sysinfo::machine_name(),
        sysinfo: crate::sysinfo::SysInfo::detect(),
        load_average: [load_before, load_average()],
    }
}

/// The 1-minute load average (`/proc/loadavg`), where there is one.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn timing(token_events: u64, tokens_predicted: u64) -> client::StreamTiming {
        client::StreamTiming {
            ttft: Duration::from_millis(5),
            total: Duration::from_millis(50),
            done_at: Instant::now(),
            token_events,
            server: sse::FinalStats {
                tokens_predicted,
                tokens_evaluated: 16,
                prompt_n: Some(16),
                prompt_ms: None,
                predicted_ms: None,
                draft_n: None,
                draft_n_accepted: None,
            },
            text: String::new(),
        }
    }

    #[test]
    fn a_count_is_the_servers_and_events_may_carry_several_tokens() {
        // One event per token, or fewer (a held-back partial character): accepted.
        assert!(check_count(timing(128, 128), 128).is_ok());
        assert!(check_count(timing(127, 128), 128).is_ok());
        // The server stopped short, or more events than tokens: refused.
        let short = check_count(timing(127, 127), 128).unwrap_err().to_string();
        assert!(short.contains("127 tokens, not the 128"), "{short}");
        assert!(check_count(timing(129, 128), 128).is_err());
    }
}
