//! The candidate list and the samplers of the chain that narrow it (penalties, top-k,
//! top-p, min-p) or draw from it (dist), each as llama.cpp's `llama-sampler.cpp` does.

use std::collections::HashMap;

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
#[derive(Default)]
pub(super) struct Candidates {
    pub data: Vec<Candidate>,
    sorted: bool,
}

impl Candidates {
    /// Every token of `logits`, in id order (unsorted).
    pub fn fill(&mut self, logits: &[f32]) {
        self.data.clear();
        self.data
            .extend(logits.iter().enumerate().map(|(i, &logit)| Candidate {
                id: i as u32,
                logit,
            }));
        self.sorted = false;
    }

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

    /// The penalties of each token seen `counts[id]` times. Runs right after
    /// [`Candidates::fill`], while `data[i].id == i`, so it only touches those tokens.
    pub fn apply_penalties(&mut self, counts: &HashMap<u32, u32>, rep: f32, freq: f32, pres: f32) {
        for (&id, &count) in counts {
            let Some(c) = self.data.get_mut(id as usize) else {
                continue;
            };
            apply_penalty(&mut c.logit, count, rep, freq, pres);
        }
    }

    pub fn top_k(&mut self, k: i32) {
        if k <= 0 {
            return;
        }
        let k = (k as usize).min(self.data.len());
        if !self.sorted {
            self.partial_sort(k);
        }
        self.data.truncate(k);
        self.sorted = true;
    }

    pub fn top_p(&mut self, top_p: f32) {
        if top_p >= 1.0 || self.data.len() <= 1 {
            return;
        }
        if !self.sorted {
            // Adaptive: usually the nucleus lies in the best 256; sort everything only if not.
            let k = if self.data.len() > 1024 {
                256
            } else {
                self.data.len()
            };
            self.partial_sort(k);
            if let Some(n) = self.nucleus(top_p, k) {
                self.data.truncate(n);
                self.sorted = true;
                return;
            }
            self.partial_sort(self.data.len());
        }
        let n = self
            .nucleus(top_p, self.data.len())
            .unwrap_or(self.data.len());
        self.data.truncate(n);
        self.sorted = true;
    }

    /// With the first `k` candidates sorted descending: how many the nucleus keeps, if it
    /// closes within them. The softmax normalizer covers all candidates.
    fn nucleus(&self, top_p: f32, k: usize) -> Option<usize> {
        let max_l = self.data[0].logit;
        let sum: f32 = self.data.iter().map(|c| (c.logit - max_l).exp()).sum();
        let mut cum = 0.0f32;
        for (i, c) in self.data[..k].iter().enumerate() {
            cum += (c.logit - max_l).exp() / sum;
            if cum >= top_p {
                return Some(i + 1);
            }
        }
        None
    }

    pub fn min_p(&mut self, min_p: f32) {
        if min_p <= 0.0 || self.data.is_empty() {
            return;
        }
        // p_i >= min_p * p_max  <=>  logit_i >= max_logit + ln(min_p)
        let min_logit = self.max_logit() + min_p.ln();
        if self.sorted {
            let n = 1 + self.data[1..]
                .iter()
                .take_while(|c| c.logit >= min_logit)
                .count();
            self.data.truncate(n);
        } else {
            self.data.retain(|c| c.logit >= min_logit);
        }
    }

    /// Softmax and one draw with `u` uniform in [0, 1), as llama.cpp's dist sampler: walk
    /// the candidates in order until the running sum of `exp(logit - max)` reaches
    /// `u * total`.
    pub fn draw(&self, u: f64) -> u32 {
        let d = &self.data;
        if d.len() == 1 {
            return d[0].id;
        }
        let max_l = self.max_logit();
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
