//! Speculative decoding: a drafter proposes the next few tokens, the target evaluates the
//! last sampled token and the drafts in one forward batch (logits for each row), and keeps
//! the longest prefix of drafts its own sampler agrees with (see `generate`).
//!
//! Why the output is unchanged: every kept token is sampled from the target's logits of
//! its row, exactly as plain decoding would sample it (one sampler draw per token, the same
//! penalty history), and a batched row's logits are bit-identical to that row evaluated
//! alone (the batch-invariance guarantee of `Session::forward_batch`). A draft only decides
//! how many rows are evaluated at once. With a sampling temperature this "sample the
//! target, compare with the draft" check is the exact rejection scheme for drafts that are
//! single proposals (n-gram lookup, a greedy draft model): a draft token `x` survives with
//! probability `p(x)`, and on a mismatch the token kept is the target's own sample.

mod draft_model;
mod ngram;

pub use draft_model::{DraftModel, DraftModelError};
pub use ngram::{NgramDrafter, NgramSimple};

use crate::forward::Result;

/// llama.cpp's `--spec-type` values that pocket implements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpecType {
    #[default]
    None,
    /// Drafts copied from the last earlier occurrence of the current n-gram (prompt and
    /// generated text).
    NgramSimple,
    /// Drafts from a smaller model with the same vocabulary (greedy).
    DraftSimple,
}

/// Proposes tokens to follow a sequence.
pub trait Drafter {
    /// Up to `max` tokens to follow `context` (the tokens the target has evaluated) and
    /// `last` (sampled, not evaluated yet).
    fn draft(&mut self, context: &[u32], last: u32, max: usize) -> Result<Vec<u32>>;
}

/// How many tokens to draft, and counts for `/metrics` and the timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecParams {
    /// Most tokens drafted per verify step (`--spec-draft-n-max`; 8, MNN's block size).
    pub n_max: usize,
    /// Fewer drafts than this are not verified (`--spec-draft-n-min`).
    pub n_min: usize,
}

impl Default for SpecParams {
    fn default() -> Self {
        SpecParams { n_max: 8, n_min: 0 }
    }
}

/// Drafted and accepted tokens, as llama-server reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Tokens proposed and verified.
    pub drafted: usize,
    /// Drafted tokens the target kept.
    pub accepted: usize,
    /// Forward batches that verified drafts.
    pub verify_steps: usize,
}

impl SpecStats {
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

/// A drafter with its draft budget: the budget doubles (up to `n_max`) while drafts are
/// kept whole and falls back to one more than what was kept after a rejection, so a run
/// of failing drafts costs little more than plain decoding (prose), and a copy-heavy
/// stretch soon drafts `n_max` at a time.
pub struct Speculator<'d> {
    drafter: Box<dyn Drafter + 'd>,
    params: SpecParams,
    budget: usize,
    pub stats: SpecStats,
}

impl<'d> Speculator<'d> {
    pub fn new(drafter: Box<dyn Drafter + 'd>, params: SpecParams) -> Self {
        Speculator {
            drafter,
            params,
            budget: params.n_max,
            stats: SpecStats::default(),
        }
    }

    /// Drafts for the next verify step, at most `room` tokens (what the context and the
    /// length limit leave); empty when there is nothing worth verifying.
    pub fn draft(&mut self, context: &[u32], last: u32, room: usize) -> Result<Vec<u32>> {
        let max = self.budget.min(room);
        if max == 0 || max < self.params.n_min {
            return Ok(Vec::new());
        }
        let mut d = self.drafter.draft(context, last, max)?;
        d.truncate(max);
        if d.len() < self.params.n_min.max(1) {
            d.clear();
        }
        Ok(d)
    }

    /// Records a verify step: `kept` of `drafted` drafts accepted.
    pub fn verified(&mut self, drafted: usize, kept: usize) {
        self.stats.drafted += drafted;
        self.stats.accepted += kept;
        self.stats.verify_steps += 1;
        let n_max = self.params.n_max.max(1);
        self.budget = if kept == drafted {
            (self.budget * 2).clamp(1, n_max)
        } else {
            (kept + 1).clamp(self.params.n_min.max(1), n_max)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<u32>);
    impl Drafter for Fixed {
        fn draft(&mut self, _: &[u32], _: u32, max: usize) -> Result<Vec<u32>> {
            Ok(self.0.iter().copied().take(max + 3).collect())
        }
    }

    #[test]
    fn the_budget_backs_off_after_rejections_and_grows_back() {
        let mut s = Speculator::new(Box::new(Fixed((0..20).collect())), SpecParams::default());
        assert_eq!(s.draft(&[], 0, 100).unwrap().len(), 8, "n_max, never more");
        assert_eq!(
            s.draft(&[], 0, 3).unwrap().len(),
            3,
            "capped by the room left"
        );
        s.verified(8, 0);
        assert_eq!(s.draft(&[], 0, 100).unwrap().len(), 1);
        s.verified(1, 1);
        assert_eq!(s.draft(&[], 0, 100).unwrap().len(), 2);
        s.verified(2, 2);
        s.verified(4, 4);
        assert_eq!(s.draft(&[], 0, 100).unwrap().len(), 8);
        s.verified(8, 5);
        assert_eq!(s.draft(&[], 0, 100).unwrap().len(), 6);
        assert_eq!(
            s.stats,
            SpecStats {
                drafted: 23,
                accepted: 12,
                verify_steps: 5
            }
        );
    }

    #[test]
    fn drafts_shorter_than_n_min_are_dropped() {
        let p = SpecParams { n_max: 8, n_min: 4 };
        let mut s = Speculator::new(Box::new(Fixed(vec![1, 2, 3])), p);
        assert!(s.draft(&[], 0, 100).unwrap().is_empty());
        let mut s = Speculator::new(Box::new(Fixed(vec![1, 2, 3, 4])), p);
        assert_eq!(s.draft(&[], 0, 100).unwrap(), [1, 2, 3, 4]);
        assert!(s.draft(&[], 0, 3).unwrap().is_empty(), "room below n_min");
    }
}
