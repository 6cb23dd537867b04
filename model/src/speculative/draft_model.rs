//! `draft-simple` drafts: a smaller model with the target's vocabulary, with its own KV
//! cache, proposes its greedy continuation. Its cache is kept in step with the target's
//! tokens by prefix reuse: after a rejection it is cut back to what the target kept, and
//! only the tokens it has not seen are evaluated.

use super::Drafter;
use crate::forward::{Model, Result, Session};
use crate::sample_basic::argmax;

/// Why a model cannot draft for another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraftModelError {
    #[error("the draft model's vocabulary has {draft} tokens, the target's {target}: speculative decoding needs the same vocabulary")]
    VocabSize { draft: usize, target: usize },
    #[error("token {id} is {draft:?} in the draft model and {target:?} in the target: speculative decoding needs the same vocabulary")]
    TokenText {
        id: usize,
        draft: String,
        target: String,
    },
}

pub struct DraftModel<'m> {
    session: Session<'m>,
}

impl<'m> DraftModel<'m> {
    /// Drafts with `session` (a session of the draft model) for `target`, after checking
    /// that both models share one vocabulary.
    pub fn new(session: Session<'m>, target: &Model) -> std::result::Result<Self, DraftModelError> {
        check_vocab(session.model, target)?;
        Ok(DraftModel { session })
    }

    pub fn session(&self) -> &Session<'m> {
        &self.session
    }
}

/// The same token texts under the same ids (llama.cpp also compares the special tokens;
/// equal texts make equal pieces, which is what the drafts rely on).
pub fn check_vocab(draft: &Model, target: &Model) -> std::result::Result<(), DraftModelError> {
    let (d, t) = (&draft.tokenizer, &target.tokenizer);
    let (nd, nt) = (draft.config.n_vocab, target.config.n_vocab);
    if nd != nt {
        return Err(DraftModelError::VocabSize {
            draft: nd,
            target: nt,
        });
    }
    for id in 0..nd as u32 {
        let (a, b) = (d.token_text(id), t.token_text(id));
        if a != b {
            return Err(DraftModelError::TokenText {
                id: id as usize,
                draft: a.unwrap_or_default().to_string(),
                target: b.unwrap_or_default().to_string(),
            });
        }
    }
    Ok(())
}

impl Drafter for DraftModel<'_> {
    fn draft(&mut self, context: &[u32], last: u32, max: usize) -> Result<Vec<u32>> {
        let s = &mut self.session;
        // Bring the draft's cache to `context + last`, keeping the shared prefix.
        let mut seq = Vec::with_capacity(context.len() + 1);
        seq.extend_from_slice(context);
        seq.push(last);
        let keep = s.reuse_prefix(&seq);
        // Room in the draft's context: the new tokens, then one per further draft.
        let room = s.n_ctx().saturating_sub(seq.len());
        if room == 0 || max == 0 {
            return Ok(Vec::new());
        }
        let mut next = argmax(s.prefill(&seq[keep..])?);
        let mut out = vec![next];
        while out.len() < max.min(room) {
            next = argmax(s.decode(next)?);
            out.push(next);
        }
        Ok(out)
    }
}
