//! `ngram-simple` drafts (llama.cpp's `common_ngram_simple_draft`): the last `size_n`
//! tokens (ending with the one just sampled) are looked up in the sequence, newest
//! occurrence first, and the up to `size_m` tokens that followed it are the draft. Text
//! that quotes its input (extraction, code edits) repeats long spans, so these drafts are
//! often right and cost no model.
//!
//! Differences from llama.cpp: it proposes nothing when fewer than `size_n` tokens follow
//! the newest match; pocket takes the newest match followed by at least `size_n` tokens
//! (or a full draft), else the one followed by the most, and the draft budget caps the
//! length.

use super::Drafter;
use crate::forward::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramSimple {
    /// Length of the n-gram looked up (`--spec-ngram-simple-size-n`).
    pub size_n: usize,
    /// Most tokens copied after a match (`--spec-ngram-simple-size-m`).
    pub size_m: usize,
}

impl Default for NgramSimple {
    /// llama.cpp's defaults.
    fn default() -> Self {
        NgramSimple {
            size_n: 12,
            size_m: 48,
        }
    }
}

impl NgramSimple {
    /// The draft for `context` + `last`, at most `max` tokens.
    pub fn lookup(&self, context: &[u32], last: u32, max: usize) -> Vec<u32> {
        let n = self.size_n.max(1);
        let len = context.len() + 1; // the sequence with `last`
        if len <= n {
            return Vec::new();
        }
        let at = |i: usize| if i < context.len() { context[i] } else { last };
        let pattern = len - n; // where the current n-gram starts
        let want = self.size_m.min(max);
        // The newest earlier occurrence (it may overlap the current one) followed by at
        // least `min(want, n)` tokens; else the one followed by the most.
        let mut best: Option<(usize, usize)> = None; // (start, tokens after it)
        for j in (0..pattern).rev() {
            if (0..n).all(|k| at(j + k) == at(pattern + k)) {
                let after = (len - (j + n)).min(want);
                if best.is_none_or(|(_, a)| after > a) {
                    best = Some((j, after));
                }
                if after >= want.min(n) {
                    break;
                }
            }
        }
        let Some((j, take)) = best else {
            return Vec::new();
        };
        let from = j + n;
        (from..from + take).map(at).collect()
    }
}

impl Drafter for NgramSimple {
    fn draft(&mut self, context: &[u32], last: u32, max: usize) -> Result<Vec<u32>> {
        Ok(self.lookup(context, last, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ng(n: usize, m: usize) -> NgramSimple {
        NgramSimple {
            size_n: n,
            size_m: m,
        }
    }

    #[test]
    fn drafts_what_followed_the_newest_earlier_match() {
        // ... 1 2 | 3 4 5 ... 1 2 | 6 7 ... and now 1 2 again: the newest match (6 7) wins.
        let ctx = [9, 1, 2, 3, 4, 5, 8, 1, 2, 6, 7, 0, 1];
        assert_eq!(ng(2, 8).lookup(&ctx, 2, 8), [6, 7, 0, 1, 2]);
        assert_eq!(ng(2, 2).lookup(&ctx, 2, 8), [6, 7], "size_m caps");
        assert_eq!(ng(2, 8).lookup(&ctx, 2, 1), [6], "max caps");
        // A longer n-gram only matches the first occurrence.
        assert_eq!(
            ng(3, 3).lookup(&[9, 1, 2, 3, 4, 5, 8, 1, 2, 6, 7, 9, 1], 2, 8),
            [3, 4, 5]
        );
    }

    #[test]
    fn no_match_no_draft() {
        assert!(ng(2, 8).lookup(&[1, 2, 3, 4], 5, 8).is_empty());
        assert!(ng(4, 8).lookup(&[1, 2], 3, 8).is_empty(), "shorter than n");
        assert!(ng(1, 8).lookup(&[], 3, 8).is_empty());
    }

    #[test]
    fn overlapping_runs_draft_the_repetition() {
        // 5 5 5 5 + 5: the n-gram (5 5) occurs at 2 (followed by one token), 1 (two) and 0.
        assert_eq!(ng(2, 8).lookup(&[5, 5, 5, 5], 5, 8), [5, 5]);
        assert_eq!(
            ng(2, 1).lookup(&[5, 5, 5, 5], 5, 8),
            [5],
            "the newest suffices"
        );
    }
}
