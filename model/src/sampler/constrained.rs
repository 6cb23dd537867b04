//! The sampler's grammar hook: before the chain, drop the tokens the grammar does not
//! allow (llama.cpp sets their logits to -inf; dropping them is the same draw and keeps
//! -inf out of the softmax); after the draw, move the grammar past the token. A grammar
//! that fails (no allowed token, an internal error) ends generation with an
//! end-of-generation token and keeps the error for the caller
//! ([`Sampler::take_grammar_error`]).

use super::candidates::Candidates;
use super::Sampler;
use crate::grammar::{Constraint, GrammarError};

#[derive(Default)]
pub(super) struct GrammarHook {
    constraint: Option<Constraint>,
    error: Option<GrammarError>,
    /// What to return when the grammar fails: an end-of-generation token.
    end: u32,
}

impl GrammarHook {
    /// Keeps only the allowed candidates; `Some(end)` when the grammar failed.
    pub fn mask(&mut self, cand: &mut Candidates) -> Option<u32> {
        let c = self.constraint.as_mut()?;
        match c.allowed() {
            Ok(m) => {
                cand.data.retain(|t| m.is_allowed(t.id));
                if cand.data.is_empty() {
                    self.fail(GrammarError::DeadEnd);
                    return Some(self.end);
                }
                None
            }
            Err(e) => {
                self.fail(e);
                Some(self.end)
            }
        }
    }

    /// Whether a grammar constrains the next sample.
    pub fn active(&self) -> bool {
        self.constraint.is_some()
    }

    pub fn commit(&mut self, token: u32) {
        if let Some(c) = self.constraint.as_mut() {
            if let Err(e) = c.commit(token) {
                self.fail(e);
            }
        }
    }

    fn fail(&mut self, e: GrammarError) {
        self.error.get_or_insert(e);
        self.constraint = None;
    }
}

impl Sampler {
    /// Holds sampling to `constraint` from the next [`Sampler::sample`] on (`None`:
    /// unconstrained).
    pub fn set_constraint(&mut self, constraint: Option<Constraint>) {
        self.grammar = GrammarHook {
            end: constraint.as_ref().map_or(0, Constraint::end_token),
            constraint,
            error: None,
        };
    }

    /// The constraint in use, if any.
    pub fn constraint(&mut self) -> Option<&mut Constraint> {
        self.grammar.constraint.as_mut()
    }

    /// Why the grammar stopped constraining generation, if it failed.
    pub fn take_grammar_error(&mut self) -> Option<GrammarError> {
        self.grammar.error.take()
    }
}
