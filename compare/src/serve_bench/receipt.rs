//! The serving benchmark's receipt: every request's timing, each (engine, streams) level's
//! summary (time to first token median and p90, aggregate generated tokens/s), and the
//! ratios the targets are stated in.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::client::StreamTiming;
use super::server::Engine;
use crate::sysinfo::SysInfo;

/// The receipt's `kind`, so that a reader can tell it from `pocket compare`'s.
pub const KIND: &str = "pocket-serve-bench";
/// Targets of issue #14, at this many streams.
pub const TARGET_STREAMS: usize = 4;
pub const TARGET_SCALING: f64 = 2.5;
pub const TARGET_VS_LLAMA: f64 = 1.5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeReceipt {
    #[serde(flatten)]
    pub run: RunInfo,
    pub settings: Settings,
    pub models: Vec<ModelResult>,
}

/// Where and with what a benchmark ran: the fields every serving receipt starts with
/// (this one's and the speculative workload set's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// [`KIND`] or [`super::spec_receipt::KIND`].
    pub kind: String,
    pub created: String,
    pub pocket_commit: String,
    /// llama-server's build line (BUILD_INFO of the reference build), if it ran.
    pub llama_server_build: Option<String>,
    pub machine_name: String,
    pub sysinfo: SysInfo,
    /// `/proc/loadavg`'s 1-minute figure before and after (other work on the machine).
    pub load_average: [Option<f64>; 2],
}

/// What every level ran with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Prompt tokens per request (the same token ids for both engines).
    pub n_prompt: usize,
    /// Tokens generated per request (`n_predict`, `ignore_eos`).
    pub n_predict: usize,
    /// `-c` of both servers (split over the slots by both).
    pub ctx_size: usize,
    /// `-t` of both servers.
    pub threads: u32,
    /// Batches of concurrent requests per level and engine.
    pub repetitions: u32,
    /// The levels: concurrent streams = `-np` slots.
    pub streams: Vec<usize>,
    /// The request body's constant fields.
    pub request: String,
    /// The prompt's text (absent in receipts from before workloads: repeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<super::Workload>,
    /// Flags both servers were started with beyond the common ones (speculative decoding).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    /// The file name without `.gguf`.
    pub model: String,
    pub path: String,
    pub levels: Vec<Level>,
    pub ratios: Ratios,
}

/// One engine at one number of concurrent streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub engine: Engine,
    pub streams: usize,
    pub ttft_ms_median: f64,
    pub ttft_ms_p90: f64,
    /// Median over the repetitions of (generated tokens of the batch / its wall time).
    pub aggregate_tps: f64,
    pub aggregate_tps_reps: Vec<f64>,
    /// Per stream: tokens after the first / time after the first token (median).
    pub stream_decode_tps_median: f64,
    /// Generated tokens of one batch (streams × n_predict).
    pub generated_tokens_per_rep: u64,
    /// From the first request sent to the last final event, per repetition.
    pub wall_ms_reps: Vec<f64>,
    pub requests: Vec<RequestRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub rep: u32,
    pub ttft_ms: f64,
    pub total_ms: f64,
    pub tokens_predicted: u64,
    pub tokens_evaluated: u64,
    pub token_events: u64,
    pub server_prompt_n: Option<u64>,
    pub server_prompt_ms: Option<f64>,
    pub server_predicted_ms: Option<f64>,
    /// `timings.draft_n` / `draft_n_accepted` (absent when nothing was drafted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u64>,
}

/// Ratios of aggregate tokens/s, keyed by the number of streams.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// pocket at N streams / pocket at 1 stream.
    pub pocket_scaling: BTreeMap<usize, f64>,
    /// pocket / llama-server at the same number of streams.
    pub pocket_over_llama_server: BTreeMap<usize, f64>,
}

/// One batch of concurrent requests as measured.
pub struct Batch {
    pub started: Instant,
    pub requests: Vec<StreamTiming>,
}

impl Batch {
    pub fn generated(&self) -> u64 {
        self.requests
            .iter()
            .map(|r| r.server.tokens_predicted)
            .sum()
    }

    pub fn wall_secs(&self) -> f64 {
        let end = self.requests.iter().map(|r| r.done_at).max();
        end.map_or(0.0, |e| (e - self.started).as_secs_f64())
    }

    pub fn aggregate_tps(&self) -> f64 {
        self.generated() as f64 / self.wall_secs()
    }
}

impl Level {
    /// The summary of an engine's batches at `streams`.
    pub fn from_batches(engine: Engine, streams: usize, batches: &[Batch]) -> Level {
        let requests: Vec<RequestRecord> = batches
            .iter()
            .enumerate()
            .flat_map(|(rep, b)| b.requests.iter().map(move |r| record(rep as u32, r)))
            .collect();
        let ttft: Vec<f64> = requests.iter().map(|r| r.ttft_ms).collect();
        let decode: Vec<f64> = requests
            .iter()
            .filter(|r| r.tokens_predicted > 1 && r.total_ms > r.ttft_ms)
            .map(|r| (r.tokens_predicted - 1) as f64 * 1e3 / (r.total_ms - r.ttft_ms))
            .collect();
        let agg: Vec<f64> = batches.iter().map(Batch::aggregate_tps).collect();
        Level {
            engine,
            streams,
            ttft_ms_median: median(&ttft),
            ttft_ms_p90: percentile(&ttft, 0.9),
            aggregate_tps: median(&agg),
            aggregate_tps_reps: agg,
            stream_decode_tps_median: median(&decode),
            generated_tokens_per_rep: batches.first().map_or(0, Batch::generated),
            wall_ms_reps: batches.iter().map(|b| b.wall_secs() * 1e3).collect(),
            requests,
        }
    }
}

/// One request as the receipt keeps it (the `rep`-th batch's).
pub fn record(rep: u32, r: &StreamTiming) -> RequestRecord {
    RequestRecord {
        rep,
        ttft_ms: r.ttft.as_secs_f64() * 1e3,
        total_ms: r.total.as_secs_f64() * 1e3,
        tokens_predicted: r.server.tokens_predicted,
        tokens_evaluated: r.server.tokens_evaluated,
        token_events: r.token_events,
        server_prompt_n: r.server.prompt_n,
        server_prompt_ms: r.server.prompt_ms,
        server_predicted_ms: r.server.predicted_ms,
        draft_n: r.server.draft_n,
        draft_n_accepted: r.server.draft_n_accepted,
    }
}

impl ModelResult {
    pub fn new(model: String, path: String, levels: Vec<Level>) -> ModelResult {
        let ratios = Ratios::of(&levels);
        ModelResult {
            model,
            path,
            levels,
            ratios,
        }
    }

    pub fn level(&self, engine: Engine, streams: usize) -> Option<&Level> {
        self.levels
            .iter()
            .find(|l| l.engine == engine && l.streams == streams)
    }
}

impl Ratios {
    fn of(levels: &[Level]) -> Ratios {
        let tps = |e: Engine, s: usize| {
            levels
                .iter()
                .find(|l| l.engine == e && l.streams == s)
                .map(|l| l.aggregate_tps)
        };
        let mut r = Ratios::default();
        let one = tps(Engine::Pocket, 1);
        for l in levels.iter().filter(|l| l.engine == Engine::Pocket) {
            if let Some(one) = one {
                r.pocket_scaling.insert(l.streams, l.aggregate_tps / one);
            }
            if let Some(llama) = tps(Engine::LlamaServer, l.streams) {
                r.pocket_over_llama_server
                    .insert(l.streams, l.aggregate_tps / llama);
            }
        }
        r
    }
}

/// The middle value (mean of the two middle ones for an even count); 0 for none.
pub fn median(v: &[f64]) -> f64 {
    let s = sorted(v);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile (`q` in 0..=1): the smallest value with at least q of the
/// values at or below it; 0 for none.
pub fn percentile(v: &[f64], q: f64) -> f64 {
    let s = sorted(v);
    if s.is_empty() {
        return 0.0;
    }
    let rank = (q * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_nearest_rank_percentile() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 0.9), 9.0);
        assert_eq!(percentile(&ten, 1.0), 10.0);
        assert_eq!(percentile(&[5.0], 0.9), 5.0);
        assert_eq!(percentile(&[], 0.9), 0.0);
    }

    fn level(engine: Engine, streams: usize, tps: f64) -> Level {
        Level {
            engine,
            streams,
            ttft_ms_median: 1.0,
            ttft_ms_p90: 1.0,
            aggregate_tps: tps,
            aggregate_tps_reps: vec![tps],
            stream_decode_tps_median: tps,
            generated_tokens_per_rep: 1,
            wall_ms_reps: vec![1.0],
            requests: vec![],
        }
    }

    #[test]
    fn ratios_are_pocket_over_its_single_stream_and_over_llama_server() {
        let levels = vec![
            level(Engine::Pocket, 1, 100.0),
            level(Engine::LlamaServer, 1, 80.0),
            level(Engine::Pocket, 4, 300.0),
            level(Engine::LlamaServer, 4, 150.0),
        ];
        let r = Ratios::of(&levels);
        assert_eq!(r.pocket_scaling[&1], 1.0);
        assert_eq!(r.pocket_scaling[&4], 3.0);
        assert_eq!(r.pocket_over_llama_server[&1], 1.25);
        assert_eq!(r.pocket_over_llama_server[&4], 2.0);
    }
}
