//! The receipt of the speculative-decoding workload set (`pocket compare --serve --workload
//! set`): for every model, workload, engine and speculation mode, each request's timing and
//! draft counts; per engine and workload, decode t/s with and without speculation, the
//! speed-up, acceptance and tokens per decode step; pocket's speculative rate over
//! llama-server's.

use serde::{Deserialize, Serialize};

use super::client::StreamTiming;
use super::receipt::{median, record, RequestRecord, RunInfo};
use super::server::Engine;
use super::workloads::{PromptFormat, SpecWorkload};
use super::ServeBenchError;

/// The receipt's `kind` (the serving benchmark's history leaves it out, as its own).
pub const KIND: &str = "pocket-spec-bench";
/// Targets of issue #16: decode speed-up on the copy workloads, and the most a prose
/// workload may lose.
pub const TARGET_COPY_SPEEDUP: f64 = 1.8;
pub const TARGET_PROSE_FLOOR: f64 = 0.95;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecReceipt {
    #[serde(flatten)]
    pub run: RunInfo,
    pub settings: SpecSettings,
    pub models: Vec<SpecModel>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecSettings {
    /// Tokens generated per request (`n_predict`, greedy, `ignore_eos`).
    pub n_predict: usize,
    /// `-c` of every server (one slot: `-np 1`).
    pub ctx_size: usize,
    pub threads: u32,
    /// Requests per workload, engine and mode.
    pub repetitions: u32,
    /// The request body's constant fields.
    pub request: String,
    /// The flags the speculating servers get (both engines the same).
    pub spec_args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecModel {
    pub model: String,
    pub path: String,
    pub prompt_format: PromptFormat,
    pub workloads: Vec<WorkloadResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub workload: SpecWorkload,
    /// Prompt token ids (rendered and tokenized by the first engine; the same for all).
    pub prompt_tokens: usize,
    pub runs: Vec<SpecRun>,
    pub engines: Vec<EngineSummary>,
    /// pocket's speculative decode t/s over llama-server's.
    pub pocket_spec_over_llama_server_spec: Option<f64>,
}

/// One engine in one mode on one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecRun {
    pub engine: Engine,
    pub speculative: bool,
    /// Median over the requests of (tokens after the first / time after the first token).
    pub decode_tps: f64,
    pub decode_tps_reps: Vec<f64>,
    pub ttft_ms_median: f64,
    /// Sums over the requests of the servers' `timings.draft_n` / `draft_n_accepted`.
    pub draft_n: u64,
    pub draft_n_accepted: u64,
    /// Tokens after the first / decode steps (forward passes) that made them.
    pub tokens_per_step: f64,
    /// The first request's text (greedy: every request's, unless the engine varies).
    pub text: String,
    /// Whether every request generated the same text.
    pub texts_agree: bool,
    pub requests: Vec<RequestRecord>,
}

/// An engine's plain and speculative runs on one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineSummary {
    pub engine: Engine,
    pub plain_tps: f64,
    pub spec_tps: f64,
    /// spec_tps / plain_tps.
    pub speedup: f64,
    /// Accepted / drafted with speculation (None: nothing was drafted).
    pub acceptance: Option<f64>,
    pub tokens_per_step: f64,
    /// Whether the speculative text equals the plain one (greedy decoding: it should).
    pub same_text: bool,
}

impl SpecRun {
    /// The summary of `requests` (each must have generated `n_predict` tokens).
    pub fn of(
        engine: Engine,
        speculative: bool,
        requests: &[StreamTiming],
    ) -> Result<SpecRun, ServeBenchError> {
        let decode: Vec<f64> = requests.iter().map(decode_tps).collect();
        let ttft: Vec<f64> = requests
            .iter()
            .map(|r| r.ttft.as_secs_f64() * 1e3)
            .collect();
        let draft_n = requests.iter().filter_map(|r| r.server.draft_n).sum();
        let mut tokens = 0;
        let mut steps = 0;
        let mut accepted_sum = 0;
        for r in requests {
            let after_first = r.server.tokens_predicted.saturating_sub(1);
            let accepted = r.server.draft_n_accepted.unwrap_or(0);
            if accepted > after_first {
                return Err(ServeBenchError::DraftCount {
                    engine: engine.name(),
                    accepted,
                    predicted: r.server.tokens_predicted,
                });
            }
            // Each step emits its own token plus the drafts it kept.
            tokens += after_first;
            steps += after_first - accepted;
            accepted_sum += accepted;
        }
        let text = requests.first().map(|r| r.text.clone()).unwrap_or_default();
        Ok(SpecRun {
            engine,
            speculative,
            decode_tps: median(&decode),
            decode_tps_reps: decode,
            ttft_ms_median: median(&ttft),
            draft_n,
            draft_n_accepted: accepted_sum,
            tokens_per_step: if steps == 0 {
                0.0
            } else {
                tokens as f64 / steps as f64
            },
            texts_agree: requests.iter().all(|r| r.text == text),
            text,
            requests: requests
                .iter()
                .enumerate()
                .map(|(i, r)| record(i as u32, r))
                .collect(),
        })
    }

    pub fn acceptance(&self) -> Option<f64> {
        (self.draft_n > 0).then(|| self.draft_n_accepted as f64 / self.draft_n as f64)
    }
}

/// One request's tokens after the first / its time after the first token.
fn decode_tps(r: &StreamTiming) -> f64 {
    let secs = (r.total - r.ttft).as_secs_f64();
    if secs > 0.0 {
        r.server.tokens_predicted.saturating_sub(1) as f64 / secs
    } else {
        0.0
    }
}

impl WorkloadResult {
    /// The summaries and ratio of a workload's runs.
    pub fn new(workload: SpecWorkload, prompt_tokens: usize, runs: Vec<SpecRun>) -> Self {
        let find =
            |e: Engine, spec: bool| runs.iter().find(|r| r.engine == e && r.speculative == spec);
        let engines: Vec<EngineSummary> = [Engine::Pocket, Engine::LlamaServer]
            .into_iter()
            .filter_map(|e| {
                let (plain, spec) = (find(e, false)?, find(e, true)?);
                Some(EngineSummary {
                    engine: e,
                    plain_tps: plain.decode_tps,
                    spec_tps: spec.decode_tps,
                    speedup: spec.decode_tps / plain.decode_tps,
                    acceptance: spec.acceptance(),
                    tokens_per_step: spec.tokens_per_step,
                    same_text: spec.text == plain.text,
                })
            })
            .collect();
        let spec_tps = |e: Engine| find(e, true).map(|r| r.decode_tps);
        let ratio = match (spec_tps(Engine::Pocket), spec_tps(Engine::LlamaServer)) {
            (Some(p), Some(l)) => Some(p / l),
            _ => None,
        };
        WorkloadResult {
            workload,
            prompt_tokens,
            runs,
            engines,
            pocket_spec_over_llama_server_spec: ratio,
        }
    }

    pub fn summary(&self, engine: Engine) -> Option<&EngineSummary> {
        self.engines.iter().find(|s| s.engine == engine)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::sse::FinalStats;
    use super::*;

    fn request(ttft_ms: u64, total_ms: u64, n: u64, drafts: Option<(u64, u64)>) -> StreamTiming {
        StreamTiming {
            ttft: Duration::from_millis(ttft_ms),
            total: Duration::from_millis(total_ms),
            done_at: Instant::now(),
            token_events: n,
            server: FinalStats {
                tokens_predicted: n,
                tokens_evaluated: 10,
                prompt_n: Some(10),
                prompt_ms: None,
                predicted_ms: None,
                draft_n: drafts.map(|d| d.0),
                draft_n_accepted: drafts.map(|d| d.1),
            },
            text: "same".into(),
        }
    }

    #[test]
    fn rates_steps_and_acceptance_come_from_the_requests() {
        // 33 tokens: 32 after the first in 1 s and in 0.5 s.
        let plain = SpecRun::of(Engine::Pocket, false, &[request(100, 1100, 33, None)]).unwrap();
        assert_eq!(plain.decode_tps, 32.0);
        assert_eq!((plain.tokens_per_step, plain.acceptance()), (1.0, None));
        // 24 of 30 drafts kept: 32 tokens in 32 - 24 = 8 steps.
        let reqs = [
            request(100, 600, 33, Some((30, 24))),
            request(100, 500, 33, Some((30, 24))),
        ];
        let spec = SpecRun::of(Engine::Pocket, true, &reqs).unwrap();
        assert_eq!(spec.decode_tps_reps, vec![64.0, 80.0]);
        assert_eq!(spec.decode_tps, 72.0);
        assert_eq!((spec.draft_n, spec.draft_n_accepted), (60, 48));
        assert_eq!(spec.acceptance(), Some(0.8));
        assert_eq!(spec.tokens_per_step, 4.0);
        let w = WorkloadResult::new(SpecWorkload::Quoting, 10, vec![plain, spec]);
        let s = w.summary(Engine::Pocket).unwrap();
        assert_eq!((s.speedup, s.same_text), (72.0 / 32.0, true));
        // No llama-server runs: no ratio.
        assert_eq!(w.pocket_spec_over_llama_server_spec, None);
    }

    #[test]
    fn more_accepted_drafts_than_tokens_is_an_error() {
        let e = SpecRun::of(Engine::LlamaServer, true, &[request(1, 2, 8, Some((9, 8)))]);
        assert!(
            matches!(e, Err(ServeBenchError::DraftCount { accepted: 8, .. })),
            "{e:?}"
        );
    }
}
