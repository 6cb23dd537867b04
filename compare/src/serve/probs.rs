//! Token probabilities for `n_probs` (llama-server) and `logprobs`/`top_logprobs` (OpenAI
//! chat): the log-softmax of the model's logits for the step, before any sampler (as
//! llama-server's default), or with `post_sampling_probs` the probabilities of the
//! candidates the sampler chain left (top-k, top-p, min-p, temperature) that it drew from.

use pocket_model::logprobs::{log_normalizer, logprob_with, top_logprobs};
use pocket_model::sampler::Candidate;
use pocket_model::tokenizer::Tokenizer;
use serde_json::{json, Value};

/// One token and its log-probability, with its text and bytes for the client.
#[derive(Clone, Debug)]
pub struct ProbEntry {
    pub id: u32,
    /// The log-probability, or with [`TokenProbs::post_sampling`] the probability.
    pub value: f32,
    pub text: String,
    pub bytes: Vec<u8>,
}

/// The chosen token of a step and the `k` most likely ones.
#[derive(Clone, Debug)]
pub struct TokenProbs {
    pub chosen: ProbEntry,
    pub top: Vec<ProbEntry>,
    /// The values are probabilities after the sampler chain (llama-server's `prob` /
    /// `top_probs`), not the model's log-probabilities (`logprob` / `top_logprobs`).
    pub post_sampling: bool,
}

fn entry(tok: &Tokenizer, id: u32, value: f32) -> ProbEntry {
    let bytes = tok.token_to_piece(id);
    ProbEntry {
        id,
        value,
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
        post_sampling: false,
    }
}

/// The probabilities after the sampler chain of one step: the softmax of the candidates it
/// left (`cands`, their logits already divided by the temperature), most likely first,
/// without those of probability 0; `greedy`: the chain kept the argmax `chosen` alone
/// (probability 1), as llama.cpp's greedy sampling does.
pub fn post_sampling_probs(
    tok: &Tokenizer,
    cands: &[Candidate],
    greedy: bool,
    chosen: u32,
    k: usize,
) -> TokenProbs {
    let mut ps: Vec<(u32, f32)> = if greedy {
        vec![(chosen, 1.0)]
    } else {
        let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        let exps: Vec<f64> = cands
            .iter()
            .map(|c| f64::from(c.logit - max).exp())
            .collect();
        let total: f64 = exps.iter().sum();
        cands
            .iter()
            .zip(&exps)
            .map(|(c, e)| (c.id, (e / total) as f32))
            .filter(|&(_, p)| p > 0.0)
            .collect()
    };
    ps.sort_by(|a, b| b.1.total_cmp(&a.1));
    let p_chosen = ps.iter().find(|p| p.0 == chosen).map_or(0.0, |p| p.1);
    ps.truncate(k);
    TokenProbs {
        chosen: entry(tok, chosen, p_chosen),
        top: ps.into_iter().map(|(id, p)| entry(tok, id, p)).collect(),
        post_sampling: true,
    }
}

impl ProbEntry {
    fn to_json(&self, key: &str) -> Value {
        let mut v = json!({"id": self.id, "token": self.text, "bytes": self.bytes});
        v[key] = json!(self.value);
        v
    }
}

impl TokenProbs {
    /// llama-server's `completion_probabilities` entry, which is also OpenAI's
    /// `logprobs.content` entry (token, logprob, bytes, top_logprobs; plus the id); after
    /// sampling: prob and top_probs.
    pub fn to_json(&self) -> Value {
        let (key, top_key) = match self.post_sampling {
            false => ("logprob", "top_logprobs"),
            true => ("prob", "top_probs"),
        };
        let mut v = self.chosen.to_json(key);
        v[top_key] = self.top.iter().map(|e| e.to_json(key)).collect();
        v
    }
}

/// A list of steps' probabilities as JSON.
pub fn probs_json(probs: &[TokenProbs]) -> Value {
    probs.iter().map(TokenProbs::to_json).collect()
}
