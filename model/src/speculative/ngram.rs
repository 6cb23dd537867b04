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
//! decoding). `min_n = size_n` is llama.cpp's lookup. [`NgramDrafter`] adds a third
//! difference: after an edit it resynchronizes with the span it was copying (`resync`;
//! 0 keeps llama.cpp's behaviour).

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
    /// Resynchronization window in tokens (`--spec-ngram-simple-resync`, pocket's; 0: off):
    /// when no key matches but the output was copying a span a moment ago, the last token
    /// is looked up within this many tokens of where that copy would be now ([`NgramDrafter`]).
    pub resync: usize,
}

impl Default for NgramSimple {
    /// llama.cpp's defaults, keys down to 3 tokens, and resynchronization within 8 tokens.
    fn default() -> Self {
        NgramSimple {
            size_n: 12,
            size_m: 48,
            min_n: 3,
            resync: 8,
        }
    }
}

/// A draft: `len` tokens copied from position `from` of the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    from: usize,
    len: usize,
}

impl NgramSimple {
    /// The draft for `context` + `last`, at most `max` tokens: from the longest key that
    /// occurred before, `size_n` down to `min_n` tokens.
    pub fn lookup(&self, context: &[u32], last: u32, max: usize) -> Vec<u32> {
        match self.find(context, last, max) {
            Some(c) => copy_out(context, last, c),
            None => Vec::new(),
        }
    }

    fn find(&self, context: &[u32], last: u32, max: usize) -> Option<Span> {
        let top = self.size_n.max(1);
        (self.min_n.clamp(1, top)..=top)
            .rev()
            .find_map(|n| self.find_key(n, context, last, max))
    }

    /// The draft after the newest suitable earlier occurrence of the last `n` tokens.
    fn find_key(&self, n: usize, context: &[u32], last: u32, max: usize) -> Option<Span> {
        let len = context.len() + 1; // the sequence with `last`
        if len <= n {
            return None;
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
        let (j, take) = best?;
        (take > 0).then_some(Span {
            from: j + n,
            len: take,
        })
    }
}

/// Tokens `c.from..c.from + c.len` of `context` + `last`.
fn copy_out(context: &[u32], last: u32, c: Span) -> Vec<u32> {
    let at = |i: usize| if i < context.len() { context[i] } else { last };
    (c.from..c.from + c.len).map(at).collect()
}

/// Where the output was copying from: the draft proposed for sequence position `len`
/// started at position `src`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    len: usize,
    src: usize,
    /// The sequence length at the last sign that the output copies: a key match, or the
    /// first token of the previous draft kept.
    seen: usize,
}

/// [`NgramSimple`] drafts, resynchronized after the output leaves its source.
///
/// Why: a copy with edits (a renamed variable, a changed word in a quoted sentence) leaves
/// its source for a token or two and comes back. A key lookup drafts again only once
/// `min_n` tokens after the edit agree with the source, so every edit costs about
/// `min_n` plain steps. The drafter instead remembers where its last draft was copied
/// from and, when no key matches, looks the last token up within `resync` tokens of where
/// that copy would be now (nearest first, preferring one whose previous token also
/// agrees): after `total` was renamed `sum_value`, the `=` that follows is found right
/// after `total` in the source and the rest of the line is drafted at once. Only a recent
/// copy counts (a key match or a kept draft within `2·resync` tokens), so prose, where no
/// key ever matches, drafts exactly as without it.
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    pub cfg: NgramSimple,
    anchor: Option<Anchor>,
}

impl NgramDrafter {
    pub fn new(cfg: NgramSimple) -> Self {
        NgramDrafter { cfg, anchor: None }
    }

    fn resync(&self, context: &[u32], last: u32, max: usize) -> Option<Span> {
        let w = self.cfg.resync;
        let a = self.anchor?;
        let len = context.len() + 1;
        if w == 0 || len <= a.len || len - a.seen > 2 * w || len < 2 {
            return None;
        }
        let at = |i: usize| if i < context.len() { context[i] } else { last };
        // `last` (position len - 1) lines up with source position `e`, had the copy gone on.
        let e = a.src + (len - 1 - a.len);
        let prev = at(len - 2);
        let lo = e.saturating_sub(w);
        let hi = (e + w).min(len - 2); // strictly before `last`
        (lo..=hi)
            .filter(|&j| at(j) == last)
            .min_by_key(|&j| {
                let both = j > 0 && at(j - 1) == prev;
                (!both, j.abs_diff(e), j < e)
            })
            .map(|j| Span {
                from: j + 1,
                len: (len - (j + 1)).min(self.cfg.size_m.min(max)),
            })
            .filter(|c| c.len > 0)
    }
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, context: &[u32], last: u32, max: usize) -> Result<Vec<u32>> {
        let len = context.len() + 1;
        let at = |i: usize| if i < context.len() { context[i] } else { last };
        // A shorter sequence than at the last draft: cut back, or another text.
        self.anchor = self.anchor.filter(|a| a.len <= len);
        if let Some(a) = &mut self.anchor {
            if a.len < len && at(a.len) == at(a.src) {
                a.seen = len;
            }
        }
        let (c, seen) = match self.cfg.find(context, last, max) {
            Some(c) => (c, len),
            None => match self.resync(context, last, max) {
                Some(c) => (c, self.anchor.map_or(len, |a| a.seen)),
                None => return Ok(Vec::new()),
            },
        };
        self.anchor = Some(Anchor {
            len,
            src: c.from,
            seen,
        });
        Ok(copy_out(context, last, c))
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
            resync: 0,
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
            resync: 0,
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
            resync: 0,
        };
        assert_eq!(
            above.lookup(&ctx, 9, 8),
            [4, 4, 1, 2, 9],
            "min_n above size_n: size_n"
        );
    }

    /// A drafter over `seq` (the last token as `last`).
    fn draft(d: &mut NgramDrafter, seq: &[u32], max: usize) -> Vec<u32> {
        let (last, context) = seq.split_last().unwrap();
        d.draft(context, *last, max).unwrap()
    }

    fn resyncing(w: usize) -> NgramDrafter {
        NgramDrafter::new(NgramSimple {
            size_n: 4,
            size_m: 8,
            min_n: 3,
            resync: w,
        })
    }

    #[test]
    fn a_copy_resynchronizes_one_token_after_an_edit() {
        // Source 1..=9, then 0 0; the output copies it, renames 6 as 60 61, and goes on.
        let src: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0];
        let mut seq = src.clone();
        seq.extend([1, 2, 3, 4, 5]);
        let (mut on, mut off) = (resyncing(8), resyncing(0));
        assert_eq!(
            draft(&mut on, &seq, 4),
            [6, 7, 8, 9],
            "the 3-token key (3 4 5)"
        );
        assert_eq!(draft(&mut off, &seq, 4), [6, 7, 8, 9]);
        // The target wrote 60 instead of 6, then 61: no key matches, and neither token
        // occurs near the copy.
        for t in [60, 61] {
            seq.push(t);
            assert!(draft(&mut on, &seq, 4).is_empty());
            assert!(draft(&mut off, &seq, 4).is_empty());
        }
        // 7: back in the source (a step behind where the copy would be): the rest of it.
        seq.push(7);
        assert_eq!(draft(&mut on, &seq, 4), [8, 9, 0, 0]);
        assert!(
            draft(&mut off, &seq, 4).is_empty(),
            "keys alone wait for (60 61 7)'s successors"
        );
    }

    #[test]
    fn the_nearest_occurrence_wins_and_one_after_the_same_token_first() {
        // The copy of 1..=9 was at 6 when it left; 5 occurs at 2 and at 8; 8 is nearer.
        let mut seq: Vec<u32> = vec![9, 9, 5, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0];
        seq.extend([2, 3, 4]);
        let mut d = resyncing(8);
        assert_eq!(draft(&mut d, &seq, 2), [5, 6]);
        seq.extend([40, 5]);
        assert_eq!(
            draft(&mut d, &seq, 2),
            [6, 7],
            "5 at 8, nearest to the copy"
        );
        // Again, now with (7 5) agreeing with position 2's neighbour: preferred though
        // farther.
        let mut seq: Vec<u32> = vec![9, 9, 7, 5, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0];
        seq.extend([2, 3, 4]);
        let mut d = resyncing(8);
        assert_eq!(draft(&mut d, &seq, 2), [5, 6]);
        seq.extend([7, 5]);
        assert_eq!(draft(&mut d, &seq, 2), [8, 1], "(7 5) at 2..4");
    }

    #[test]
    fn prose_and_stale_or_cut_back_anchors_draft_nothing() {
        // No key ever matched: no anchor, so a repeated single token drafts nothing.
        let mut d = resyncing(8);
        assert!(draft(&mut d, &[1, 2, 3, 4, 5, 6, 3], 4).is_empty());
        // An anchor, then more than 2·resync tokens without a kept draft or a match.
        let mut seq: Vec<u32> = (1..=9).collect();
        seq.extend([0, 3, 4, 5]);
        let (mut d, mut wide) = (resyncing(2), resyncing(8));
        assert_eq!(draft(&mut d, &seq, 2), [6, 7]);
        assert_eq!(draft(&mut wide, &seq, 2), [6, 7]);
        seq.extend([50, 51]);
        assert!(draft(&mut d, &seq, 2).is_empty(), "51: nothing near");
        seq.extend([52, 53, 8]);
        assert!(draft(&mut d, &seq, 2).is_empty(), "5 tokens since: stale");
        assert_eq!(draft(&mut wide, &seq, 2), [9, 0], "fresh within 16");
        // A sequence shorter than at the last draft (cut back, another request).
        let mut seq: Vec<u32> = (1..=9).collect();
        seq.extend([0, 3, 4, 5]);
        let mut d = resyncing(8);
        assert_eq!(draft(&mut d, &seq, 2), [6, 7]);
        assert!(draft(&mut d, &[70, 71, 7], 2).is_empty());
    }
}
