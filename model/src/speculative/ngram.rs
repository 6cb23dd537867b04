//! `ngram-simple` drafts (llama.cpp's `common_ngram_simple_draft`): the last `size_n`
//! tokens (ending with the one just sampled) are looked up in the sequence, newest
//! occurrence first, and the up to `size_m` tokens that followed it are the draft. Text
//! that quotes its input (extraction, code edits) repeats long spans, so these drafts are
//! often right and cost no model.
//!
//! Differences from llama.cpp: it proposes nothing when fewer than `size_n` tokens follow
//! the newest match; pocket takes the newest match followed by at least `size_n` tokens
//! (or a full draft), else the one followed by the most, and the draft budget caps the
//! length. And when the `size_n`-token key has no earlier occurrence, pocket tries shorter
//! keys down to `min_n` (longest first): with only the 12-token key a copy drafts nothing
//! until 12 tokens after each point where the output leaves its source (a renamed
//! variable, a changed word), so few steps drafted (SmolLM2, quoting / extraction / code:
//! 1.1-1.3 tokens a step); from 3 tokens on, the same prompts drafted 2-4.7 tokens a step
//! and decoded 1.5-2.4x plain, while prose still drafted nothing (README, speculative
//! decoding). `min_n = size_n` is llama.cpp's lookup.

use super::Drafter;
use crate::forward::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramSimple {
    /// Length of the n-gram looked up (`--spec-ngram-simple-size-n`).
    pub size_n: usize,
    /// Most tokens copied after a match (`--spec-ngram-simple-size-m`).
    pub size_m: usize,
    /// Shortest key tried when longer ones have no match (`--spec-ngram-simple-size-n-min`,
    /// pocket's; at most `size_n`).
    pub min_n: usize,
}

impl Default for NgramSimple {
    /// llama.cpp's defaults, and keys down to 3 tokens.
    fn default() -> Self {
        NgramSimple {
            size_n: 12,
            size_m: 48,
            min_n: 3,
        }
    }
}

impl NgramSimple {
    /// The draft for `context` + `last`, at most `max` tokens: from the longest key that
    /// occurred before, `size_n` down to `min_n` tokens.
    pub fn lookup(&self, context: &[u32], last: u32, max: usize) -> Vec<u32> {
        let top = self.size_n.max(1);
        (self.min_n.clamp(1, top)..=top)
            .rev()
            .map(|n| self.lookup_key(n, context, last, max))
            .find(|d| !d.is_empty())
            .unwrap_or_default()
    }

    /// The draft after the newest suitable earlier occurrence of the last `n` tokens.
    fn lookup_key(&self, n: usize, context: &[u32], last: u32, max: usize) -> Vec<u32> {
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
            min_n: n,
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

    #[test]
    fn shorter_keys_are_tried_longest_first() {
        // The last 4 tokens (7 1 2 3) never occurred before; (1 2 3) did, twice: at 0 then
        // 4 (followed by 6 8), and (2 3) also at 9 (followed by 5); the 3-token key wins.
        let ctx = [1, 2, 3, 4, 1, 2, 3, 6, 8, 2, 3, 5, 7, 1, 2];
        let fallback = |min_n| NgramSimple {
            size_n: 4,
            size_m: 8,
            min_n,
        };
        assert!(
            fallback(4).lookup(&ctx, 3, 2).is_empty(),
            "llama.cpp's: no 4-token match"
        );
        assert_eq!(fallback(3).lookup(&ctx, 3, 2), [6, 8]);
        assert_eq!(
            fallback(1).lookup(&ctx, 3, 2),
            [6, 8],
            "the longest key first"
        );
        // Only the 2-token key (2 9) occurred: at min_n 3 nothing, at 2 its continuation.
        let ctx = [2, 9, 4, 4, 1, 2];
        assert!(fallback(3).lookup(&ctx, 9, 8).is_empty());
        assert_eq!(fallback(2).lookup(&ctx, 9, 8), [4, 4, 1, 2, 9]);
        assert_eq!(NgramSimple::default().min_n, 3, "pocket's default floor");
        let above = NgramSimple {
            size_n: 2,
            size_m: 8,
            min_n: 5,
        };
        assert_eq!(
            above.lookup(&ctx, 9, 8),
            [4, 4, 1, 2, 9],
            "min_n above size_n: size_n"
        );
    }
}
