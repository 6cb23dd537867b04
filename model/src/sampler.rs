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

use std::collections::{HashMap, VecDeque};

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

/// xoshiro256++ (Blackman & Vigna, 2019), seeded by expanding a `u64` with SplitMix64.
/// Small, fast, statistically solid for sampling; not cryptographic.
#[derive(Debug, Clone)]
pub struct Xoshiro256pp {
    s: [u64; 4],
}

impl Xoshiro256pp {
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let mut next = || {
            sm = sm.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Xoshiro256pp {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A random seed when the user gives none: the clock mixed with std's per-process random
/// hash keys.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    h.write_u64(now);
    h.finish()
}

/// One candidate token (llama.cpp's `llama_token_data` without `p`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Descending by logit; NaN sorts last.
fn desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit)
}

/// Candidates are stored sorted descending when `sorted` is set.
struct Candidates {
    data: Vec<Candidate>,
    sorted: bool,
}

impl Candidates {
    /// Sorts the best `k` to the front, descending; returns nothing about the rest's order.
    fn partial_sort(&mut self, k: usize) {
        let k = k.min(self.data.len());
        if k == 0 {
            return;
        }
        if k < self.data.len() {
            self.data.select_nth_unstable_by(k - 1, desc);
        }
        self.data[..k].sort_unstable_by(desc);
        if k == self.data.len() {
            self.sorted = true;
        }
    }

    fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.data[0].logit;
        }
        self.data.iter().fold(
            f32::NEG_INFINITY,
            |m, c| if c.logit > m { c.logit } else { m },
        )
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
            cand: Candidates {
                data: Vec::new(),
                sorted: false,
            },
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
        self.build(logits);
        self.apply_penalties();

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
        self.top_k(top_k);
        self.top_p(top_p);
        self.min_p(min_p);
        for c in &mut self.cand.data {
            c.logit /= temp;
        }
        self.dist()
    }

    /// The candidates left after the last [`Sampler::sample`] (before the draw), for
    /// inspection and tests.
    pub fn candidates(&self) -> &[Candidate] {
        &self.cand.data
    }

    fn build(&mut self, logits: &[f32]) {
        let d = &mut self.cand.data;
        d.clear();
        d.extend(logits.iter().enumerate().map(|(i, &logit)| Candidate {
            id: i as u32,
            logit,
        }));
        self.cand.sorted = false;
    }

    /// Runs first, while `data[i].id == i`, so it only touches the penalized tokens.
    fn apply_penalties(&mut self) {
        if !self.params.penalties_enabled() {
            return;
        }
        let (rep, freq, pres) = (
            self.params.repeat_penalty,
            self.params.frequency_penalty,
            self.params.presence_penalty,
        );
        for (&id, &count) in &self.counts {
            let Some(c) = self.cand.data.get_mut(id as usize) else {
                continue;
            };
            apply_penalty(&mut c.logit, count, rep, freq, pres);
        }
    }

    fn top_k(&mut self, k: i32) {
        if k <= 0 {
            return;
        }
        let k = (k as usize).min(self.cand.data.len());
        if !self.cand.sorted {
            self.cand.partial_sort(k);
        }
        self.cand.data.truncate(k);
        self.cand.sorted = true;
    }

    fn top_p(&mut self, top_p: f32) {
        if top_p >= 1.0 || self.cand.data.len() <= 1 {
            return;
        }
        if !self.cand.sorted {
            // Adaptive: usually the nucleus lies in the best 256; sort everything only if not.
            let k = if self.cand.data.len() > 1024 {
                256
            } else {
                self.cand.data.len()
            };
            self.cand.partial_sort(k);
            if let Some(n) = self.nucleus(top_p, k) {
                self.cand.data.truncate(n);
                self.cand.sorted = true;
                return;
            }
            self.cand.partial_sort(self.cand.data.len());
        }
        let n = self
            .nucleus(top_p, self.cand.data.len())
            .unwrap_or(self.cand.data.len());
        self.cand.data.truncate(n);
        self.cand.sorted = true;
    }

    /// With the first `k` candidates sorted descending: how many the nucleus keeps, if it
    /// closes within them. The softmax normalizer covers all candidates.
    fn nucleus(&self, top_p: f32, k: usize) -> Option<usize> {
        let max_l = self.cand.data[0].logit;
        let sum: f32 = self.cand.data.iter().map(|c| (c.logit - max_l).exp()).sum();
        let mut cum = 0.0f32;
        for (i, c) in self.cand.data[..k].iter().enumerate() {
            cum += (c.logit - max_l).exp() / sum;
            if cum >= top_p {
                return Some(i + 1);
            }
        }
        None
    }

    fn min_p(&mut self, min_p: f32) {
        if min_p <= 0.0 || self.cand.data.is_empty() {
            return;
        }
        // p_i >= min_p * p_max  <=>  logit_i >= max_logit + ln(min_p)
        let min_logit = self.cand.max_logit() + min_p.ln();
        if self.cand.sorted {
            let n = 1 + self.cand.data[1..]
                .iter()
                .take_while(|c| c.logit >= min_logit)
                .count();
            self.cand.data.truncate(n);
        } else {
            self.cand.data.retain(|c| c.logit >= min_logit);
        }
    }

    /// Softmax and one draw, as llama.cpp's dist sampler: walk the candidates in order until
    /// the running sum of `exp(logit - max)` reaches `u * total`.
    fn dist(&mut self) -> u32 {
        let u = self.rng.next_f64();
        let d = &self.cand.data;
        if d.len() == 1 {
            return d[0].id;
        }
        let max_l = self.cand.max_logit();
        let total: f64 = d.iter().map(|c| (c.logit - max_l).exp() as f64).sum();
        let target = total * u;
        let mut run = 0.0f64;
        for c in d {
            run += (c.logit - max_l).exp() as f64;
            if run >= target {
                return c.id;
            }
        }
        d[d.len() - 1].id
    }
}

/// llama.cpp's penalty on one logit seen `count` (> 0) times.
pub fn apply_penalty(logit: &mut f32, count: u32, repeat: f32, freq: f32, presence: f32) {
    if *logit <= 0.0 {
        *logit *= repeat;
    } else {
        *logit /= repeat;
    }
    *logit -= count as f32 * freq + if count > 0 { presence } else { 0.0 };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temp: f32, top_k: i32, top_p: f32, min_p: f32) -> SamplerParams {
        SamplerParams {
            temp,
            top_k,
            top_p,
            min_p,
            seed: Some(1234),
            ..Default::default()
        }
    }

    /// Pseudo-random logits over a big vocabulary.
    fn big_logits(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Xoshiro256pp::new(seed);
        (0..n).map(|_| (r.next_f64() as f32 - 0.5) * 20.0).collect()
    }

    fn argmax(x: &[f32]) -> u32 {
        let mut best = 0;
        for i in 1..x.len() {
            if x[i] > x[best] {
                best = i;
            }
        }
        best as u32
    }

    fn ids(s: &Sampler) -> Vec<u32> {
        let mut v: Vec<u32> = s.candidates().iter().map(|c| c.id).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn defaults_are_llama_cpp() {
        let p = SamplerParams::default();
        assert_eq!((p.temp, p.top_k, p.top_p, p.min_p), (0.8, 40, 0.95, 0.05));
        assert_eq!((p.repeat_penalty, p.repeat_last_n), (1.0, 64));
        assert_eq!(
            (p.presence_penalty, p.frequency_penalty, p.seed),
            (0.0, 0.0, None)
        );
        // An unset seed is random but reported.
        let a = Sampler::new(p.clone());
        let b = Sampler::new(p);
        assert_ne!(a.seed(), b.seed());
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplerParams::greedy());
        for seed in 0..20 {
            let l = big_logits(151_936, seed);
            assert_eq!(s.sample(&l), argmax(&l));
        }
        // Ties: the first maximum wins, as in llama.cpp.
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0]), 1);
        let mut s = Sampler::new(params(-1.0, 40, 0.95, 0.05));
        assert_eq!(s.sample(&[0.0, -1.0, 5.0]), 2);
    }

    #[test]
    fn top_k_1_is_greedy() {
        let mut s = Sampler::new(params(1.5, 1, 1.0, 0.0));
        for seed in 0..20 {
            let l = big_logits(50_000, seed);
            assert_eq!(s.sample(&l), argmax(&l));
        }
    }

    #[test]
    fn same_seed_same_tokens() {
        let run = |seed: u64| -> Vec<u32> {
            let mut p = params(1.0, 0, 0.98, 0.0);
            p.seed = Some(seed);
            p.repeat_penalty = 1.1;
            let mut s = Sampler::new(p);
            (0..50)
                .map(|i| {
                    let t = s.sample(&big_logits(32_000, i % 7));
                    s.accept(t);
                    t
                })
                .collect()
        };
        let a = run(42);
        assert_eq!(a, run(42));
        assert_ne!(a, run(43));
        // reset() restarts the stream.
        let mut p = params(1.0, 0, 1.0, 0.0);
        p.seed = Some(7);
        let mut s = Sampler::new(p);
        let l = big_logits(1000, 3);
        let first: Vec<u32> = (0..10).map(|_| s.sample(&l)).collect();
        s.reset();
        let again: Vec<u32> = (0..10).map(|_| s.sample(&l)).collect();
        assert_eq!(first, again);
    }

    /// Pearson chi-square of many draws against the softmax of known logits.
    #[test]
    fn draws_follow_the_distribution() {
        let probs = [0.4f64, 0.3, 0.15, 0.1, 0.05];
        let temp = 0.7f32;
        // logits whose softmax at `temp` is `probs`.
        let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32 * temp).collect();
        let mut s = Sampler::new(params(temp, 0, 1.0, 0.0));
        let n = 100_000;
        let mut hist = [0u32; 5];
        for _ in 0..n {
            hist[s.sample(&logits) as usize] += 1;
        }
        let chi2: f64 = probs
            .iter()
            .zip(hist)
            .map(|(p, o)| {
                let e = p * n as f64;
                (o as f64 - e).powi(2) / e
            })
            .sum();
        // 4 degrees of freedom: P(chi2 > 18.47) = 0.001.
        assert!(chi2 < 18.47, "chi2 = {chi2}, histogram {hist:?}");
    }

    #[test]
    #[allow(clippy::neg_multiply)] // spelled out as llama.cpp's formula
    fn penalties_match_llama_cpp_formula() {
        let mut p = params(0.0, 0, 1.0, 0.0);
        p.repeat_penalty = 1.5;
        p.frequency_penalty = 0.25;
        p.presence_penalty = 0.5;
        p.repeat_last_n = 4;
        let mut s = Sampler::new(p);
        // Window of 4 after these: [1, 2, 2, 3] (token 0 fell out).
        for t in [0, 1, 2, 2, 3] {
            s.accept(t);
        }
        let logits = [2.0f32, 3.0, -1.0, 0.0, 4.0];
        s.sample(&logits);
        let got: Vec<f32> = {
            let mut c = s.candidates().to_vec();
            c.sort_by_key(|c| c.id);
            c.iter().map(|c| c.logit).collect()
        };
        let want = [
            2.0,                    // 0: left the window
            3.0 / 1.5 - 0.25 - 0.5, // 1: count 1, positive → divide
            -1.0 * 1.5 - 0.5 - 0.5, // 2: count 2, negative → multiply
            0.0 * 1.5 - 0.25 - 0.5, // 3: count 1, zero → multiply
            4.0,                    // 4: never seen
        ];
        assert_eq!(got, want);

        // The penalty moves the greedy choice off a repeated token.
        let mut p = params(0.0, 40, 0.95, 0.05);
        p.repeat_penalty = 2.0;
        let mut s = Sampler::new(p);
        assert_eq!(s.sample(&[1.0, 1.5]), 1);
        s.accept(1);
        assert_eq!(s.sample(&[1.0, 1.5]), 0);

        // Disabled by repeat_last_n = 0.
        let mut p = params(0.0, 0, 1.0, 0.0);
        p.repeat_penalty = 2.0;
        p.repeat_last_n = 0;
        let mut s = Sampler::new(p);
        s.accept(1);
        assert_eq!(s.sample(&[1.0, 1.5]), 1);
    }

    #[test]
    fn min_p_keeps_expected_set() {
        // p_i / p_max = exp(l_i - l_max): 1, e^-1 (0.37), e^-2 (0.135), e^-3 (0.05-), e^-4.
        let logits = [0.0f32, -1.0, -4.0, -2.0, -3.0];
        // temp 1, no top-k/top-p, min-p 0.1 → {0, 1, 3}.
        let mut s = Sampler::new(params(1.0, 0, 1.0, 0.1));
        s.sample(&logits);
        assert_eq!(ids(&s), vec![0, 1, 3]);
        // Sorted path (after top-k) gives the same set.
        let mut s = Sampler::new(params(1.0, 5, 1.0, 0.1));
        s.sample(&logits);
        assert_eq!(ids(&s), vec![0, 1, 3]);
        // min-p 0.4 → only the max.
        let mut s = Sampler::new(params(1.0, 0, 1.0, 0.4));
        s.sample(&logits);
        assert_eq!(ids(&s), vec![0]);
    }

    #[test]
    fn top_p_keeps_expected_set() {
        // probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625
        let probs = [0.125f32, 0.5, 0.0625, 0.25, 0.0625];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        for (top_p, want) in [
            (0.5, vec![1]),
            (0.6, vec![1, 3]),
            (0.75, vec![1, 3]),
            (0.8, vec![0, 1, 3]),
            (0.9, vec![0, 1, 2, 3]),
        ] {
            let mut s = Sampler::new(params(1.0, 0, top_p, 0.0));
            s.sample(&logits);
            assert_eq!(ids(&s), want, "top_p {top_p}");
            // Survivors are sorted descending.
            let c = s.candidates();
            assert!(c.windows(2).all(|w| w[0].logit >= w[1].logit));
        }
    }

    #[test]
    fn top_p_on_a_big_vocabulary_matches_a_full_sort() {
        // (seed, logit scale, top_p): nuclei inside and beyond the first 256 candidates.
        for (seed, scale, top_p) in [(1u64, 1.0f32, 0.5f32), (2, 1.0, 0.95), (3, 0.3, 0.9)] {
            let l: Vec<f32> = big_logits(151_936, seed)
                .iter()
                .map(|x| x * scale)
                .collect();
            let mut s = Sampler::new(params(1.0, 0, top_p, 0.0));
            s.sample(&l);
            let mut sorted = l.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let max = sorted[0];
            // f32 sums, like llama.cpp (and pocket); only the normalizer's order differs.
            let sum: f32 = l.iter().map(|x| (x - max).exp()).sum();
            let mut cum = 0.0f32;
            let mut n = 0;
            for x in &sorted {
                cum += (x - max).exp() / sum;
                n += 1;
                if cum >= top_p {
                    break;
                }
            }
            // The survivors are exactly the best ones, in order; their number agrees up to
            // f32 rounding of the cumulative sum.
            let got: Vec<f32> = s.candidates().iter().map(|c| c.logit).collect();
            assert_eq!(got[..], sorted[..got.len()], "seed {seed}");
            assert!(
                got.len().abs_diff(n) <= 2 + n / 1000,
                "seed {seed} top_p {top_p}: kept {} want {n}",
                got.len()
            );
        }
    }

    #[test]
    fn top_k_keeps_the_k_best_sorted() {
        let l = big_logits(151_936, 9);
        let mut s = Sampler::new(params(1.0, 40, 1.0, 0.0));
        s.sample(&l);
        let c = s.candidates();
        assert_eq!(c.len(), 40);
        assert!(c.windows(2).all(|w| w[0].logit >= w[1].logit));
        let mut sorted = l.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        // Temperature 1 leaves logits unchanged.
        assert_eq!(c.iter().map(|c| c.logit).collect::<Vec<_>>(), sorted[..40]);
    }

    #[test]
    fn default_chain_samples_only_plausible_tokens() {
        let mut s = Sampler::new(SamplerParams {
            seed: Some(5),
            ..Default::default()
        });
        let mut l = vec![-10.0f32; 1000];
        l[10] = 5.0;
        l[20] = 4.5;
        l[30] = 0.0; // p/p_max = e^-5 < 0.05 → cut by min-p
        for _ in 0..200 {
            let t = s.sample(&l);
            assert!(t == 10 || t == 20, "{t}");
        }
    }
}
