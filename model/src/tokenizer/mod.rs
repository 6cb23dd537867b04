//! The tokenizer of a GGUF model, matching llama.cpp (b11434) token for token.
//!
//! [`Tokenizer::from_gguf`] reads `tokenizer.ggml.*` and builds one of
//! - byte-level BPE ([`bpe`]) for `tokenizer.ggml.model == "gpt2"` (and the raw-UTF-8 BPE of
//!   `gemma4`), with the pre-tokenizer named by `tokenizer.ggml.pre` ([`pretokenize`]);
//! - SentencePiece-style merging ([`spm`]) for `tokenizer.ggml.model == "llama"` (llama 1/2,
//!   phi-3, gemma 1–3).
//!
//! Special tokens in the prompt are split out first ([`special`]). Decoding goes token by
//! token through [`Tokenizer::token_to_piece`], which yields bytes: a piece may end inside a
//! UTF-8 sequence, so streaming output goes through a [`StreamDecoder`].
//!
//! Supported `tokenizer.ggml.pre` values: default, llama3/llama-bpe (and falcon3, pixtral,
//! lfm2, dbrx, smaug-bpe, chatglm-bpe, glm4, ...), qwen2 (and deepseek-r1-qwen, stablelm2,
//! hunyuan, megrez, ...), qwen35, gpt-2 (and mpt, olmo, phi-2, jais, roberta-bpe, ...),
//! starcoder/smollm/refact/command-r/codeshell/exaone, deepseek-llm, deepseek-coder, falcon,
//! bloom/poro-chat/gpt3-finnish, viking, laguna, gemma4. Others (tekken, gpt-4o, llama4,
//! seed-coder, kimi-k2, ...) fail with [`TokenizerError::UnsupportedPreTokenizer`].
//! Tokenizer models bert (WPM), t5 (UGM), rwkv and plamo2 are not supported.

mod bpe;
mod decode;
mod load;
mod pretokenize;
mod special;
mod spm;
mod symbol;
mod unicode;
mod unicode_data;
mod vocab;

pub use decode::StreamDecoder;
pub use pretokenize::{PreKind, PreTokenizer};

use special::Fragment;
use vocab::Vocab;

/// Token attributes (llama.cpp's `llama_token_attr` bits).
pub mod attr {
    pub const UNDEFINED: u16 = 0;
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const NORMALIZED: u16 = 1 << 6;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;
    pub const SINGLE_WORD: u16 = 1 << 9;
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF has no tokenizer metadata key '{0}'")]
    MissingKey(&'static str),
    #[error("GGUF key '{key}' should be {expected}, found {found}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("unknown tokenizer model '{0}' (tokenizer.ggml.model); pocket supports 'gpt2', 'llama' and 'gemma4'")]
    UnknownModel(String),
    #[error("unsupported pre-tokenizer '{0}' (tokenizer.ggml.pre)")]
    UnsupportedPreTokenizer(String),
    #[error("GGUF key '{key}' has {found} entries, fewer than the {need} tokens")]
    ShortArray {
        key: &'static str,
        found: u64,
        need: u64,
    },
    #[error("pre-tokenizer expression: {0}")]
    Regex(String),
}

// ---------------------------------------------------------------------------------------------
// the tokenizer

enum Model {
    Spm,
    Bpe {
        merges: bpe::Merges,
        pre: PreTokenizer,
        ignore_merges: bool,
    },
}

/// Special token ids (None where the model has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// A GGUF model's tokenizer.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    model_name: String,
    pre_name: String,
    special_cache: Vec<u32>,
    ids: SpecialIds,
    eog: Vec<u32>,
    settings: Settings,
}

/// The per-model switches of `llama_vocab`: defaults from the tokenizer model and
/// pre-tokenizer, overridden by the GGUF's `tokenizer.ggml.add_*` keys.
#[derive(Clone, Copy, Debug)]
struct Settings {
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    escape_whitespaces: bool,
}

impl Tokenizer {
    /// Tokenizes `text` (`llama_tokenize`): `add_special` adds BOS/EOS as the model asks,
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) be
    /// recognised as such.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let frags = special::partition(&self.vocab, &self.special_cache, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.settings.add_bos {
            if let Some(bos) = self.ids.bos {
                out.push(bos);
            }
        }
        match &self.model {
            Model::Spm => {
                let mut is_prev_special = true;
                let mut buf = String::new();
                for f in frags {
                    match f {
                        Fragment::Text { start, len } => {
                            buf.clear();
                            if self.settings.add_space_prefix && is_prev_special {
                                buf.push('▁');
                            }
                            escape_into(&text[start..start + len], &mut buf);
                            spm::tokenize(&self.vocab, &buf, &mut out);
                            is_prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            is_prev_special = true;
                        }
                    }
                }
            }
            Model::Bpe {
                merges,
                pre,
                ignore_merges,
            } => {
                let session = bpe::BpeSession {
                    vocab: &self.vocab,
                    merges,
                    pre,
                    byte_encode: pre.kind() != PreKind::Gemma4,
                    ignore_merges: *ignore_merges,
                    newline_words: pre.kind() == PreKind::Gemma4,
                };
                let mut buf = String::new();
                for f in frags {
                    match f {
                        Fragment::Text { start, len } => {
                            let t = &text[start..start + len];
                            if self.settings.escape_whitespaces {
                                buf.clear();
                                escape_into(t, &mut buf);
                                session.tokenize(&buf, &mut out);
                            } else {
                                session.tokenize(t, &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.settings.add_eos {
            if let Some(eos) = self.ids.eos {
                out.push(eos);
            }
        }
        out
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }
    pub fn special_ids(&self) -> &SpecialIds {
        &self.ids
    }
    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }
    pub fn eot(&self) -> Option<u32> {
        self.ids.eot
    }
    pub fn pad(&self) -> Option<u32> {
        self.ids.pad
    }
    pub fn add_bos(&self) -> bool {
        self.settings.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.settings.add_eos
    }
    pub fn add_sep(&self) -> bool {
        self.settings.add_sep
    }
    pub fn add_space_prefix(&self) -> bool {
        self.settings.add_space_prefix
    }
    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }
    /// `tokenizer.ggml.model` ("gpt2", "llama", "gemma4").
    pub fn model_name(&self) -> &str {
        &self.model_name
    }
    /// `tokenizer.ggml.pre` as used ("" when absent).
    pub fn pre_name(&self) -> &str {
        &self.pre_name
    }
    pub fn n_merges(&self) -> usize {
        match &self.model {
            Model::Bpe { merges, .. } => merges.len(),
            Model::Spm => 0,
        }
    }
    /// The token's text as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.vocab.len()).then(|| self.vocab.text(id))
    }
    pub fn token_attr(&self, id: u32) -> Option<u16> {
        ((id as usize) < self.vocab.len()).then(|| self.vocab.attr(id))
    }
    pub fn token_score(&self, id: u32) -> Option<f32> {
        ((id as usize) < self.vocab.len()).then(|| self.vocab.score(id))
    }
    /// The id of a token by its exact text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.find(text)
    }
}

/// Appends `s` with spaces replaced by ▁ (`llama_escape_whitespace`).
fn escape_into(s: &str, out: &mut String) {
    for (i, part) in s.split(' ').enumerate() {
        if i > 0 {
            out.push('▁');
        }
        out.push_str(part);
    }
}
