//! Perplexity by llama-perplexity's method (`tools/perplexity/perplexity.cpp`): the text
//! is tokenized once (BOS first if the model adds one) and cut into chunks of `n_ctx`
//! tokens; each chunk is evaluated from an empty cache in one batch, with its first token
//! replaced by BOS when the model adds BOS, and the second half of the chunk is scored
//! (logits of rows `n_ctx/2 .. n_ctx-1` predict the next token).

use std::io::{Read, Write};

use crate::forward::{Model, ModelError, Session, SessionOptions};
use crate::kld::{self, KldStats, LogitsFileError, LogitsReader, LogitsWriter};

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
    progress: impl FnMut(usize, f64),
) -> Result<Ppl, ModelError> {
    perplexity_base(model, text, o, max_chunks, None::<&mut Vec<u8>>, progress)
}

/// [`perplexity_with`] that also writes the base of a KL-divergence comparison to `base`
/// (llama-perplexity's `--kl-divergence-base FILE`, in its format: see [`crate::kld`]).
pub fn perplexity_base<W: Write>(
    model: &Model,
    text: &str,
    o: SessionOptions,
    max_chunks: Option<usize>,
    base: Option<W>,
    mut progress: impl FnMut(usize, f64),
) -> Result<Ppl, ModelError> {
    let n_ctx = o.n_ctx;
    let tokens = model.tokenizer.encode(text, true, false);
    if tokens.len() < 2 * n_ctx {
        return Err(ModelError::TooFewTokens {
            need: 2 * n_ctx,
            n_ctx,
            got: tokens.len(),
        });
    }
    let mut n_chunk = tokens.len() / n_ctx;
    if let Some(m) = max_chunks {
        n_chunk = n_chunk.min(m);
    }
    let io = |source| ModelError::Io {
        what: "writing the KL-divergence base",
        source,
    };
    let mut writer = match base {
        Some(w) => Some(
            LogitsWriter::new(w, n_ctx, model.config.n_vocab, &tokens[..n_chunk * n_ctx])
                .map_err(io)?,
        ),
        None => None,
    };
    let mut s = Session::try_new(model, o)?;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for i in 0..n_chunk {
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let logits = scored_logits(&mut s, model, chunk)?;
        let targets = &chunk[n_ctx / 2 + 1..];
        if let Some(w) = writer.as_mut() {
            let (a, b) = w.chunk(logits, targets).map_err(io)?;
            nll += a;
            nll2 += b;
        } else {
            let n_vocab = model.config.n_vocab;
            for (row, &target) in logits.chunks_exact(n_vocab).zip(targets) {
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let sum: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
                let lp = (row[target as usize] - max) as f64 - sum.ln();
                nll -= lp;
                nll2 += lp * lp;
            }
        }
        count += targets.len();
        progress(i + 1, (nll / count as f64).exp());
    }
    if let Some(w) = writer {
        w.finish().map_err(io)?;
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

/// One chunk from an empty cache, its first token replaced by BOS when the model adds one;
/// the logits of the scored rows (`n_ctx/2 .. n_ctx-1`, each predicting the next token).
fn scored_logits<'s>(
    s: &'s mut Session,
    model: &Model,
    chunk: &[u32],
) -> Result<&'s [f32], ModelError> {
    let n_ctx = chunk.len();
    let first = n_ctx / 2;
    let mut chunk = chunk.to_vec();
    if model.tokenizer.add_bos() {
        if let Some(b) = model.tokenizer.bos() {
            chunk[0] = b;
        }
    }
    s.clear();
    let logits = s.forward(&chunk, first..n_ctx - 1)?;
    Ok(logits)
}

/// KL-divergence of `model` from a base file (llama-perplexity's `--kl-divergence`): the
/// base's own tokens, in chunks of its context, scored against its stored log-probabilities.
/// `progress(chunk, summary so far)` is called after each chunk.
pub fn kl_divergence<R: Read>(
    model: &Model,
    base: &mut LogitsReader<R>,
    mut o: SessionOptions,
    mut progress: impl FnMut(usize, &KldStats),
) -> Result<KldStats, ModelError> {
    let n_vocab = model.config.n_vocab;
    if base.n_vocab != n_vocab {
        return Err(LogitsFileError::Vocab {
            path: base.name.clone(),
            file: base.n_vocab,
            model: n_vocab,
        }
        .into());
    }
    let n_ctx = base.n_ctx;
    o.n_ctx = o.n_ctx.max(n_ctx);
    let mut s = Session::try_new(model, o)?;
    let mut stats = KldStats::default();
    let tokens = std::mem::take(&mut base.tokens);
    for i in 0..base.n_chunk {
        let chunk = &tokens[i * n_ctx..(i + 1) * n_ctx];
        let logits = scored_logits(&mut s, model, chunk)?;
        let rows = base.next_chunk()?;
        let w = kld::row_len(n_vocab);
        for (j, (row, &target)) in logits
            .chunks_exact(n_vocab)
            .zip(&chunk[n_ctx / 2 + 1..])
            .enumerate()
        {
            stats.add_row(row, &rows[j * w..(j + 1) * w], target as usize);
        }
        progress(i + 1, &stats);
    }
    base.tokens = tokens;
    Ok(stats)
}
