//! Token sampling, following llama.cpp's default sampler chain (b11434,
//! `common/sampling.cpp` + `src/llama-sampler.cpp`).
//!
//! Chain, in llama.cpp's default order (samplers pocket does not implement are skipped:
//! DRY, top-n-sigma, typical-p and XTC are all disabled by llama.cpp's defaults):
//!
//! 1. **penalties** — for every token seen among the last `repeat_last_n` accepted tokens,
//!    `logit = logit <= 0 ? logit * repeat_penalty : logit / repeat_penalty`, then
//!    `logit -= count * frequency_penalty + presence_penalty`;
//! 2. **top-k** — keep the `top_k` highest logits (`<= 0`: disabled), sorted descending;
//! 3. **top-p** — keep the smallest prefix (by descending probability) whose cumulative
//!    probability reaches `top_p` (`>= 1`: disabled);
//! 4. **min-p** — keep tokens whose probability is at least `min_p` times the largest
//!    (`<= 0`: disabled);
//! 5. **temperature** — divide logits by `temp`; `temp <= 0` keeps only the argmax (greedy);
//! 6. **dist** — softmax over what is left and draw one token with the seeded PRNG.
//!
//! Work per token is O(n_vocab) for copying the logits plus O(k log k) for the survivors:
//! top-k uses a selection (`select_nth_unstable_by`) and only sorts the k kept; top-p without
//! top-k first sorts only the best 256 candidates, like llama.cpp.
//!
//! The PRNG is [`Xoshiro256pp`] (xoshiro256++, seeded through SplitMix64): the same seed and
//! the same logits give the same tokens on every platform. It is not llama.cpp's mt19937, so
//! seeded runs draw different (equally distributed) tokens than llama.cpp does.
//!
//! The caller feeds every token that enters the context (prompt and generated) to
//! [`Sampler::accept`], as llama.cpp's `common_sampler_accept` does, so repetition
//! penalties see the prompt too.

mod candidates;
mod constrained;
mod rng;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};

pub use candidates::{apply_penalty, Candidate};
pub(crate) use rng::splitmix64;
pub use rng::Xoshiro256pp;

use candidates::Candidates;
use rng::random_seed;

/// Sampling parameters; [`Default`] gives llama.cpp's defaults (`common_params_sampling`).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerParams {
    /// Temperature; `<= 0` samples greedily (argmax). Default 0.8.
    pub temp: f32,
    /// Keep the k most likely tokens; `<= 0` disables. Default 40.
    pub top_k: i32,
    /// Nucleus threshold; `>= 1` disables. Default 0.95.
    pub top_p: f32,
    /// Minimum probability relative to the most likely token; `<= 0` disables. Default 0.05.
    pub min_p: f32,
    /// Repetition penalty; 1.0 disables. Default 1.0.
    pub repeat_penalty: f32,
    /// How many of the last accepted tokens are penalized; 0 disables penalties, a negative
    /// value penalizes the whole history (llama.cpp's -1 means "context size"). Default 64.
    pub repeat_last_n: i32,
    /// Subtracted once from each repeated token's logit. Default 0.
    pub presence_penalty: f32,
    /// Subtracted `count` times from each repeated token's logit. Default 0.
    pub frequency_penalty: f32,
    /// PRNG seed; `None` picks a random one (see [`Sampler::seed`]). Default `None`.
    pub seed: Option<u64>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
        }
    }
}

impl SamplerParams {
    /// Greedy decoding (temperature 0), otherwise llama.cpp's defaults.
    pub fn greedy() -> Self {
        SamplerParams {
            temp: 0.0,
            ..Default::default()
        }
    }

    fn penalties_enabled(&self) -> bool {
        self.repeat_last_n != 0
            && !(self.repeat_penalty == 1.0
                && self.frequency_penalty == 0.0
                && self.presence_penalty == 0.0)
    }
}

/// The sampler: parameters, the penalty window and the PRNG. One per generation stream.
pub struct Sampler {
    params: SamplerParams,
    seed: u64,
    rng: Xoshiro256pp,
    /// The last `repeat_last_n` accepted tokens (oldest first) and their counts.
    prev: VecDeque<u32>,
    counts: HashMap<u32, u32>,
    cand: Candidates,
    /// Grammar-constrained sampling (`constrained.rs`).
    grammar: constrained::GrammarHook,
}

impl Sampler {
    pub fn new(params: SamplerParams) -> Self {
        let seed = params.seed.unwrap_or_else(random_seed);
        Sampler {
            params,
            seed,
            rng: Xoshiro256pp::new(seed),
            prev: VecDeque::new(),
            counts: HashMap::new(),
            cand: Candidates::default(),
            grammar: Default::default(),
        }
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// The seed in use (the random one picked when `params.seed` was `None`).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Forgets the penalty history and restarts the PRNG from the seed.
    pub fn reset(&mut self) {
        self.prev.clear();
        self.counts.clear();
        self.rng = Xoshiro256pp::new(self.seed);
    }

    /// Records a token that entered the context (prompt or generated) for the penalties.
    pub fn accept(&mut self, token: u32) {
        let n = self.params.repeat_last_n;
        if n == 0 {
            return;
        }
        if n > 0 && self.prev.len() >= n as usize {
            if let Some(old) = self.prev.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.prev.push_back(token);
        *self.counts.entry(token).or_insert(0) += 1;
    }

    /// Picks the next token from the model's logits (one per vocabulary entry).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        assert!(!logits.is_empty(), "sample: empty logits");
        self.cand.fill(logits);
        let p = &self.params;
        if p.penalties_enabled() {
            let (rep, freq, pres) = (p.repeat_penalty, p.frequency_penalty, p.presence_penalty);
            self.cand.apply_penalties(&self.counts, rep, freq, pres);
        }
        if let Some(end) = self.grammar.mask(&mut self.cand) {
            return end;
        }
        let token = self.pick();
        self.grammar.commit(token);
        token
    }

    /// [`Sampler::sample`] on `logits` with `bias` added (each `(id, bias)` in order, ids
    /// outside the vocabulary skipped), when that is a plain greedy pick: temperature 0,
    /// no penalties, no grammar. Then the same token, with the same PRNG draw, found
    /// without copying the logits or building the candidate list (the server samples every
    /// slot each step; those two copies of a 49k-65k vocabulary cost more than the
    /// argmax). `None`, with nothing done, otherwise. [`Sampler::candidates`] is not
    /// updated.
    pub fn sample_greedy_biased(&mut self, logits: &[f32], bias: &[(u32, f32)]) -> Option<u32> {
        let p = &self.params;
        if p.temp > 0.0 || p.penalties_enabled() || self.grammar.active() || logits.is_empty() {
            return None;
        }
        let biased = |id: usize| {
            bias.iter()
                .filter(|&&(b, _)| b as usize == id)
                .fold(logits[id], |l, &(_, b)| l + b)
        };
        // `pick`'s scan: the first strict maximum in id order. A biased id takes its
        // biased value; the scan over the rest reads the logits as they are.
        let mut best = (0usize, biased(0));
        let mut next = 1;
        let mut ids: Vec<usize> = bias.iter().map(|&(id, _)| id as usize).collect();
        ids.sort_unstable();
        ids.dedup();
        for &id in ids.iter().filter(|&&id| id >= 1 && id < logits.len()) {
            best = argmax_from(logits, next..id, best);
            let l = biased(id);
            if l > best.1 {
                best = (id, l);
            }
            next = id + 1;
        }
        best = argmax_from(logits, next..logits.len(), best);
        self.rng.next_f64();
        let token = best.0 as u32;
        self.grammar.commit(token);
        Some(token)
    }

    /// The draw, from the candidates left by the penalties and the grammar.
    fn pick(&mut self) -> u32 {
        let p = &self.params;
        if p.temp <= 0.0 {
            // Greedy: top-k, top-p and min-p all keep the argmax, so skip them. Like
            // llama.cpp's temp sampler the first of equal maxima wins.
            let mut best = self.cand.data[0];
            for c in &self.cand.data[1..] {
                if c.logit > best.logit {
                    best = *c;
                }
            }
            // llama.cpp's dist still draws once on a single candidate; keep the stream aligned.
            self.rng.next_f64();
            return best.id;
        }

        let (top_k, top_p, min_p, temp) = (p.top_k, p.top_p, p.min_p, p.temp);
        self.cand.top_k(top_k);
        self.cand.top_p(top_p);
        self.cand.min_p(min_p);
        for c in &mut self.cand.data {
            c.logit /= temp;
        }
        self.cand.draw(self.rng.next_f64())
    }

    /// The candidates left after the last [`Sampler::sample`] (before the draw), for
    /// inspection and tests.
    pub fn candidates(&self) -> &[Candidate] {
        &self.cand.data
    }
}

/// `best` updated by `logits[range]` in order: an entry replaces it only when strictly
/// greater (the first of equal maxima stays; NaN never wins). Computed in 16 lanes (each
/// keeps its own first maximum; the lanes' maximum then goes to the lowest index holding
/// it), which is the same entry as the scan and lets the compiler vectorize it.
fn argmax_from(logits: &[f32], range: std::ops::Range<usize>, best: (usize, f32)) -> (usize, f32) {
    const W: usize = 16;
    if best.1.is_nan() {
        return best; // nothing is greater than NaN
    }
    let xs = &logits[range.clone()];
    let mut val = [f32::NEG_INFINITY; W];
    let mut idx = [usize::MAX; W];
    let chunks = xs.chunks_exact(W);
    let tail = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        for j in 0..W {
            if chunk[j] > val[j] {
                val[j] = chunk[j];
                idx[j] = c * W + j;
            }
        }
    }
    let mut top = (usize::MAX, f32::NEG_INFINITY);
    for j in 0..W {
        if val[j] > top.1 || (val[j] == top.1 && idx[j] < top.0) {
            top = (idx[j], val[j]);
        }
    }
    let base = xs.len() - tail.len();
    for (k, &x) in tail.iter().enumerate() {
        if x > top.1 {
            top = (base + k, x);
        }
    }
    match top.0 != usize::MAX && top.1 > best.1 {
        true => (range.start + top.0, top.1),
        false => best,
    }
}
