//! The server's counters, written by the engine thread, read by `/metrics` and `/slots`;
//! rendered in Prometheus text with llama.cpp's metric names so existing dashboards work.

use std::fmt::Write;

use serde_json::{json, Value};

#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Prompt tokens evaluated, and the time the steps that evaluated them took.
    pub prompt_tokens: u64,
    pub prompt_seconds: f64,
    /// Prompt tokens found in a slot's cache.
    pub prompt_tokens_cached: u64,
    pub tokens_predicted: u64,
    pub predicted_seconds: f64,
    /// Forward batches run, and the generating slots they carried in all.
    pub n_decode: u64,
    pub n_busy_slots: u64,
    /// Longest sequence seen (prompt + generation).
    pub n_tokens_max: u64,
    pub requests_processing: u64,
    pub requests_deferred: u64,
    /// Requests that ended because their client went away (pocket's own counter).
    pub requests_cancelled: u64,
    pub requests_done: u64,
    /// Speculative decoding: tokens drafted (and verified), kept, and verify steps.
    pub draft_tokens: u64,
    pub draft_tokens_accepted: u64,
    pub drafts: u64,
}

/// What `/slots` shows of one slot.
#[derive(Clone, Debug, Default)]
pub struct SlotView {
    pub id: usize,
    pub n_ctx: usize,
    pub id_task: Option<u64>,
    pub n_cached: usize,
    pub n_decoded: usize,
    pub n_remain: Option<usize>,
}

impl SlotView {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "n_ctx": self.n_ctx,
            "is_processing": self.id_task.is_some(),
            "id_task": self.id_task.map_or(-1, |t| t as i64),
            "n_tokens": self.n_cached,
            "next_token": [{
                "has_next_token": self.id_task.is_some(),
                "n_remain": self.n_remain.map_or(-1, |n| n as i64),
                "n_decoded": self.n_decoded,
            }],
        })
    }
}

impl Metrics {
    /// Prometheus text exposition (counters, then gauges), as llama-server's `/metrics`.
    pub fn prometheus(&self) -> String {
        let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let counters: [(&str, &str, f64); 10] = [
            (
                "prompt_tokens_total",
                "Number of prompt tokens processed.",
                self.prompt_tokens as f64,
            ),
            (
                "prompt_tokens_cached_total",
                "Number of prompt tokens reused from the cache",
                self.prompt_tokens_cached as f64,
            ),
            (
                "prompt_seconds_total",
                "Prompt process time",
                self.prompt_seconds,
            ),
            (
                "tokens_predicted_total",
                "Number of generation tokens processed.",
                self.tokens_predicted as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "Predict process time",
                self.predicted_seconds,
            ),
            (
                "n_decode_total",
                "Total number of llama_decode() calls",
                self.n_decode as f64,
            ),
            (
                "n_tokens_max",
                "Largest observed n_tokens.",
                self.n_tokens_max as f64,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "Speculative: Total draft tokens generated",
                self.draft_tokens as f64,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "Speculative: Total draft tokens accepted by the target model",
                self.draft_tokens_accepted as f64,
            ),
            (
                "spec_decode_num_drafts_total",
                "Speculative: Total speculative decoding verification steps",
                self.drafts as f64,
            ),
        ];
        let gauges: [(&str, &str, f64); 5] = [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s.",
                rate(self.prompt_tokens, self.prompt_seconds),
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s.",
                rate(self.tokens_predicted, self.predicted_seconds),
            ),
            (
                "requests_processing",
                "Number of requests processing.",
                self.requests_processing as f64,
            ),
            (
                "requests_deferred",
                "Number of requests deferred.",
                self.requests_deferred as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                self.n_busy_slots as f64 / (self.n_decode.max(1)) as f64,
            ),
        ];
        let mut out = String::new();
        for (kind, items) in [("counter", &counters[..]), ("gauge", &gauges[..])] {
            for (name, help, value) in items {
                let _ = writeln!(out, "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}");
            }
        }
        for (name, help, value) in [
            (
                "requests_cancelled_total",
                "Requests stopped because the client closed its connection.",
                self.requests_cancelled,
            ),
            (
                "requests_done_total",
                "Requests finished (any way).",
                self.requests_done,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP pocket:{name} {help}\n# TYPE pocket:{name} counter\npocket:{name} {value}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_llama_cpp_names() {
        let m = Metrics {
            prompt_tokens: 10,
            prompt_seconds: 0.5,
            tokens_predicted: 7,
            requests_processing: 2,
            ..Default::default()
        };
        let t = m.prometheus();
        assert!(
            t.contains(
                "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 10\n"
            ),
            "{t}"
        );
        assert!(t.contains("llamacpp:prompt_tokens_seconds 20\n"), "{t}");
        assert!(t.contains(
            "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n"
        ));
        assert!(t.contains("llamacpp:tokens_predicted_total 7\n"));
    }
}
