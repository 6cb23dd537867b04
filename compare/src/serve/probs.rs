//! Token probabilities for `n_probs` (llama-server) and `logprobs`/`top_logprobs` (OpenAI
//! chat): the log-softmax of the model's logits for the step, before any sampler (as
//! llama-server's default; its `post_sampling_probs` is not implemented and is refused).

use pocket_model::logprobs::{log_normalizer, logprob_with, top_logprobs};
use pocket_model::tokenizer::Tokenizer;
use serde_json::{json, Value};

/// One token and its log-probability, with its text and bytes for the client.
#[derive(Clone, Debug)]
pub struct ProbEntry {
    pub id: u32,
    pub logprob: f32,
    pub text: String,
    pub bytes: Vec<u8>,
}

/// The chosen token of a step and the `k` most likely ones.
#[derive(Clone, Debug)]
pub struct TokenProbs {
    pub chosen: ProbEntry,
    pub top: Vec<ProbEntry>,
}

fn entry(tok: &Tokenizer, id: u32, logprob: f32) -> ProbEntry {
    let bytes = tok.token_to_piece(id);
    ProbEntry {
        id,
        logprob,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
    }
}

/// The probabilities of one step whose logits are `logits` and sampled token `chosen`
/// (`pocket_model::logprobs`, the function `pocket run --n-probs` uses too).
pub fn token_probs(tok: &Tokenizer, logits: &[f32], chosen: u32, k: usize) -> TokenProbs {
    let log_z = log_normalizer(logits);
    TokenProbs {
        chosen: entry(tok, chosen, logprob_with(logits, log_z, chosen)),
        top: top_logprobs(logits, k)
            .into_iter()
            .map(|(id, lp)| entry(tok, id, lp))
            .collect(),
    }
}

impl ProbEntry {
    fn to_json(&self) -> Value {
        json!({"id": self.id, "token": self.text, "bytes": self.bytes, "logprob": self.logprob})
    }
}

impl TokenProbs {
    /// llama-server's `completion_probabilities` entry, which is also OpenAI's
    /// `logprobs.content` entry (token, logprob, bytes, top_logprobs; plus the id).
    pub fn to_json(&self) -> Value {
        let mut v = self.chosen.to_json();
        v["top_logprobs"] = self.top.iter().map(ProbEntry::to_json).collect();
        v
    }
}

/// A list of steps' probabilities as JSON.
pub fn probs_json(probs: &[TokenProbs]) -> Value {
    probs.iter().map(TokenProbs::to_json).collect()
}
