//! A minimal sampler for `pocket run`: greedy at temperature 0, otherwise softmax at
//! temperature `temp` with a seeded RNG. (The full sampler chain lives in `sampler`.)

use crate::sampler::splitmix64;

pub struct BasicSampler {
    temp: f32,
    state: u64,
    probs: Vec<f32>,
}

impl BasicSampler {
    pub fn new(temp: f32, seed: u64) -> Self {
        BasicSampler {
            temp,
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            probs: Vec::new(),
        }
    }

    fn next_f64(&mut self) -> f64 {
        (splitmix64(&mut self.state) >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temp <= 0.0 {
            return argmax(logits);
        }
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        self.probs.clear();
        let mut sum = 0.0f64;
        for &l in logits {
            let p = ((l - max) / self.temp).exp();
            sum += p as f64;
            self.probs.push(p);
        }
        let mut r = self.next_f64() * sum;
        for (i, &p) in self.probs.iter().enumerate() {
            r -= p as f64;
            if r <= 0.0 {
                return i as u32;
            }
        }
        argmax(logits)
    }
}

/// Index of the largest logit (the first one on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_and_seeded() {
        let l = [0.1, 3.0, 3.0, -1.0];
        assert_eq!(BasicSampler::new(0.0, 1).sample(&l), 1);
        let a: Vec<u32> = {
            let mut s = BasicSampler::new(1.0, 42);
            (0..20).map(|_| s.sample(&l)).collect()
        };
        let b: Vec<u32> = {
            let mut s = BasicSampler::new(1.0, 42);
            (0..20).map(|_| s.sample(&l)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&t| t < 4));
    }
}
