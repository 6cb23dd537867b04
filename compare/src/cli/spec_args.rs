//! Speculative decoding flags shared by `run` and `chat`: llama.cpp's names
//! (`--spec-type`, `-md/--spec-draft-model`, `--spec-draft-n-max/-n-min`,
//! `--spec-ngram-simple-size-n/-m`), and pocket's `--spec-ngram-simple-size-n-min` (shorter
//! keys when the `-size-n` one has no match; see `NgramSimple`). pocket's `--spec-draft-n-max` defaults to 8 (MNN's
//! draft block; llama.cpp's is 3) and also caps `ngram-simple` drafts, which llama.cpp
//! sizes by `-size-m` alone.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use pocket_model::speculative::{DraftModel, NgramDrafter, NgramSimple, SpecParams, Speculator};
use pocket_model::{Model, Session, SessionOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SpecKind {
    None,
    /// Drafts copied from an earlier occurrence of the last n-gram in the text.
    NgramSimple,
    /// Drafts from the model given with -md.
    DraftSimple,
}

#[derive(Args, Clone, Debug)]
pub struct SpecArgs {
    /// Speculative decoding [default: draft-simple with -md, else none].
    #[arg(long = "spec-type", value_enum)]
    pub spec_type: Option<SpecKind>,
    /// Draft model (same vocabulary) for draft-simple (`-md`).
    #[arg(
        long = "spec-draft-model",
        visible_alias = "model-draft",
        value_name = "FNAME"
    )]
    pub draft_model: Option<PathBuf>,
    /// Most tokens drafted per verify step.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub spec_draft_n_max: usize,
    /// Fewer drafted tokens than this are not verified.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub spec_draft_n_min: usize,
    /// ngram-simple: length of the n-gram looked up.
    #[arg(long, default_value_t = 12, value_name = "N", value_parser = ngram_tokens(1))]
    pub spec_ngram_simple_size_n: u16,
    /// ngram-simple: most tokens copied after a match.
    #[arg(long, default_value_t = 48, value_name = "N", value_parser = ngram_tokens(1))]
    pub spec_ngram_simple_size_m: u16,
    /// ngram-simple: shortest n-gram looked up when longer ones have no earlier match
    /// (pocket's; equal to -size-n for llama.cpp's lookup).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = ngram_tokens(1))]
    pub spec_ngram_simple_size_n_min: u16,
    /// ngram-simple: when no n-gram matches, look the last token up within N tokens of
    /// where the text was copying from a moment ago (pocket's; 0: off, llama.cpp's lookup).
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = ngram_tokens(0))]
    pub spec_ngram_simple_resync: u16,
}

/// The ngram-simple flags' parser: a count of tokens from `min` to 1024.
fn ngram_tokens(min: i64) -> clap::builder::RangedI64ValueParser<u16> {
    clap::value_parser!(u16).range(min..=1024)
}

/// Flags that contradict each other.
#[derive(Debug, thiserror::Error)]
pub enum SpecArgsError {
    #[error("--spec-type draft-simple needs a draft model (-md FILE)")]
    NoDraftModel,
    #[error("-md is given but --spec-type is {0:?}: drop one of them")]
    UnusedDraftModel(SpecKind),
    #[error("--spec-draft-n-min {n_min} is above --spec-draft-n-max {n_max}")]
    MinAboveMax { n_min: usize, n_max: usize },
    #[error("draft model: {0}")]
    Vocab(#[from] pocket_model::speculative::DraftModelError),
}

impl SpecArgs {
    pub fn kind(&self) -> Result<SpecKind, SpecArgsError> {
        let kind = match (self.spec_type, &self.draft_model) {
            (None, Some(_)) => SpecKind::DraftSimple,
            (None, None) => SpecKind::None,
            (Some(SpecKind::DraftSimple), None) => return Err(SpecArgsError::NoDraftModel),
            (Some(k @ (SpecKind::None | SpecKind::NgramSimple)), Some(_)) => {
                return Err(SpecArgsError::UnusedDraftModel(k))
            }
            (Some(k), _) => k,
        };
        if self.spec_draft_n_min > self.spec_draft_n_max {
            return Err(SpecArgsError::MinAboveMax {
                n_min: self.spec_draft_n_min,
                n_max: self.spec_draft_n_max,
            });
        }
        Ok(kind)
    }

    /// The draft model to load, for draft-simple.
    pub fn draft_path(&self) -> Result<Option<&PathBuf>, SpecArgsError> {
        Ok(match self.kind()? {
            SpecKind::DraftSimple => self.draft_model.as_ref(),
            _ => None,
        })
    }

    /// The speculator for `target`, drafting with `draft` (loaded from
    /// [`Self::draft_path`]) in a session of `opts`; `None` without speculation.
    pub fn speculator<'d>(
        &self,
        target: &Model,
        draft: Option<&'d Model>,
        opts: SessionOptions,
    ) -> Result<Option<Speculator<'d>>, crate::Error> {
        let params = SpecParams {
            n_max: self.spec_draft_n_max,
            n_min: self.spec_draft_n_min,
        };
        Ok(match (self.kind()?, draft) {
            (SpecKind::None, _) => None,
            (SpecKind::NgramSimple, _) => {
                let ng = NgramSimple {
                    size_n: self.spec_ngram_simple_size_n as usize,
                    size_m: self.spec_ngram_simple_size_m as usize,
                    min_n: self.spec_ngram_simple_size_n_min as usize,
                    resync: self.spec_ngram_simple_resync as usize,
                };
                Some(Speculator::new(Box::new(NgramDrafter::new(ng)), params))
            }
            (SpecKind::DraftSimple, Some(d)) => {
                let s = Session::try_new(d, opts)?;
                let dm = DraftModel::new(s, target).map_err(SpecArgsError::from)?;
                Some(Speculator::new(Box::new(dm), params))
            }
            (SpecKind::DraftSimple, None) => return Err(SpecArgsError::NoDraftModel.into()),
        })
    }
}
