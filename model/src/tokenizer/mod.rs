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
mod pretokenize;
mod special;
mod spm;
mod symbol;
mod unicode;
mod unicode_data;

use std::borrow::Cow;

use crate::gguf::{Gguf, Value, ValueType};

pub use pretokenize::{PreKind, PreTokenizer};

use special::Fragment;

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

const K_MODEL: &str = "tokenizer.ggml.model";
const K_PRE: &str = "tokenizer.ggml.pre";
const K_TOKENS: &str = "tokenizer.ggml.tokens";
const K_SCORES: &str = "tokenizer.ggml.scores";
const K_TYPES: &str = "tokenizer.ggml.token_type";
const K_MERGES: &str = "tokenizer.ggml.merges";

// ---------------------------------------------------------------------------------------------
// string → id hash table over strings stored elsewhere

/// Open-addressing table of ids whose strings live in an arena: no per-string allocation,
/// and each slot keeps 32 bits of the hash so that probing rarely touches the arena.
pub(crate) struct StrTable {
    /// `hash_hi32 << 32 | id`, or `EMPTY`
    slots: Vec<u64>,
    mask: usize,
}

const EMPTY: u64 = u64::MAX;

#[inline]
fn hash_bytes(b: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(c.try_into().unwrap())).wrapping_mul(K);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rem.len()].copy_from_slice(rem);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(buf)).wrapping_mul(K);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl StrTable {
    pub fn with_capacity(n: usize) -> Self {
        let cap = (n + n / 2).next_power_of_two().max(16);
        StrTable {
            slots: vec![EMPTY; cap],
            mask: cap - 1,
        }
    }

    /// Inserts `id` under `s`; an existing entry is replaced only if `overwrite`.
    pub fn insert<'k>(&mut self, s: &str, id: u32, overwrite: bool, key: impl Fn(u32) -> &'k str) {
        let h = hash_bytes(s.as_bytes());
        let tag = h & 0xFFFF_FFFF_0000_0000;
        let mut i = h as usize & self.mask;
        loop {
            let cur = self.slots[i];
            if cur == EMPTY {
                self.slots[i] = tag | id as u64;
                return;
            }
            if cur & 0xFFFF_FFFF_0000_0000 == tag && key(cur as u32) == s {
                if overwrite {
                    self.slots[i] = tag | id as u64;
                }
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    pub fn find<'k>(&self, s: &str, key: impl Fn(u32) -> &'k str) -> Option<u32> {
        let h = hash_bytes(s.as_bytes());
        let tag = h & 0xFFFF_FFFF_0000_0000;
        let mut i = h as usize & self.mask;
        loop {
            let cur = self.slots[i];
            if cur == EMPTY {
                return None;
            }
            if cur & 0xFFFF_FFFF_0000_0000 == tag && key(cur as u32) == s {
                return Some(cur as u32);
            }
            i = (i + 1) & self.mask;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// vocabulary

/// Token texts, scores and attributes, with the text → id index.
pub(crate) struct Vocab {
    arena: String,
    offs: Vec<u32>,
    scores: Vec<f32>,
    attrs: Vec<u16>,
    table: StrTable,
    spm: bool,
}

impl Vocab {
    #[inline]
    pub fn len(&self) -> usize {
        self.offs.len() - 1
    }
    #[inline]
    pub fn text(&self, id: u32) -> &str {
        &self.arena[self.offs[id as usize] as usize..self.offs[id as usize + 1] as usize]
    }
    #[inline]
    pub fn find(&self, s: &str) -> Option<u32> {
        self.table.find(s, |id| self.text(id))
    }
    #[inline]
    pub fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
    #[inline]
    pub fn attr(&self, id: u32) -> u16 {
        self.attrs[id as usize]
    }
    /// `llama_vocab::byte_to_token`: `<0xXX>`, else the byte itself as a token (SPM), or
    /// the GPT-2 byte character (BPE).
    pub fn byte_to_token(&self, b: u8) -> Option<u32> {
        if self.spm {
            self.find(&format!("<0x{b:02X}>"))
                .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| self.find(s)))
        } else {
            let mut buf = [0u8; 4];
            self.find(unicode::byte_to_char(b).encode_utf8(&mut buf))
        }
    }
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
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    escape_whitespaces: bool,
}

fn wrong(key: &'static str, expected: &'static str, v: &Value) -> TokenizerError {
    TokenizerError::WrongType {
        key,
        expected,
        found: match v {
            Value::Array(a) => format!("array of {}", a.elem_type().name()),
            v => v.value_type().name().to_string(),
        },
    }
}

fn get_str<'a, B: AsRef<[u8]>>(
    g: &'a Gguf<B>,
    key: &'static str,
) -> Result<Option<Cow<'a, str>>, TokenizerError> {
    match g.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(wrong(key, "a string", &v)),
    }
}

fn get_bool<B: AsRef<[u8]>>(
    g: &Gguf<B>,
    key: &'static str,
) -> Result<Option<bool>, TokenizerError> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| wrong(key, "a bool", &v)),
    }
}

fn get_id<B: AsRef<[u8]>>(g: &Gguf<B>, key: &'static str) -> Result<Option<u64>, TokenizerError> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong(key, "an unsigned integer", &v)),
    }
}

/// Token texts llama.cpp recognises as end-of-turn etc. when the metadata does not say.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

impl Tokenizer {
    /// Builds the tokenizer from a GGUF's `tokenizer.ggml.*` metadata (`llama_vocab::load`).
    pub fn from_gguf<B: AsRef<[u8]>>(g: &Gguf<B>) -> Result<Tokenizer, TokenizerError> {
        let model_name = get_str(g, K_MODEL)?
            .ok_or(TokenizerError::MissingKey(K_MODEL))?
            .into_owned();
        let mut pre_name = get_str(g, K_PRE)?.map(Cow::into_owned).unwrap_or_default();

        let mut ids = SpecialIds {
            bos: Some(1),
            eos: Some(2),
            unk: Some(0),
            ..Default::default()
        };
        let mut add_bos = false;
        let mut add_eos = false;
        let mut add_sep = false;
        let mut add_space_prefix;
        let clean_spaces;
        let escape_whitespaces;
        let mut pre_cfg = None;

        let is_spm = match model_name.as_str() {
            "llama" => {
                add_space_prefix = true;
                clean_spaces = false;
                escape_whitespaces = true;
                add_bos = true;
                true
            }
            "gpt2" | "gemma4" => {
                if model_name == "gemma4" {
                    ids = SpecialIds::default();
                    pre_name = "gemma4".to_string();
                } else {
                    ids = SpecialIds {
                        bos: Some(11),
                        eos: Some(11),
                        ..Default::default()
                    };
                }
                let cfg = pretokenize::config_for(&pre_name)?;
                add_space_prefix = false;
                clean_spaces = cfg.clean_spaces;
                escape_whitespaces = cfg.escape_whitespaces;
                if let Some(b) = cfg.add_bos {
                    add_bos = b;
                }
                if cfg.no_bos {
                    ids.bos = None;
                }
                pre_cfg = Some(cfg);
                false
            }
            other => return Err(TokenizerError::UnknownModel(other.to_string())),
        };
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = b;
        }

        // tokens, scores, types
        let tokens = match g.get(K_TOKENS) {
            None => return Err(TokenizerError::MissingKey(K_TOKENS)),
            Some(Value::Array(a)) if a.elem_type() == ValueType::String => a,
            Some(v) => return Err(wrong(K_TOKENS, "an array of strings", &v)),
        };
        let n = tokens.len();
        let mut arena = String::with_capacity(n as usize * 8);
        let mut offs = Vec::with_capacity(n as usize + 1);
        offs.push(0u32);
        for (i, t) in tokens.strings().into_iter().flatten().enumerate() {
            if t.is_empty() {
                arena.push_str(&format!("[EMPTY_{i}]"));
            } else {
                arena.push_str(&t);
            }
            offs.push(arena.len() as u32);
        }
        let scores = match g.get(K_SCORES) {
            None => Vec::new(),
            Some(Value::Array(a)) if matches!(a.elem_type(), ValueType::F32 | ValueType::I32) => {
                if a.len() < n {
                    return Err(TokenizerError::ShortArray {
                        key: K_SCORES,
                        found: a.len(),
                        need: n,
                    });
                }
                a.to_f32_vec().unwrap_or_default()
            }
            Some(v) => return Err(wrong(K_SCORES, "an array of f32 or i32", &v)),
        };
        let mut attrs = vec![attr::NORMAL; n as usize];
        match g.get(K_TYPES) {
            None => {}
            Some(Value::Array(a)) if a.elem_type() == ValueType::I32 => {
                if a.len() < n {
                    return Err(TokenizerError::ShortArray {
                        key: K_TYPES,
                        found: a.len(),
                        need: n,
                    });
                }
                for (slot, v) in attrs.iter_mut().zip(a.iter()) {
                    *slot = match v.as_i64().unwrap_or(0) {
                        1 => attr::NORMAL,
                        2 => attr::UNKNOWN,
                        3 => attr::CONTROL,
                        4 => attr::USER_DEFINED,
                        5 => attr::UNUSED,
                        6 => attr::BYTE,
                        _ => attr::UNDEFINED,
                    };
                }
            }
            Some(v) => return Err(wrong(K_TYPES, "an array of i32", &v)),
        }
        let mut table = StrTable::with_capacity(n as usize);
        for id in 0..n as u32 {
            let s = &arena[offs[id as usize] as usize..offs[id as usize + 1] as usize];
            table.insert(s, id, true, |j| {
                &arena[offs[j as usize] as usize..offs[j as usize + 1] as usize]
            });
        }
        let mut vocab = Vocab {
            arena,
            offs,
            scores,
            attrs,
            table,
            spm: is_spm,
        };

        let model = if is_spm {
            Model::Spm
        } else {
            let merges = match g.get(K_MERGES) {
                None => return Err(TokenizerError::MissingKey(K_MERGES)),
                Some(Value::Array(a)) if a.elem_type() == ValueType::String => a,
                Some(v) => return Err(wrong(K_MERGES, "an array of strings", &v)),
            };
            let cfg = pre_cfg.expect("BPE has a pre-tokenizer config");
            let merges = bpe::Merges::new(
                merges.strings().into_iter().flatten(),
                merges.len() as usize,
            );
            Model::Bpe {
                merges,
                pre: PreTokenizer::new(cfg.kind)?,
                ignore_merges: cfg.ignore_merges,
            }
        };

        // special token ids from the metadata
        let n_tokens = vocab.len() as u64;
        {
            type Field = fn(&mut SpecialIds) -> &mut Option<u32>;
            let keys: [(&'static str, Field); 17] = [
                ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
                ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
                ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
                ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
                ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
                ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
                ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
                ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
                ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
                ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
                ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
                ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
                ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
                ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
                ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
                ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
                ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
            ];
            for (key, field) in keys {
                let slot = field(&mut ids);
                if slot.is_some_and(|id| id as u64 >= n_tokens) {
                    *slot = None;
                }
                if let Some(new_id) = get_id(g, key)? {
                    if new_id < n_tokens {
                        *slot = Some(new_id as u32);
                    }
                }
            }
        }
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_bos_token")? {
            add_bos = b;
        }
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_eos_token")? {
            add_eos = b;
        }
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_sep_token")? {
            add_sep = b;
        }
        if pre_name == "gemma4" && !add_bos {
            add_bos = true;
        }

        // ids found by their text when the metadata does not name them
        let canonical = |vocab: &Vocab, t: &str| vocab.find(t);
        let detect = |vocab: &mut Vocab, slot: &mut Option<u32>, texts: &[&str]| {
            if slot.is_some() {
                return;
            }
            if let Some(id) = texts.iter().find_map(|t| canonical(vocab, t)) {
                *slot = Some(id);
                vocab.attrs[id as usize] |= attr::CONTROL;
            }
        };
        detect(&mut vocab, &mut ids.eot, EOT_TEXTS);
        detect(&mut vocab, &mut ids.eom, EOM_TEXTS);
        detect(&mut vocab, &mut ids.fim_pre, FIM_PRE_TEXTS);
        detect(&mut vocab, &mut ids.fim_suf, FIM_SUF_TEXTS);
        detect(&mut vocab, &mut ids.fim_mid, FIM_MID_TEXTS);
        detect(&mut vocab, &mut ids.fim_pad, FIM_PAD_TEXTS);
        detect(&mut vocab, &mut ids.fim_rep, FIM_REP_TEXTS);
        detect(&mut vocab, &mut ids.fim_sep, FIM_SEP_TEXTS);

        // control tokens named "unused" are unused
        for id in 0..vocab.len() as u32 {
            let a = vocab.attrs[id as usize];
            if a & attr::CONTROL != 0 && a & attr::UNUSED == 0 && vocab.text(id).contains("unused")
            {
                vocab.attrs[id as usize] |= attr::UNUSED;
            }
        }

        // end-of-generation tokens
        let mut eog: Vec<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
            .into_iter()
            .flatten()
            .collect();
        for t in EOG_TEXTS {
            if let Some(id) = vocab.find(t) {
                eog.push(id);
                vocab.attrs[id as usize] |= attr::CONTROL;
            }
        }
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = vocab.find(t) {
                vocab.attrs[id as usize] = attr::USER_DEFINED;
            }
        }
        eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
        eog.retain(|&id| (id as usize) < vocab.len());
        eog.sort_unstable();
        eog.dedup();
        {
            let has = |t: &str| eog.iter().any(|&id| vocab.text(id) == t);
            let end_id = eog.iter().copied().find(|&id| vocab.text(id) == "<|end|>");
            if let Some(end_id) = end_id {
                if (has("<|return|>") && has("<|call|>"))
                    || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>"))
                {
                    eog.retain(|&id| id != end_id);
                    vocab.attrs[end_id as usize] = attr::USER_DEFINED;
                }
            }
        }
        {
            let has = |t: &str| eog.iter().any(|&id| vocab.text(id) == t);
            let s_id = eog.iter().copied().find(|&id| vocab.text(id) == "</s>");
            if let Some(s_id) = s_id {
                if has("<|tool_response>") || has("<|plamo:eos|>") {
                    eog.retain(|&id| id != s_id);
                    vocab.attrs[s_id as usize] = attr::NORMAL;
                }
            }
        }

        let special_cache = special::special_cache(&vocab);

        // per-model attributes llama.cpp sets by name
        {
            let general = get_str(g, "general.name")?
                .map(|s| s.to_ascii_lowercase())
                .unwrap_or_default();
            let arch = get_str(g, "general.architecture")?
                .map(Cow::into_owned)
                .unwrap_or_default();
            let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
            let set = |vocab: &mut Vocab, t: &str, a: u16, on: bool| {
                if let Some(id) = vocab.find(t) {
                    let v = &mut vocab.attrs[id as usize];
                    *v = if on { *v | a } else { *v & !a };
                }
            };
            if any(
                &pre_name,
                &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"],
            ) || any(&arch, &["nomic-bert-moe", "jina-bert-v3"])
            {
                set(&mut vocab, "<mask>", attr::LSTRIP, true);
            } else if any(&general, &["phi-3", "phi3"]) {
                for &id in &special_cache {
                    vocab.attrs[id as usize] |= attr::RSTRIP;
                }
                set(&mut vocab, "</s>", attr::RSTRIP, true);
                for t in ["<unk>", "<s>", "<|endoftext|>"] {
                    set(&mut vocab, t, attr::RSTRIP, false);
                }
            } else if any(&general, &["modern-bert"]) {
                set(&mut vocab, "[MASK]", attr::LSTRIP, true);
            }
        }

        Ok(Tokenizer {
            vocab,
            model,
            model_name,
            pre_name,
            special_cache,
            ids,
            eog,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            clean_spaces,
            escape_whitespaces,
        })
    }

    /// Tokenizes `text` (`llama_tokenize`): `add_special` adds BOS/EOS as the model asks,
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) be
    /// recognised as such.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let frags = special::partition(&self.vocab, &self.special_cache, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        match &self.model {
            Model::Spm => {
                let mut is_prev_special = true;
                if add_special && self.add_bos {
                    if let Some(bos) = self.ids.bos {
                        out.push(bos);
                    }
                }
                let mut buf = String::new();
                for f in frags {
                    match f {
                        Fragment::Text { start, len } => {
                            buf.clear();
                            if self.add_space_prefix && is_prev_special {
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
                if add_special && self.add_bos {
                    if let Some(bos) = self.ids.bos {
                        out.push(bos);
                    }
                }
                let mut buf = String::new();
                for f in frags {
                    match f {
                        Fragment::Text { start, len } => {
                            let t = &text[start..start + len];
                            if self.escape_whitespaces {
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
        if add_special && self.add_eos {
            if let Some(eos) = self.ids.eos {
                out.push(eos);
            }
        }
        out
    }

    /// The bytes of one token, rendering control tokens as their text
    /// (`llama_token_to_piece(.., special = true)`). May be part of a UTF-8 sequence.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        let mut v = Vec::new();
        self.piece_into(id, true, &mut v);
        v
    }

    /// `llama_token_to_piece`: with `special == false` control and unknown tokens give
    /// nothing. Unknown ids give nothing.
    pub fn piece_into(&self, id: u32, special: bool, out: &mut Vec<u8>) {
        if id as usize >= self.vocab.len() {
            return;
        }
        let a = self.vocab.attr(id);
        let text = self.vocab.text(id);
        if !special && a & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return;
        }
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            out.extend_from_slice(text.as_bytes());
        } else if a & attr::NORMAL != 0 {
            match self.model {
                Model::Bpe { .. } if !self.escape_whitespaces => decode_byte_level(text, out),
                _ => out.extend_from_slice(text.replace('▁', " ").as_bytes()),
            }
        } else if a & attr::BYTE != 0 {
            out.push(
                text.get(3..5)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .unwrap_or(0),
            );
        }
    }

    /// The text of `ids`: their pieces (control tokens included) joined, invalid UTF-8
    /// replaced by U+FFFD. No space clean-up: `decode(encode(s)) == s` for BPE models.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            self.piece_into(id, true, &mut bytes);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// `llama_detokenize` exactly: drops the leading space an SPM prefix added, optionally
    /// the added BOS/EOS (`remove_special`), renders control tokens if `unparse_special`,
    /// and applies the model's `clean_up_tokenization_spaces`.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos && !ids.is_empty() && Some(ids[0]) == self.ids.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.add_eos && ids.last().is_some_and(|&l| Some(l) == self.ids.eos) {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        let mut piece = Vec::new();
        for &id in ids {
            piece.clear();
            self.piece_into(id, unparse_special, &mut piece);
            let skip = (remove_space && piece.first() == Some(&b' ')) as usize;
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if self.clean_spaces {
            clean_spaces(&mut text);
        }
        text
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
        self.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
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

/// `llama_decode_text`: GPT-2 byte characters back to bytes.
fn decode_byte_level(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match unicode::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// The three clean-up passes of `llama_vocab::impl::detokenize`, byte for byte.
fn clean_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ,"
    let total1 = text.len();
    let mut total = usize::from(total1 > 0);
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // " ' " → "'"
    let total2 = text.len();
    let mut total = usize::from(total2 > 0);
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // " 's", " 'm", " 're", " 've" → without the space
    let total3 = text.len();
    let mut total = usize::from(total3 > 0);
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Turns a stream of token pieces into text, holding back bytes of an unfinished UTF-8
/// sequence until the next piece completes it.
#[derive(Default, Debug)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds token `id`'s piece; returns the text that is now complete (maybe empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32, special: bool) -> String {
        tok.piece_into(id, special, &mut self.pending);
        self.take_complete()
    }

    /// Adds raw bytes; returns the text that is now complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        self.take_complete()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let ok = start + e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[start..ok]).unwrap());
                    match e.error_len() {
                        // an unfinished sequence at the end: keep it
                        None => {
                            start = ok;
                            break;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            start = ok + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Flushes what is left (an unfinished sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_shareable() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
        check::<StreamDecoder>();
    }

    #[test]
    fn str_table() {
        let words = ["a", "bb", "ccc", "a", "dddddddddddddddddd"];
        let mut t = StrTable::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            t.insert(w, i as u32, true, |id| words[id as usize]);
        }
        assert_eq!(t.find("a", |id| words[id as usize]), Some(3));
        assert_eq!(t.find("ccc", |id| words[id as usize]), Some(2));
        assert_eq!(t.find("x", |id| words[id as usize]), None);
    }

    #[test]
    fn clean_up() {
        let mut v = b"Hello , world ! it 's a ' b ' c".to_vec();
        clean_spaces(&mut v);
        assert_eq!(std::str::from_utf8(&v).unwrap(), "Hello, world! it's a'b'c");
    }

    #[test]
    fn stream_decoder_holds_partial_utf8() {
        let mut d = StreamDecoder::new();
        let s = "é🦙".as_bytes();
        assert_eq!(d.push_bytes(&s[..1]), "");
        assert_eq!(d.push_bytes(&s[1..3]), "é");
        assert_eq!(d.push_bytes(&s[3..5]), "");
        assert_eq!(d.push_bytes(&s[5..]), "🦙");
        assert_eq!(d.push_bytes(&[0xFF, b'a']), "\u{FFFD}a");
        assert_eq!(d.push_bytes(&[0xE2]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
