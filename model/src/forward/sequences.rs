//! The sequences of a [`Session`]: lengths, tokens, truncation, forks, prefix reuse, and
//! the checks a batch passes before any work. Sequence 0 is the default one: the
//! single-sequence calls (`prefill`, `decode`, `forward`, `truncate`, ...) act on it.

use super::{ModelError, Result, Session};
use crate::batch::{Batch, SeqId};
use crate::kv_cache::KvType;

impl Session<'_> {
    /// Tokens each sequence can hold.
    pub fn n_ctx(&self) -> usize {
        self.seqs[0].cache.n_ctx()
    }
    /// Sequences the session holds.
    pub fn n_seq(&self) -> usize {
        self.seqs.len()
    }
    /// Tokens in sequence 0's cache.
    pub fn pos(&self) -> usize {
        self.seq_len(0)
    }
    /// Tokens in sequence `seq`'s cache (0 for a sequence the session does not hold).
    pub fn seq_len(&self, seq: SeqId) -> usize {
        self.seqs.get(seq).map_or(0, |s| s.tokens.len())
    }
    /// The tokens in sequence 0's cache, in order.
    pub fn tokens(&self) -> &[u32] {
        self.seq_tokens(0)
    }
    /// The tokens in sequence `seq`'s cache, in order.
    pub fn seq_tokens(&self, seq: SeqId) -> &[u32] {
        self.seqs.get(seq).map_or(&[], |s| &s.tokens)
    }
    /// Forgets sequence 0 (the cache is overwritten in place).
    pub fn clear(&mut self) {
        self.truncate(0);
    }
    /// Keeps the first `n` tokens of sequence 0 and forgets the rest (a no-op if `n` is
    /// not below its length); its next tokens are evaluated from position `n`.
    pub fn truncate(&mut self, n: usize) {
        self.truncate_seq(0, n);
    }
    /// [`Session::truncate`] for sequence `seq` (a no-op for one the session does not hold).
    pub fn truncate_seq(&mut self, seq: SeqId, n: usize) {
        if let Some(s) = self.seqs.get_mut(seq) {
            s.tokens.truncate(n);
        }
    }
    /// Forgets sequence `seq`.
    pub fn clear_seq(&mut self, seq: SeqId) {
        self.truncate_seq(seq, 0);
    }
    /// Makes `dst` a copy of the first `n` tokens of `src` (its keys and values copied, so
    /// the two go on independently): candidate continuations of one prompt without
    /// evaluating the prompt twice. `n` is capped at `src`'s length.
    pub fn fork_seq(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        let n_seq = self.seqs.len();
        for seq in [src, dst] {
            if seq >= n_seq {
                return Err(ModelError::BadSeq { row: 0, seq, n_seq });
            }
        }
        if src == dst {
            self.truncate_seq(src, n);
            return Ok(());
        }
        let n = n.min(self.seqs[src].tokens.len());
        let (a, b) = if src < dst {
            let (lo, hi) = self.seqs.split_at_mut(dst);
            (&lo[src], &mut hi[0])
        } else {
            let (lo, hi) = self.seqs.split_at_mut(src);
            (&hi[0], &mut lo[dst])
        };
        let copied = b.cache.copy_prefix_from(&a.cache, n);
        debug_assert!(copied, "sequences of one session share shape and types");
        b.tokens.clear();
        b.tokens.extend_from_slice(&a.tokens[..n]);
        Ok(())
    }
    /// Prefix reuse, as llama.cpp's server and cli do between chat turns: truncates
    /// sequence 0 to the longest common prefix of its tokens and `tokens`, leaving at least
    /// the last of `tokens` to evaluate (its logits are needed), and returns the number
    /// kept. Evaluate `tokens[kept..]` next.
    pub fn reuse_prefix(&mut self, tokens: &[u32]) -> usize {
        let common = self
            .tokens()
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        let keep = common.min(tokens.len().saturating_sub(1));
        self.truncate(keep);
        keep
    }
    /// The KV cache's key and value element types.
    pub fn kv_types(&self) -> (KvType, KvType) {
        self.seqs[0].cache.types()
    }

    /// Every row names a sequence the session holds, a token of the vocabulary and the
    /// position that continues its sequence, inside the context.
    pub(super) fn check_batch(&self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Err(ModelError::Empty);
        }
        let n_vocab = self.model.config.n_vocab;
        let n_seq = self.seqs.len();
        let mut next: Vec<usize> = self.seqs.iter().map(|s| s.tokens.len()).collect();
        for (i, r) in batch.rows.iter().enumerate() {
            if r.seq >= n_seq {
                return Err(ModelError::BadSeq {
                    row: i,
                    seq: r.seq,
                    n_seq,
                });
            }
            if r.token as usize >= n_vocab {
                return Err(ModelError::BadToken(r.token, n_vocab));
            }
            if r.pos != next[r.seq] {
                return Err(ModelError::BadPos {
                    row: i,
                    seq: r.seq,
                    pos: r.pos,
                    next: next[r.seq],
                });
            }
            next[r.seq] += 1;
        }
        if let Some(&need) = next.iter().find(|&&n| n > self.n_ctx()) {
            return Err(ModelError::ContextFull {
                need,
                n_ctx: self.n_ctx(),
            });
        }
        Ok(())
    }
}
