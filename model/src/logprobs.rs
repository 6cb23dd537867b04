//! Log-probabilities of a step's logits: the one log-softmax that `pocket run --n-probs`,
//! the server's `n_probs` / `logprobs`, `pocket score` and `/v1/systemone` all use, so the
//! CLI and the server can never disagree on a number.

/// `log Σ exp(logit)` of one row, accumulated in f64 (a 150k-entry sum in f32 loses the
/// small terms).
pub fn log_normalizer(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    max + sum.ln() as f32
}

/// The log-probability of `token` in a row whose normalizer is `log_z` (capped at 0: the
/// rounding of `log_z` must not give a probability above 1).
pub fn logprob_with(logits: &[f32], log_z: f32, token: u32) -> f32 {
    (logits[token as usize] - log_z).min(0.0)
}

/// The log-probability of `token` in this row.
pub fn logprob(logits: &[f32], token: u32) -> f32 {
    logprob_with(logits, log_normalizer(logits), token)
}

/// The `k` most likely tokens of a row with their log-probabilities, most likely first
/// (ties by the smaller id, so the first is the greedy token).
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let log_z = log_normalizer(logits);
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(ids.len());
    let desc = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    if k > 0 && k < ids.len() {
        ids.select_nth_unstable_by(k - 1, desc);
    }
    ids.truncate(k);
    ids.sort_by(desc);
    ids.into_iter()
        .map(|id| (id, logprob_with(logits, log_z, id)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_is_sorted_greedy_first_and_normalized() {
        let logits = [0.5f32, 3.0, -1.0, 3.0, 2.0];
        let top = top_logprobs(&logits, 3);
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        // Ties (1 and 3) go to the smaller id, the argmax a greedy sampler picks.
        assert_eq!(ids, [1, 3, 4]);
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        for &(id, lp) in &top {
            let want = logits[id as usize] as f64 - z.ln();
            assert!((lp as f64 - want).abs() < 1e-6, "{id}: {lp} vs {want}");
        }
        let total: f64 = top_logprobs(&logits, 99)
            .iter()
            .map(|t| (t.1 as f64).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!(top_logprobs(&logits, 0).is_empty());
    }
}
