//! Grammar-constrained sampling (structured output) on llguidance, the constrained
//! decoding library llama.cpp can use: GBNF grammars (through [`gbnf_to_lark`]),
//! llguidance Lark, JSON schemas and "any JSON object".
//!
//! One [`GrammarVocab`] per model (the token trie of its vocabulary, built once) compiles
//! a [`GrammarSpec`] into a [`Grammar`]; each generation takes a fresh [`Constraint`] from
//! it. The sampler asks the constraint which tokens may come next (a bit mask over the
//! vocabulary; the others are dropped before sampling, as llama.cpp sets their logits to
//! -inf) and commits the token it drew. When the grammar is complete and nothing may
//! follow, only the end-of-generation tokens are allowed, so generation ends there.

mod gbnf;
mod vocab;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::SimpleVob;
use llguidance::{Matcher, ParserFactory};

pub use gbnf::{gbnf_to_lark, is_lark, GbnfError, TokenRef};

use crate::tokenizer::Tokenizer;

/// Why a grammar or schema cannot constrain generation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GrammarError {
    #[error("GBNF grammar, {0}")]
    Gbnf(#[from] GbnfError),
    #[error("JSON schema: not valid JSON: {0}")]
    SchemaSyntax(String),
    #[error("{what} does not compile: {msg}")]
    Compile { what: &'static str, msg: String },
    #[error("the grammar cannot go on: {0}")]
    Matcher(String),
    #[error("no token can continue the grammar here (the vocabulary cannot spell what it needs)")]
    DeadEnd,
}

/// A structure to hold generation to.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// llama.cpp's GBNF (start rule `root`); text in llguidance Lark is taken as Lark.
    Gbnf(String),
    /// llguidance's Lark dialect (start rule `start`).
    Lark(String),
    /// A JSON schema (llguidance's JSON-schema compiler: compact separators).
    JsonSchema(serde_json::Value),
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
}

impl GrammarSpec {
    /// A JSON schema given as text (`-j`, `--json-schema-file`).
    pub fn json_schema_text(text: &str) -> Result<GrammarSpec, GrammarError> {
        serde_json::from_str(text)
            .map(GrammarSpec::JsonSchema)
            .map_err(|e| GrammarError::SchemaSyntax(e.to_string()))
    }

    fn what(&self) -> &'static str {
        match self {
            GrammarSpec::Gbnf(_) => "the grammar",
            GrammarSpec::Lark(_) => "the Lark grammar",
            GrammarSpec::JsonSchema(_) | GrammarSpec::JsonObject => "the JSON schema",
        }
    }
}

/// Resolves a GBNF `<text>` token reference to its one token id.
pub type SpecialTokens = Arc<dyn Fn(&str) -> Option<u32> + Send + Sync>;

/// A model's vocabulary as llguidance sees it (token bytes in a trie, the
/// end-of-generation tokens), shared by every grammar compiled for the model.
#[derive(Clone)]
pub struct GrammarVocab {
    factory: Arc<ParserFactory>,
    /// `<text>` references of GBNF grammars: the text's one token, when it is one.
    special: SpecialTokens,
}

impl GrammarVocab {
    /// The vocabulary of `tok` (every token's bytes, control tokens marked as special).
    pub fn new(tok: &Tokenizer) -> Result<GrammarVocab, GrammarError> {
        let (bytes, eog) = vocab::token_bytes(tok);
        let lookup: std::collections::HashMap<String, u32> = (0..tok.n_vocab() as u32)
            .filter_map(|id| tok.token_text(id).map(|t| (t.to_string(), id)))
            .collect();
        let special = Arc::new(move |t: &str| lookup.get(t).copied());
        Self::from_token_bytes(bytes, &eog, special)
    }

    /// A vocabulary given as each token's bytes (special tokens start with 0xFF, as in
    /// llguidance) and the ids that end generation (at least one).
    pub fn from_token_bytes(
        bytes: Vec<Vec<u8>>,
        eog: &[u32],
        special: SpecialTokens,
    ) -> Result<GrammarVocab, GrammarError> {
        let env = vocab::trie_env(bytes, eog).map_err(|msg| GrammarError::Compile {
            what: "the vocabulary",
            msg,
        })?;
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| GrammarError::Compile {
            what: "the vocabulary",
            msg: e.to_string(),
        })?;
        // Warnings would go to stderr from inside the server; errors come back as values.
        factory.quiet();
        Ok(GrammarVocab {
            factory: Arc::new(factory),
            special,
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }

    /// Compiles `spec` (errors name the problem: a GBNF line and column, llguidance's
    /// message for Lark and schemas).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar, GrammarError> {
        let grammar = match spec {
            GrammarSpec::Gbnf(text) if is_lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSpec::Gbnf(text) => {
                TopLevelGrammar::from_lark(gbnf_to_lark(text, &*self.special)?)
            }
            GrammarSpec::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSpec::JsonSchema(schema) => TopLevelGrammar::from_json_schema(schema.clone()),
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(serde_json::json!({"type": "object"}))
            }
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Compile {
                what: spec.what(),
                msg: e.to_string(),
            })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Compile {
                what: spec.what(),
                msg: e,
            });
        }
        Ok(Grammar { matcher })
    }
}

/// A compiled grammar; [`Grammar::constraint`] starts a generation on it.
#[derive(Clone)]
pub struct Grammar {
    matcher: Matcher,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammar")
    }
}

impl Grammar {
    /// A constraint at the start of the grammar (its own parser state).
    pub fn constraint(&self) -> Constraint {
        let end = self
            .matcher
            .tok_env()
            .map_or(0, |env| env.tok_trie().eos_token());
        Constraint {
            matcher: self.matcher.deep_clone(),
            mask: None,
            end,
        }
    }
}

/// One generation's position in its grammar.
pub struct Constraint {
    matcher: Matcher,
    /// The allowed tokens at the current position, computed once per position.
    mask: Option<SimpleVob>,
    /// The model's first end-of-generation token.
    end: u32,
}

impl Constraint {
    /// The end-of-generation token to end on when the grammar fails.
    pub fn end_token(&self) -> u32 {
        self.end
    }

    /// The tokens that may come next (only end-of-generation ones when the grammar is
    /// complete and nothing may follow).
    pub fn allowed(&mut self) -> Result<&SimpleVob, GrammarError> {
        if self.mask.is_none() {
            let m = self
                .matcher
                .compute_mask_or_eos()
                .map_err(|e| GrammarError::Matcher(e.to_string()))?;
            if m.is_zero() {
                return Err(GrammarError::DeadEnd);
            }
            self.mask = Some(m);
        }
        Ok(self.mask.as_ref().expect("computed above"))
    }

    /// Moves past `token` (one the mask allowed).
    pub fn commit(&mut self, token: u32) -> Result<(), GrammarError> {
        self.mask = None;
        // A complete grammar stops by itself; the end-of-generation token that the mask
        // then allows is the end, not a token to parse.
        if self.matcher.is_stopped() && !self.matcher.is_error() && self.is_end(token) {
            return Ok(());
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError::Matcher(e.to_string()))
    }

    fn is_end(&self, token: u32) -> bool {
        self.matcher
            .tok_env()
            .is_ok_and(|env| env.tok_trie().eos_tokens().contains(&token))
    }

    /// Moves past `tokens` if the grammar allows all of them; returns how many it took.
    pub fn try_commit(&mut self, tokens: &[u32]) -> Result<usize, GrammarError> {
        self.mask = None;
        self.matcher
            .try_consume_tokens(tokens)
            .map_err(|e| GrammarError::Matcher(e.to_string()))
    }

    /// The text so far is a complete sentence of the grammar.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// The grammar is complete (an end-of-generation token was taken, or nothing but one
    /// may come).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}

#[cfg(test)]
mod tests;
