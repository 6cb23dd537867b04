//! The generation loop, once for every front end (`pocket run`, `pocket chat`, the
//! server): prefill what the cache does not hold, sample, decode until an end-of-generation
//! token, a stop string, the length limit, a full context or the caller says stop;
//! stream UTF-8-safe pieces as they come (text that may be the start of a stop string is
//! held back until it is known not to be); time the prompt and the generation.

use std::time::Instant;

use crate::forward::{ms_since, Model, Result, Session};
use crate::sampler::Sampler;
use crate::speculative::{SpecStats, Speculator};
use crate::tokenizer::StreamDecoder;

/// What to generate.
#[derive(Clone, Debug, Default)]
pub struct GenParams {
    /// Tokens to generate at most.
    pub n_predict: usize,
    /// Generation ends at the first of these in the text (which is cut before it).
    pub stop: Vec<String>,
    /// Never sample an end-of-generation token (llama.cpp's `--ignore-eos`: a -inf bias
    /// on each), so only the other conditions end generation.
    pub ignore_eos: bool,
}

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced this end-of-generation token (not part of the output).
    Eog(u32),
    /// `n_predict` tokens were generated.
    Length,
    /// The text reached this stop string.
    Stop(String),
    /// The sequence filled its context.
    ContextFull,
    /// The caller's callback asked to stop (a closed connection, the user speaking).
    Cancelled,
}

/// Prompt and generation timings, as llama.cpp reports them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Tokens evaluated for the prompt (after prefix reuse).
    pub prompt_tokens: usize,
    /// Prefill and the first sample.
    pub prompt_ms: f64,
    /// Tokens generated (sampled and kept).
    pub gen_tokens: usize,
    /// Tokens evaluated after the prompt (one fewer than the tokens generated: the last
    /// one is not evaluated; with speculative decoding, the kept rows of verify batches).
    pub decode_steps: usize,
    pub gen_ms: f64,
}

impl Timings {
    pub fn prompt_tps(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_ms)
    }
    pub fn decode_tps(&self) -> f64 {
        rate(self.decode_steps, self.gen_ms)
    }
}

fn rate(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1e3 / ms
    } else {
        0.0
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    /// The generated text, cut before a stop string.
    pub text: String,
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub timings: Timings,
    /// Speculative decoding's drafted and accepted tokens (zero without it).
    pub spec: SpecStats,
}

/// Evaluates `prompt` on sequence 0 of `s` (after what it already holds: see
/// [`Session::reuse_prefix`]) and generates. `on_piece` gets each piece of text as it is
/// final and returns whether to go on.
pub fn generate(
    s: &mut Session,
    sampler: &mut Sampler,
    prompt: &[u32],
    p: &GenParams,
    on_piece: impl FnMut(&str) -> bool,
) -> Result<Generation> {
    generate_with(s, sampler, None, prompt, p, on_piece)
}

/// [`generate`] with speculative decoding when `spec` is given: each step evaluates the
/// last sampled token and the drafts in one batch and keeps the drafts the sampler agrees
/// with (see [`crate::speculative`]); the tokens are the same as without it.
pub fn generate_with(
    s: &mut Session,
    sampler: &mut Sampler,
    mut spec: Option<&mut Speculator>,
    prompt: &[u32],
    p: &GenParams,
    mut on_piece: impl FnMut(&str) -> bool,
) -> Result<Generation> {
    prompt.iter().for_each(|&t| sampler.accept(t));
    let mut pick = Pick::new(s.model, p);
    let t1 = Instant::now();
    let mut next = pick.sample(sampler, s.prefill(prompt)?);
    sampler.accept(next);
    let mut timings = Timings {
        prompt_tokens: prompt.len(),
        prompt_ms: ms_since(t1),
        ..Default::default()
    };
    let before = spec.as_ref().map(|sp| sp.stats).unwrap_or_default();
    let t2 = Instant::now();
    let mut out = Emitter {
        p,
        n_ctx: s.n_ctx(),
        dec: StreamDecoder::new(),
        filter: StopFilter::new(&p.stop),
        tokens: Vec::new(),
    };
    let model = s.model;
    let stop = loop {
        let pos = s.pos();
        if let Some(stop) = out.emit(model, next, pos, &mut on_piece) {
            break stop;
        }
        let room = (s.n_ctx() - pos - 1).min(p.n_predict - out.tokens.len());
        let drafts = match spec.as_deref_mut() {
            Some(sp) => sp.draft(s.tokens(), next, room)?,
            None => Vec::new(),
        };
        if drafts.is_empty() {
            next = pick.sample(sampler, s.decode(next)?);
            sampler.accept(next);
            timings.decode_steps += 1;
            continue;
        }
        // Verify: `next` and the drafts in one batch, logits for every row.
        let mut rows = Vec::with_capacity(drafts.len() + 1);
        rows.push(next);
        rows.extend_from_slice(&drafts);
        let v = model.config.n_vocab;
        let logits = s.forward(&rows, 0..rows.len())?;
        let mut kept = 0;
        let mut stop = None;
        for (i, row) in logits.chunks_exact(v).enumerate() {
            let t = pick.sample(sampler, row);
            sampler.accept(t);
            timings.decode_steps += 1;
            if drafts.get(i) != Some(&t) {
                next = t;
                break;
            }
            kept += 1;
            stop = out.emit(model, t, pos + 1 + i, &mut on_piece);
            if stop.is_some() {
                break;
            }
        }
        // The cache keeps what plain decoding would have evaluated by now: `next`'s
        // predecessor and the kept drafts before the one that ended generation.
        let evaluated = kept - usize::from(stop.is_some());
        s.truncate(pos + 1 + evaluated);
        if let Some(sp) = spec.as_deref_mut() {
            sp.verified(drafts.len(), kept);
        }
        if let Some(stop) = stop {
            break stop;
        }
    };
    // Grammar hook: a constraint that failed ended generation; say why.
    if let Some(e) = sampler.take_grammar_error() {
        return Err(e.into());
    }
    if !matches!(stop, StopReason::Stop(_) | StopReason::Cancelled) {
        let tail = out.dec.finish();
        out.filter.push(&tail, &mut on_piece);
        out.filter.flush(&mut on_piece);
    }
    timings.gen_tokens = out.tokens.len();
    timings.gen_ms = ms_since(t2);
    let after = spec.as_ref().map(|sp| sp.stats).unwrap_or_default();
    Ok(Generation {
        text: out.filter.text,
        tokens: out.tokens,
        stop,
        timings,
        spec: SpecStats {
            drafted: after.drafted - before.drafted,
            accepted: after.accepted - before.accepted,
            verify_steps: after.verify_steps - before.verify_steps,
        },
    })
}

/// Samples a row of logits, with the end-of-generation tokens banned under `ignore_eos`.
struct Pick {
    /// `(id, -inf)` for each banned token; empty: the sampler sees the logits as they are.
    ban: Vec<(u32, f32)>,
    scratch: Vec<f32>,
}

impl Pick {
    fn new(model: &Model, p: &GenParams) -> Pick {
        let ban = match p.ignore_eos {
            true => model
                .tokenizer
                .eog_ids()
                .iter()
                .map(|&id| (id, f32::NEG_INFINITY))
                .collect(),
            false => Vec::new(),
        };
        Pick {
            ban,
            scratch: Vec::new(),
        }
    }

    fn sample(&mut self, sampler: &mut Sampler, logits: &[f32]) -> u32 {
        if self.ban.is_empty() {
            return sampler.sample(logits);
        }
        if let Some(t) = sampler.sample_greedy_biased(logits, &self.ban) {
            return t;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(logits);
        for &(id, b) in &self.ban {
            if let Some(l) = self.scratch.get_mut(id as usize) {
                *l += b;
            }
        }
        sampler.sample(&self.scratch)
    }
}

/// The per-token end of the loop: stop conditions, then the token's text.
struct Emitter<'a> {
    p: &'a GenParams,
    n_ctx: usize,
    dec: StreamDecoder,
    filter: StopFilter<'a>,
    tokens: Vec<u32>,
}

impl Emitter<'_> {
    /// Takes `token`, sampled when the sequence held `pos` evaluated tokens; `Some` when
    /// generation ends (an end-of-generation token is not kept).
    fn emit(
        &mut self,
        model: &Model,
        token: u32,
        pos: usize,
        on_piece: &mut impl FnMut(&str) -> bool,
    ) -> Option<StopReason> {
        let tok = &model.tokenizer;
        if self.p.n_predict == 0 {
            return Some(StopReason::Length);
        }
        if tok.is_eog(token) && !self.p.ignore_eos {
            return Some(StopReason::Eog(token));
        }
        self.tokens.push(token);
        if let Some(stop) = self
            .filter
            .push(&self.dec.push(tok, token, false), on_piece)
        {
            return Some(stop);
        }
        if self.tokens.len() == self.p.n_predict {
            return Some(StopReason::Length);
        }
        (pos >= self.n_ctx).then_some(StopReason::ContextFull)
    }
}

/// Holds back text that may be the start of a stop string; cuts the text at one.
struct StopFilter<'a> {
    stop: &'a [String],
    /// Everything kept so far.
    text: String,
    /// Bytes of `text` already handed to the caller.
    sent: usize,
}

impl<'a> StopFilter<'a> {
    fn new(stop: &'a [String]) -> Self {
        StopFilter {
            stop,
            text: String::new(),
            sent: 0,
        }
    }

    /// Adds a piece; hands on what is final. `Some` when generation must end.
    fn push(&mut self, piece: &str, on_piece: &mut impl FnMut(&str) -> bool) -> Option<StopReason> {
        // Text already handed on is no prefix of any stop string, so a stop string can only
        // begin in what is held back or new.
        let from = self.sent;
        self.text.push_str(piece);
        if let Some((at, s)) = find_stop(&self.text[from..], self.stop) {
            let reason = StopReason::Stop(s.clone());
            self.text.truncate(from + at);
            self.flush(on_piece);
            return Some(reason);
        }
        // Hand on all but the longest tail that is a prefix of a stop string.
        let end = self.text.len() - stop_hold(&self.text[self.sent..], self.stop);
        if end > self.sent {
            let ok = on_piece(&self.text[self.sent..end]);
            self.sent = end;
            if !ok {
                return Some(StopReason::Cancelled);
            }
        }
        None
    }

    fn flush(&mut self, on_piece: &mut impl FnMut(&str) -> bool) {
        if self.text.len() > self.sent {
            on_piece(&self.text[self.sent..]);
            self.sent = self.text.len();
        }
    }
}

/// The first of `stop` (in list order; empty strings never match) that occurs in `text`,
/// and the byte where it begins.
pub fn find_stop<'a>(text: &str, stop: &'a [String]) -> Option<(usize, &'a String)> {
    stop.iter()
        .filter(|s| !s.is_empty())
        .find_map(|s| text.find(s.as_str()).map(|at| (at, s)))
}

/// How many bytes at the end of `text` must be held back because they may begin one of
/// `stop`.
pub fn stop_hold(text: &str, stop: &[String]) -> usize {
    stop.iter()
        .map(|s| longest_prefix_suffix(text, s))
        .max()
        .unwrap_or(0)
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`, cut at
/// a char boundary of `text`: what a streaming front end holds back in case the next
/// piece completes the stop string.
pub fn longest_prefix_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && stop
                    .as_bytes()
                    .starts_with(&text.as_bytes()[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stop: &[&str], pieces: &[&str]) -> (Vec<String>, String, Option<StopReason>) {
        let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
        let mut f = StopFilter::new(&stop);
        let mut got = Vec::new();
        let mut reason = None;
        for p in pieces {
            reason = f.push(p, &mut |s: &str| {
                got.push(s.to_string());
                true
            });
            if reason.is_some() {
                break;
            }
        }
        if reason.is_none() {
            f.flush(&mut |s: &str| {
                got.push(s.to_string());
                true
            });
        }
        (got, f.text, reason)
    }

    #[test]
    fn stop_strings_cut_the_text_and_hold_back_partial_matches() {
        let (got, text, r) = run(&["</s>"], &["Hello", " wor", "ld<", "/", "s>", "never"]);
        assert_eq!(text, "Hello world");
        assert_eq!(got.concat(), "Hello world");
        assert_eq!(
            got,
            ["Hello", " wor", "ld"],
            "`<` and `/` held back, then dropped"
        );
        assert_eq!(r, Some(StopReason::Stop("</s>".into())));
        // A partial match that does not complete is handed on.
        let (got, text, r) = run(&["</s>"], &["a<", "b"]);
        assert_eq!(
            (got.concat().as_str(), text.as_str(), r),
            ("a<b", "a<b", None)
        );
        // A stop string inside one piece, several stop strings, multibyte text.
        let (_, text, r) = run(&["\n\n", "User:"], &["é ok\nUs", "er: hi"]);
        assert_eq!(text, "é ok\n");
        assert_eq!(r, Some(StopReason::Stop("User:".into())));
        let (got, _, _) = run(&[], &["plain"]);
        assert_eq!(got, ["plain"]);
    }

    #[test]
    fn the_callback_cancels() {
        let stop: Vec<String> = Vec::new();
        let mut f = StopFilter::new(&stop);
        assert_eq!(f.push("x", &mut |_| false), Some(StopReason::Cancelled));
    }
}
