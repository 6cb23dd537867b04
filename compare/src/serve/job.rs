//! What the HTTP side hands the engine (a [`Job`]) and what comes back ([`Event`]s over the
//! job's own channel). A job whose receiver is gone (the client closed its connection) is
//! cancelled by the engine within one step.

use pocket_model::sampler::SamplerParams;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::probs::TokenProbs;

/// How to generate, after the request's fields are applied over the server's defaults.
#[derive(Clone, Debug)]
pub struct GenSettings {
    /// Tokens to generate at most; `None` = until the slot's context is full.
    pub n_predict: Option<usize>,
    pub stop: Vec<String>,
    pub sampling: SamplerParams,
    /// Never stop at an end-of-generation token (their logits are masked).
    pub ignore_eos: bool,
    /// Added to the logits before sampling (-inf: never); with `ignore_eos`, the
    /// end-of-generation tokens get -inf here, as llama-server shows it.
    pub logit_bias: Vec<(u32, f32)>,
    /// Reuse the slot's cached prefix (llama-server's `cache_prompt`, default on).
    pub cache_prompt: bool,
    /// Run on this slot (waits for it when busy).
    pub id_slot: Option<usize>,
    /// Report each token's log-probability and this many alternatives.
    pub probs: Option<usize>,
    /// Those are the probabilities after the sampler chain (llama-server's
    /// `post_sampling_probs`), not the model's log-probabilities.
    pub post_sampling_probs: bool,
    /// The LoRA adapters and scales the request runs with (serve/lora.rs).
    pub lora: pocket_model::lora::LoraSet,
    /// The grammar or schema the output follows (each job starts it afresh).
    pub grammar: Option<pocket_model::grammar::Grammar>,
    /// Stream [`Event::Progress`] when the prompt starts and after each batch of it.
    pub return_progress: bool,
}

impl GenSettings {
    /// llama-server's `generation_settings` object.
    pub fn to_json(&self, n_ctx: usize) -> Value {
        let s = &self.sampling;
        json!({
            "n_ctx": n_ctx,
            "n_predict": self.n_predict.map_or(-1, |n| n as i64),
            "temperature": s.temp,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "repeat_penalty": s.repeat_penalty,
            "repeat_last_n": s.repeat_last_n,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
            "seed": s.seed.map_or(-1, |x| x as i64),
            "stop": self.stop,
            "ignore_eos": self.ignore_eos,
            // A bias of -inf is JSON's null, as llama-server writes it.
            "logit_bias": self.logit_bias.iter().map(|&(t, b)| json!({"token": t, "bias": b})).collect::<Vec<_>>(),
            "cache_prompt": self.cache_prompt,
        })
    }
}

/// One generation request.
pub struct Job {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub settings: GenSettings,
    /// Whether the client reads the text as it comes. When not, the engine sends only the
    /// final result: a message per token would wake an HTTP thread per token, which on a
    /// machine whose cores all compute costs more than the token's send (~25 % of a
    /// 135M model's decode here).
    pub streams: bool,
    pub events: UnboundedSender<Event>,
}

/// Why a generation ended, in llama-server's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token.
    Eos,
    /// A stop string (the text is cut before it).
    Word(String),
    /// `n_predict` tokens, or the slot's context is full.
    Limit,
}

impl Finish {
    /// llama-server's `stop_type`.
    pub fn stop_type(&self) -> &'static str {
        match self {
            Finish::Eos => "eos",
            Finish::Word(_) => "word",
            Finish::Limit => "limit",
        }
    }
    /// OpenAI's `finish_reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Finish::Eos | Finish::Word(_) => "stop",
            Finish::Limit => "length",
        }
    }
    pub fn word(&self) -> &str {
        match self {
            Finish::Word(w) => w,
            _ => "",
        }
    }
}

/// Timings of one request, llama-server's `timings` object.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobTimings {
    /// Prompt tokens found in the slot's cache.
    pub cache_n: usize,
    /// Prompt tokens evaluated.
    pub prompt_n: usize,
    pub prompt_ms: f64,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    /// Speculative decoding: tokens drafted and verified, and how many were kept.
    pub draft_n: usize,
    pub draft_n_accepted: usize,
}

impl JobTimings {
    pub fn to_json(self) -> Value {
        let per_tok = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
        let per_s = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        // As llama-server: generation rates count decode steps, and the first token is
        // free (it comes from the logits of the prompt's last batch).
        let steps = self.predicted_n.saturating_sub(1);
        let mut t = json!({
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": per_tok(self.prompt_ms, self.prompt_n),
            "prompt_per_second": per_s(self.prompt_ms, self.prompt_n),
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": per_tok(self.predicted_ms, steps),
            "predicted_per_second": per_s(self.predicted_ms, steps),
        });
        // As llama-server: the draft counts only when something was drafted.
        if self.draft_n > 0 {
            t["draft_n"] = json!(self.draft_n);
            t["draft_n_accepted"] = json!(self.draft_n_accepted);
        }
        t
    }
}

/// llama-server's `prompt_progress`: the prompt's tokens in all, those found in the
/// slot's cache, those in the cache now (cached + evaluated), and the time since the slot
/// took the job; with the job's timings so far.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub total: usize,
    pub cache: usize,
    pub processed: usize,
    pub time_ms: u64,
    pub timings: JobTimings,
}

impl Progress {
    pub fn to_json(self) -> Value {
        json!({"total": self.total, "cache": self.cache, "processed": self.processed, "time_ms": self.time_ms})
    }
}

/// The end of a job.
#[derive(Clone, Debug)]
pub struct Done {
    pub id_slot: usize,
    /// The whole generated text (cut before a stop string).
    pub content: String,
    pub tokens: Vec<u32>,
    pub finish: Finish,
    /// Prompt tokens in all (cached + evaluated).
    pub n_prompt: usize,
    /// Every generated token's probabilities, when the request asked for them.
    pub probs: Vec<TokenProbs>,
    pub timings: JobTimings,
}

/// What the engine sends a job's client.
#[derive(Debug)]
pub enum Event {
    /// Text that is final (no stop string can begin in it), and the tokens it came from.
    Piece {
        text: String,
        tokens: Vec<u32>,
        /// The slot generating it (llama-server's `id_slot` in every streamed chunk).
        id_slot: usize,
        /// The tokens' probabilities, when the request asked for them.
        probs: Vec<TokenProbs>,
    },
    /// How far the prompt's evaluation is (`return_progress`).
    Progress(Progress),
    Done(Box<Done>),
    /// The engine could not run the job (a message for the client, HTTP 500).
    Failed(String),
}
