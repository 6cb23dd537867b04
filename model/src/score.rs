//! Scoring candidate continuations of one prompt (`pocket score`, `/v1/systemone`): the
//! log-probability of each option's tokens after the prompt, and the options' probabilities
//! normalized over the set.
//!
//! The prompt is evaluated once: its tokens go into sequence 0, which is forked into one
//! sequence per option (the keys and values are copied, not recomputed), and every option's
//! tokens then run in ONE forward batch, each row attending to its own sequence. Token `j`
//! of an option is scored by the logits of the row before it: the prompt's last row for
//! `j = 0`, the option's own row `j - 1` otherwise, so an option's last token is never
//! evaluated (only its probability is needed).
//!
//! Tokenization follows llama-perplexity's HellaSwag scoring: prompt + option is tokenized
//! as one text and the option's tokens are the ones after the prefix it shares with the
//! prompt's own tokens (BPE may merge across the boundary, so the shared prefix can be a
//! token shorter than the prompt; all options share the shortest one).

use crate::batch::Batch;
use crate::forward::{Model, ModelError, Session, SessionOptions};
use crate::logprobs::{log_normalizer, logprob_with};
use crate::tokenizer::Tokenizer;

#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error("no options to score")]
    NoOptions,
    #[error("option {index} ({text:?}) adds no token to the prompt")]
    EmptyOption { index: usize, text: String },
    #[error("the prompt and the options share no token (give a prompt)")]
    NoPrompt,
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// The tokens to score: the prefix every option continues, and each option's own tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScoreInput {
    pub prefix: Vec<u32>,
    pub options: Vec<Vec<u32>>,
}

impl ScoreInput {
    /// `prompt + option` for each option, tokenized as one text (BOS as the model adds it,
    /// special tokens parsed), split at the prefix all of them share with the prompt.
    pub fn from_text(tok: &Tokenizer, prompt: &str, options: &[&str]) -> Result<Self, ScoreError> {
        let prompt_tokens = tok.encode(prompt, true, true);
        let full: Vec<Vec<u32>> = options
            .iter()
            .map(|o| tok.encode(&format!("{prompt}{o}"), true, true))
            .collect();
        Self::split(&prompt_tokens, &full, options)
    }

    /// [`ScoreInput::from_text`] on tokens already made: `full[i]` is prompt + option `i`.
    pub fn split(prompt: &[u32], full: &[Vec<u32>], texts: &[&str]) -> Result<Self, ScoreError> {
        if full.is_empty() {
            return Err(ScoreError::NoOptions);
        }
        let common = |f: &Vec<u32>| prompt.iter().zip(f).take_while(|(a, b)| a == b).count();
        let shared = full.iter().map(common).min().unwrap_or(0);
        if shared == 0 {
            return Err(ScoreError::NoPrompt);
        }
        let mut options = Vec::with_capacity(full.len());
        for (index, f) in full.iter().enumerate() {
            if f.len() <= shared {
                let text = texts.get(index).copied().unwrap_or_default().to_string();
                return Err(ScoreError::EmptyOption { index, text });
            }
            options.push(f[shared..].to_vec());
        }
        Ok(ScoreInput {
            prefix: prompt[..shared].to_vec(),
            options,
        })
    }

    /// Tokens each sequence must hold: the prefix and the longest option.
    pub fn n_ctx(&self) -> usize {
        self.prefix.len() + self.options.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Rows the options' batch holds (every option token but each option's last).
    pub fn batch_rows(&self) -> usize {
        self.options.iter().map(|o| o.len() - 1).sum()
    }
}

/// One option's score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptionScore {
    /// Sum of the log-probabilities of the option's tokens, each given all before it.
    pub logprob: f64,
    pub n_tokens: usize,
    /// `exp(logprob)` normalized over the options (softmax of the logprobs).
    pub prob: f64,
}

/// Session options for scoring `input` (one sequence per option, each holding the prefix
/// and the longest option); `base` gives the threads, placement and cache types.
pub fn session_options(input: &ScoreInput, base: &SessionOptions) -> SessionOptions {
    SessionOptions {
        n_ctx: input.n_ctx(),
        n_seq: input.options.len(),
        ..*base
    }
}

/// Scores `input` in a new session made from `base` (see [`session_options`]).
pub fn score(
    model: &Model,
    base: &SessionOptions,
    input: &ScoreInput,
) -> Result<Vec<OptionScore>, ScoreError> {
    let mut s = Session::try_new(model, session_options(input, base))?;
    score_in(&mut s, input)
}

/// Scores `input` in `s`, which must hold one sequence per option with room for
/// [`ScoreInput::n_ctx`] tokens (its sequences are overwritten): the prompt once into
/// sequence 0, forked to the others, then every option in one batch.
pub fn score_in(s: &mut Session, input: &ScoreInput) -> Result<Vec<OptionScore>, ScoreError> {
    let k = input.options.len();
    if k == 0 {
        return Err(ScoreError::NoOptions);
    }
    if s.n_seq() < k {
        return Err(ModelError::BadSeq {
            row: 0,
            seq: k - 1,
            n_seq: s.n_seq(),
        }
        .into());
    }
    let n = input.prefix.len();
    if n == 0 {
        return Err(ScoreError::NoPrompt);
    }
    if let Some(index) = input.options.iter().position(Vec::is_empty) {
        let text = String::new();
        return Err(ScoreError::EmptyOption { index, text });
    }
    for seq in 0..k {
        s.clear_seq(seq);
    }
    let first = s.forward(&input.prefix, n - 1..n)?.to_vec();
    for seq in 1..k {
        s.fork_seq(0, seq, n)?;
    }
    let first_z = log_normalizer(&first);
    let mut logprob: Vec<f64> = input
        .options
        .iter()
        .map(|o| logprob_with(&first, first_z, o[0]) as f64)
        .collect();
    let mut batch = Batch::new();
    let mut row_of = Vec::new(); // (option, token scored by this logits row)
    for (seq, o) in input.options.iter().enumerate() {
        for (j, &t) in o[..o.len() - 1].iter().enumerate() {
            batch.add(t, n + j, seq, true);
            row_of.push((seq, o[j + 1]));
        }
    }
    if !batch.is_empty() {
        let n_vocab = s.model.config.n_vocab;
        let logits = s.forward_batch(&batch)?;
        for (row, &(seq, next)) in logits.chunks_exact(n_vocab).zip(&row_of) {
            logprob[seq] += logprob_with(row, log_normalizer(row), next) as f64;
        }
    }
    let probs = normalize(&logprob, 1.0);
    Ok(input
        .options
        .iter()
        .zip(logprob.iter().zip(probs))
        .map(|(o, (&logprob, prob))| OptionScore {
            logprob,
            n_tokens: o.len(),
            prob,
        })
        .collect())
}

/// The baseline [`score`] is measured against: each option alone in a fresh session,
/// prompt + option prefilled in one batch (the prompt evaluated once per option).
pub fn score_separately(
    model: &Model,
    base: &SessionOptions,
    input: &ScoreInput,
) -> Result<Vec<OptionScore>, ScoreError> {
    let mut out = Vec::with_capacity(input.options.len());
    let n = input.prefix.len();
    for o in &input.options {
        let o1 = SessionOptions {
            n_ctx: n + o.len(),
            n_seq: 1,
            ..*base
        };
        let mut s = Session::try_new(model, o1)?;
        let mut tokens = input.prefix.clone();
        tokens.extend_from_slice(&o[..o.len() - 1]);
        let logits = s.forward(&tokens, n - 1..tokens.len())?;
        let n_vocab = model.config.n_vocab;
        let lp: f64 = logits
            .chunks_exact(n_vocab)
            .zip(o)
            .map(|(row, &t)| logprob_with(row, log_normalizer(row), t) as f64)
            .sum();
        out.push(OptionScore {
            logprob: lp,
            n_tokens: o.len(),
            prob: 0.0,
        });
    }
    let lps: Vec<f64> = out.iter().map(|o| o.logprob).collect();
    for (o, p) in out.iter_mut().zip(normalize(&lps, 1.0)) {
        o.prob = p;
    }
    Ok(out)
}

/// Softmax of `scores / temperature` (f64; the largest score first subtracted).
pub fn normalize(scores: &[f64], temperature: f64) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores
        .iter()
        .map(|&s| ((s - max) / temperature).exp())
        .collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_takes_the_shortest_shared_prefix() {
        // Option 1 merges with the prompt's last token (BPE across the boundary).
        let prompt = [1, 10, 11];
        let full = vec![vec![1, 10, 11, 20, 21], vec![1, 10, 12, 22]];
        let s = ScoreInput::split(&prompt, &full, &["a", "b"]).unwrap();
        assert_eq!(s.prefix, [1, 10]);
        assert_eq!(s.options, [vec![11, 20, 21], vec![12, 22]]);
        assert_eq!((s.n_ctx(), s.batch_rows()), (5, 3));
        let e = ScoreInput::split(&prompt, &[vec![1, 10, 11]], &["x"]).unwrap_err();
        assert!(matches!(e, ScoreError::EmptyOption { index: 0, .. }), "{e}");
        let e = ScoreInput::split(&prompt, &[vec![9, 9]], &["x"]).unwrap_err();
        assert!(matches!(e, ScoreError::NoPrompt), "{e}");
        assert!(matches!(
            ScoreInput::split(&prompt, &[], &[]),
            Err(ScoreError::NoOptions)
        ));
    }

    #[test]
    fn normalize_is_a_softmax() {
        let p = normalize(&[0.0, (2.0f64).ln(), f64::NEG_INFINITY], 1.0);
        assert!((p[0] - 1.0 / 3.0).abs() < 1e-12 && (p[1] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(p[2], 0.0);
        // A temperature of 2 takes the square root of the odds.
        let q = normalize(&[0.0, (4.0f64).ln()], 2.0);
        assert!((q[1] / q[0] - 2.0).abs() < 1e-12);
    }
}
