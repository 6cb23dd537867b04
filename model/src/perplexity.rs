//! Perplexity by llama-perplexity's method (`tools/perplexity/perplexity.cpp`): the text
//! is tokenized once (BOS first if the model adds one) and cut into chunks of `n_ctx`
//! tokens; each chunk is evaluated from an empty cache in one batch, with its first token
//! replaced by BOS when the model adds BOS, and the second half of the chunk is scored
//! (logits of rows `n_ctx/2 .. n_ctx-1` predict the next token).

use crate::forward::{Model, ModelError, Session, SessionOptions};

/// Result of a perplexity run.
pub struct Ppl {
    pub ppl: f64,
    pub stderr: f64,
    pub chunks: usize,
}

/// `progress(chunk, ppl so far)` is called after each chunk.
pub fn perplexity(
    model: &Model,
    text: &str,
    n_ctx: usize,
    threads: Option<usize>,
    max_chunks: Option<usize>,
    progress: impl FnMut(usize, f64),
) -> Result<Ppl, ModelError> {
    let mut o = SessionOptions {
        n_ctx,
        pin: true,
        ..Default::default()
    };
    if let Some(t) = threads {
        o.n_threads = t.max(1);
    }
    perplexity_with(model, text, o, max_chunks, progress)
}

/// [`perplexity`] with every session option (chunks of `o.n_ctx` tokens, KV cache types).
pub fn perplexity_with(
    model: &Model,
    text: &str,
    o: SessionOptions,
    max_chunks: Option<usize>,
    mut progress: impl FnMut(usize, f64),
) -> Result<Ppl, ModelError> {
    let n_ctx = o.n_ctx;
    let tok = &model.tokenizer;
    let tokens = tok.encode(text, true, false);
    if tokens.len() < 2 * n_ctx {
        return Err(ModelError::TooFewTokens {
            need: 2 * n_ctx,
            n_ctx,
            got: tokens.len(),
        });
    }
    let mut s = Session::try_new(model, o)?;
    let n_vocab = model.config.n_vocab;
    let mut n_chunk = tokens.len() / n_ctx;
    if let Some(m) = max_chunks {
        n_chunk = n_chunk.min(m);
    }
    let first = n_ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for i in 0..n_chunk {
        let mut chunk = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
        if tok.add_bos() {
            if let Some(b) = tok.bos() {
                chunk[0] = b;
            }
        }
        s.clear();
        let logits = s.forward(&chunk, first..n_ctx)?;
        for j in 0..n_ctx - 1 - first {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let target = chunk[first + j + 1] as usize;
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
            let lp = (row[target] - max) as f64 - sum.ln();
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        progress(i + 1, (nll / count as f64).exp());
    }
    let av = nll / count as f64;
    let av2 = (nll2 / count as f64 - av * av).max(0.0);
    let err = (av2 / (count as f64 - 1.0)).sqrt();
    let ppl = av.exp();
    Ok(Ppl {
        ppl,
        stderr: ppl * err,
        chunks: n_chunk,
    })
}
