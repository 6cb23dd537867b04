//! KL-divergence against a base model, llama-perplexity's method and file format
//! (`tools/perplexity/perplexity.cpp`: `--kl-divergence-base FILE`, then `--kl-divergence`).
//!
//! The base run scores text like [`crate::perplexity`] and writes, for every scored row, the
//! base model's log-probabilities over the whole vocabulary, compressed to 16 bits. A later
//! run of another model (or engine: the file is llama.cpp's own, so pocket and llama.cpp can
//! read each other's) evaluates the same tokens, taken from the file, and reports the mean
//! KL-divergence, how often both pick the same top token ("Same top p"), the perplexity
//! ratio and the token-probability differences.
//!
//! The file, little-endian as llama.cpp writes it on every platform it runs on:
//!
//! ```text
//! "_logits_"  n_ctx: u32  n_vocab: i32  n_chunk: i32  tokens: i32 × n_chunk·n_ctx
//! per chunk, per scored row (n_ctx − 1 − n_ctx/2 of them):
//!     scale: f32  min_log_prob: f32  q: u16 × n_vocab  (padding: u16 to an even count)
//! log p(token i) = scale · q[i] + min_log_prob
//! ```
//!
//! The arithmetic below follows llama.cpp's operation for operation (f32 where it uses
//! float, f64 where it uses double), so the two engines report the same digits on the same
//! logits.

mod stats;

use std::io::{Read, Write};

use thiserror::Error;

pub use stats::{KldStats, KldSummary};

/// The file's first eight bytes.
pub const MAGIC: &[u8; 8] = b"_logits_";

#[derive(Debug, Error)]
pub enum LogitsFileError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0} does not look like a file of log-probabilities (llama-perplexity --kl-divergence-base): {1}")]
    Format(String, String),
    #[error(
        "{path}: the base was computed with a vocabulary of {file} tokens, this model has {model}"
    )]
    Vocab {
        path: String,
        file: usize,
        model: usize,
    },
}

/// The u16 count of one scored row: two f32 (four u16) and the vocabulary, padded to even.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Rows scored per chunk: the second half of the context, less the last position.
pub fn scored_rows(n_ctx: usize) -> usize {
    n_ctx - 1 - n_ctx / 2
}

/// llama.cpp's `nearest_int`: round to nearest by the 1.5·2²³ trick (valid below 2²²).
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// `expf(x)` summed in f64, as llama.cpp's log-softmax does.
fn sum_exp(logits: &[f32], max: f32) -> f64 {
    logits.iter().map(|&l| (l - max).exp() as f64).sum()
}

/// Compresses one row of logits into `out` (`row_len(n_vocab)` u16s) and returns the
/// negative log-likelihood of `target` (llama.cpp's `log_softmax(n_vocab, logits, log_prob, tok)`).
pub fn encode_row(logits: &[f32], target: usize, out: &mut [u16]) -> f64 {
    let n_vocab = logits.len();
    debug_assert_eq!(out.len(), row_len(n_vocab));
    let mut max_logit = logits[0];
    let mut min_logit = logits[0];
    for &l in &logits[1..] {
        max_logit = max_logit.max(l);
        min_logit = min_logit.min(l);
    }
    min_logit = min_logit.max(max_logit - 16.0);
    let log_sum_exp = sum_exp(logits, max_logit).ln() as f32;
    let min_log_prob = min_logit - max_logit - log_sum_exp;
    let scale = (max_logit - min_logit) / 65535.0;
    let (head, q) = out.split_at_mut(4);
    for (pair, v) in head.chunks_exact_mut(2).zip([scale, min_log_prob]) {
        let b = v.to_le_bytes();
        pair[0] = u16::from_le_bytes([b[0], b[1]]);
        pair[1] = u16::from_le_bytes([b[2], b[3]]);
    }
    q.fill(0);
    if scale != 0.0 {
        let inv_scale = 1.0 / scale;
        for (qi, &l) in q.iter_mut().zip(logits) {
            if l > min_logit {
                *qi = nearest_int(inv_scale * (l - min_logit)) as u16;
            }
        }
    }
    max_logit as f64 + log_sum_exp as f64 - logits[target] as f64
}

/// One row of the base as stored: `log p(i) = scale · q[i] + min_log_prob`.
struct BaseRow<'a> {
    scale: f32,
    min_log_prob: f32,
    q: &'a [u16],
}

impl<'a> BaseRow<'a> {
    fn parse(row: &'a [u16]) -> BaseRow<'a> {
        let f = |i: usize| {
            let (a, b) = (row[i].to_le_bytes(), row[i + 1].to_le_bytes());
            f32::from_le_bytes([a[0], a[1], b[0], b[1]])
        };
        BaseRow {
            scale: f(0),
            min_log_prob: f(2),
            q: &row[4..],
        }
    }
    fn log_p(&self, i: usize) -> f32 {
        self.scale * self.q[i] as f32 + self.min_log_prob
    }
}

/// Writes a base file: header with [`LogitsWriter::new`], then one [`LogitsWriter::chunk`]
/// per evaluated chunk, in order.
pub struct LogitsWriter<W: Write> {
    out: W,
    n_vocab: usize,
    row: Vec<u16>,
    bytes: Vec<u8>,
}

impl<W: Write> LogitsWriter<W> {
    /// The header: `tokens` are the text's tokens of the chunks that will be written
    /// (`n_chunk · n_ctx` of them, before any BOS substitution).
    pub fn new(mut out: W, n_ctx: usize, n_vocab: usize, tokens: &[u32]) -> std::io::Result<Self> {
        let n_chunk = tokens.len() / n_ctx;
        let mut h = Vec::with_capacity(20 + 4 * tokens.len());
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&(n_ctx as u32).to_le_bytes());
        h.extend_from_slice(&(n_vocab as i32).to_le_bytes());
        h.extend_from_slice(&(n_chunk as i32).to_le_bytes());
        for &t in &tokens[..n_chunk * n_ctx] {
            h.extend_from_slice(&(t as i32).to_le_bytes());
        }
        out.write_all(&h)?;
        Ok(LogitsWriter {
            out,
            n_vocab,
            row: vec![0; row_len(n_vocab)],
            bytes: Vec::new(),
        })
    }

    /// One chunk's scored rows: `logits` holds `targets.len()` rows of `n_vocab`, row `j`
    /// predicting `targets[j]`. Returns the rows' summed negative log-likelihood and its
    /// sum of squares (for the perplexity llama.cpp prints beside the file).
    pub fn chunk(&mut self, logits: &[f32], targets: &[u32]) -> std::io::Result<(f64, f64)> {
        let (mut nll, mut nll2) = (0.0, 0.0);
        self.bytes.clear();
        for (row, &t) in logits.chunks_exact(self.n_vocab).zip(targets) {
            let v = encode_row(row, t as usize, &mut self.row);
            nll += v;
            nll2 += v * v;
            self.bytes
                .extend(self.row.iter().flat_map(|q| q.to_le_bytes()));
        }
        self.out.write_all(&self.bytes)?;
        Ok((nll, nll2))
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A base file opened for reading: its header, then [`LogitsReader::next_chunk`] per chunk.
pub struct LogitsReader<R: Read> {
    input: R,
    /// The file's name, for errors.
    pub name: String,
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    /// `n_chunk · n_ctx` tokens, as the base run tokenized the text.
    pub tokens: Vec<u32>,
    buf: Vec<u8>,
    row: Vec<u16>,
}

impl<R: Read> LogitsReader<R> {
    /// Reads and checks the header. `file_len` (when known) is checked against the size the
    /// header implies, so a truncated or padded file is refused before any evaluation.
    pub fn new(mut input: R, name: &str, file_len: Option<u64>) -> Result<Self, LogitsFileError> {
        let bad = |why: String| LogitsFileError::Format(name.to_string(), why);
        let io = |e: std::io::Error| LogitsFileError::Io {
            path: name.to_string(),
            source: e,
        };
        let mut h = [0u8; 20];
        input
            .read_exact(&mut h)
            .map_err(|_| bad("shorter than its 20-byte header".into()))?;
        if &h[..8] != MAGIC {
            return Err(bad("no `_logits_` magic".into()));
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let (n_ctx, n_vocab, n_chunk) = (word(8) as usize, word(12) as i32, word(16) as i32);
        if !(2..=1 << 24).contains(&n_ctx) {
            return Err(bad(format!("context of {n_ctx} tokens")));
        }
        if !(1..=1 << 24).contains(&n_vocab) || n_chunk < 1 {
            return Err(bad(format!("vocabulary {n_vocab}, chunks {n_chunk}")));
        }
        let (n_vocab, n_chunk) = (n_vocab as usize, n_chunk as usize);
        let n_tokens = n_ctx
            .checked_mul(n_chunk)
            .filter(|&n| n <= 1 << 32)
            .ok_or_else(|| bad(format!("{n_chunk} chunks of {n_ctx} tokens")))?;
        let expect = (n_chunk as u128 * scored_rows(n_ctx) as u128 * row_len(n_vocab) as u128) * 2
            + 20
            + 4 * n_tokens as u128;
        if let Some(len) = file_len {
            if len as u128 != expect {
                return Err(bad(format!(
                    "{len} bytes, but its header ({n_chunk} chunks of {n_ctx} tokens, \
                     vocabulary {n_vocab}) implies {expect}"
                )));
            }
        }
        let mut raw = vec![0u8; 4 * n_tokens];
        input.read_exact(&mut raw).map_err(io)?;
        let mut tokens = Vec::with_capacity(n_tokens);
        for w in raw.chunks_exact(4) {
            let t = i32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            if t < 0 || t as usize >= n_vocab {
                return Err(bad(format!(
                    "token {t} outside the vocabulary of {n_vocab}"
                )));
            }
            tokens.push(t as u32);
        }
        Ok(LogitsReader {
            input,
            name: name.to_string(),
            n_ctx,
            n_vocab,
            n_chunk,
            tokens,
            buf: Vec::new(),
            row: Vec::new(),
        })
    }

    /// The next chunk's rows (`scored_rows(n_ctx) · row_len(n_vocab)` u16s).
    pub fn next_chunk(&mut self) -> Result<&[u16], LogitsFileError> {
        let n = scored_rows(self.n_ctx) * row_len(self.n_vocab);
        self.buf.resize(2 * n, 0);
        self.input
            .read_exact(&mut self.buf)
            .map_err(|e| LogitsFileError::Io {
                path: self.name.clone(),
                source: e,
            })?;
        self.row.clear();
        self.row.extend(
            self.buf
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        Ok(&self.row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(seed: u32, n: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 20_000) as f32 / 1000.0 - 10.0
            })
            .collect()
    }

    #[test]
    fn row_round_trips_log_probabilities_within_the_16_bit_step() {
        let l = logits(7, 301);
        let mut row = vec![0u16; row_len(301)];
        let nll = encode_row(&l, 5, &mut row);
        let base = BaseRow::parse(&row);
        let max = l.iter().fold(f32::MIN, |a, &b| a.max(b));
        let lse = (l.iter().map(|&v| ((v - max) as f64).exp()).sum::<f64>()).ln();
        for (i, &v) in l.iter().enumerate() {
            let exact = (v - max) as f64 - lse;
            if exact > -15.9 {
                assert!(
                    (base.log_p(i) as f64 - exact).abs() <= base.scale as f64,
                    "row {i}"
                );
            }
        }
        assert!((nll + base.log_p(5) as f64).abs() < 1e-3);
    }

    #[test]
    fn a_model_against_its_own_base_has_zero_divergence_and_same_top() {
        let mut out = Vec::new();
        let n_ctx = 8;
        let tokens: Vec<u32> = (0..16).map(|i| i * 3 % 50).collect();
        let mut w = LogitsWriter::new(&mut out, n_ctx, 50, &tokens).unwrap();
        let rows: Vec<Vec<f32>> = (0..2 * scored_rows(n_ctx))
            .map(|i| logits(i as u32 + 1, 50))
            .collect();
        for c in 0..2 {
            let flat: Vec<f32> = rows[c * 3..c * 3 + 3].concat();
            w.chunk(&flat, &tokens[c * 8 + 5..c * 8 + 8]).unwrap();
        }
        w.finish().unwrap();
        let len = out.len() as u64;
        let mut r = LogitsReader::new(&out[..], "mem", Some(len)).unwrap();
        assert_eq!((r.n_ctx, r.n_vocab, r.n_chunk), (8, 50, 2));
        assert_eq!(r.tokens, tokens);
        let mut st = KldStats::default();
        for c in 0..2 {
            let chunk = r.next_chunk().unwrap().to_vec();
            for j in 0..3 {
                let t = tokens[c * 8 + 5 + j] as usize;
                st.add_row(
                    &rows[c * 3 + j],
                    &chunk[j * row_len(50)..(j + 1) * row_len(50)],
                    t,
                );
            }
        }
        let s = st.summary();
        assert_eq!(s.count, 6);
        assert_eq!(s.same_top.0, 1.0);
        assert!(s.kld.0.abs() < 1e-4, "{}", s.kld.0);
        // A different model: positive divergence.
        let mut st2 = KldStats::default();
        let chunk = {
            let mut r = LogitsReader::new(&out[..], "mem", Some(len)).unwrap();
            r.next_chunk().unwrap().to_vec()
        };
        st2.add_row(&logits(99, 50), &chunk[..row_len(50)], tokens[5] as usize);
        assert!(st2.summary().kld.0 > 0.1);
    }

    #[test]
    fn hostile_headers_are_errors() {
        let good = {
            let mut out = Vec::new();
            let w = LogitsWriter::new(&mut out, 4, 10, &[1, 2, 3, 4]).unwrap();
            w.finish().unwrap();
            out.extend(std::iter::repeat_n(0u8, 2 * row_len(10)));
            out
        };
        assert!(LogitsReader::new(&good[..], "g", Some(good.len() as u64)).is_ok());
        // Wrong magic, truncated, wrong length, absurd counts, token out of range.
        let mut m = good.clone();
        m[0] = b'x';
        assert!(LogitsReader::new(&m[..], "m", None).is_err());
        assert!(LogitsReader::new(&good[..10], "t", None).is_err());
        assert!(LogitsReader::new(&good[..], "l", Some(good.len() as u64 - 1)).is_err());
        for (at, v) in [
            (8usize, 0u32),
            (8, u32::MAX),
            (12, 0),
            (12, u32::MAX),
            (16, 0),
            (16, 1 << 30),
        ] {
            let mut m = good.clone();
            m[at..at + 4].copy_from_slice(&v.to_le_bytes());
            assert!(
                LogitsReader::new(&m[..], "h", Some(m.len() as u64)).is_err(),
                "{at} {v}"
            );
        }
        let mut m = good.clone();
        m[20..24].copy_from_slice(&10u32.to_le_bytes());
        assert!(LogitsReader::new(&m[..], "tok", None).is_err());
        // A short body: the chunk read is an error, not a panic.
        let mut r = LogitsReader::new(&good[..good.len() - 3], "b", None).unwrap();
        assert!(r.next_chunk().is_err());
    }
}
