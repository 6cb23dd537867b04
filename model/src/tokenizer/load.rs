//! Building a [`Tokenizer`] from a GGUF's `tokenizer.ggml.*` metadata, as
//! `llama_vocab::load` does: the model's defaults, the vocabulary, the special ids (from
//! the metadata, else found by their text), the end-of-generation set, and the attribute
//! fix-ups llama.cpp applies by model name.

use std::borrow::Cow;

use crate::gguf::{Gguf, Value, ValueType};

use super::vocab::Vocab;
use super::{
    attr, bpe, pretokenize, special, Model, PreTokenizer, Settings, SpecialIds, Tokenizer,
    TokenizerError,
};

const K_MODEL: &str = "tokenizer.ggml.model";
const K_PRE: &str = "tokenizer.ggml.pre";
const K_TOKENS: &str = "tokenizer.ggml.tokens";
const K_SCORES: &str = "tokenizer.ggml.scores";
const K_TYPES: &str = "tokenizer.ggml.token_type";
const K_MERGES: &str = "tokenizer.ggml.merges";

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
        let pre_name = get_str(g, K_PRE)?.map(Cow::into_owned).unwrap_or_default();
        let mut d = Defaults::for_model(&model_name, pre_name)?;
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_space_prefix")? {
            d.settings.add_space_prefix = b;
        }

        let mut vocab = read_vocab(g, d.pre_cfg.is_none())?;
        let model = match d.pre_cfg {
            None => Model::Spm,
            Some(cfg) => {
                let merges = match g.get(K_MERGES) {
                    None => return Err(TokenizerError::MissingKey(K_MERGES)),
                    Some(Value::Array(a)) if a.elem_type() == ValueType::String => a,
                    Some(v) => return Err(wrong(K_MERGES, "an array of strings", &v)),
                };
                let merges = bpe::Merges::new(
                    merges.strings().into_iter().flatten(),
                    merges.len() as usize,
                );
                Model::Bpe {
                    merges,
                    pre: PreTokenizer::new(cfg.kind)?,
                    ignore_merges: cfg.ignore_merges,
                }
            }
        };

        read_special_ids(g, vocab.len() as u64, &mut d.ids)?;
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_bos_token")? {
            d.settings.add_bos = b;
        }
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_eos_token")? {
            d.settings.add_eos = b;
        }
        if let Some(b) = get_bool(g, "tokenizer.ggml.add_sep_token")? {
            d.settings.add_sep = b;
        }
        if d.pre_name == "gemma4" && !d.settings.add_bos {
            d.settings.add_bos = true;
        }
        detect_special_ids_by_text(&mut vocab, &mut d.ids);
        mark_unused_controls(&mut vocab);
        let eog = end_of_generation_ids(&mut vocab, &d.ids);
        let special_cache = special::special_cache(&vocab);
        set_attrs_by_model_name(g, &d.pre_name, &special_cache, &mut vocab)?;

        Ok(Tokenizer {
            vocab,
            model,
            model_name,
            pre_name: d.pre_name,
            special_cache,
            ids: d.ids,
            eog,
            settings: d.settings,
        })
    }
}

/// What the tokenizer model (and, for BPE, its pre-tokenizer) implies before the
/// metadata's own keys override it.
struct Defaults {
    pre_name: String,
    ids: SpecialIds,
    settings: Settings,
    /// The pre-tokenizer of a BPE model; `None` for SPM.
    pre_cfg: Option<pretokenize::PreConfig>,
}

impl Defaults {
    fn for_model(model_name: &str, mut pre_name: String) -> Result<Defaults, TokenizerError> {
        match model_name {
            "llama" => Ok(Defaults {
                pre_name,
                ids: SpecialIds {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    ..Default::default()
                },
                settings: Settings {
                    add_bos: true,
                    add_eos: false,
                    add_sep: false,
                    add_space_prefix: true,
                    clean_spaces: false,
                    escape_whitespaces: true,
                },
                pre_cfg: None,
            }),
            "gpt2" | "gemma4" => {
                let mut ids = if model_name == "gemma4" {
                    pre_name = "gemma4".to_string();
                    SpecialIds::default()
                } else {
                    SpecialIds {
                        bos: Some(11),
                        eos: Some(11),
                        ..Default::default()
                    }
                };
                let cfg = pretokenize::config_for(&pre_name)?;
                if cfg.no_bos {
                    ids.bos = None;
                }
                Ok(Defaults {
                    pre_name,
                    ids,
                    settings: Settings {
                        add_bos: cfg.add_bos.unwrap_or(false),
                        add_eos: false,
                        add_sep: false,
                        add_space_prefix: false,
                        clean_spaces: cfg.clean_spaces,
                        escape_whitespaces: cfg.escape_whitespaces,
                    },
                    pre_cfg: Some(cfg),
                })
            }
            other => Err(TokenizerError::UnknownModel(other.to_string())),
        }
    }
}

/// The token texts, scores and types (as attributes).
fn read_vocab<B: AsRef<[u8]>>(g: &Gguf<B>, spm: bool) -> Result<Vocab, TokenizerError> {
    let tokens = match g.get(K_TOKENS) {
        None => return Err(TokenizerError::MissingKey(K_TOKENS)),
        Some(Value::Array(a)) if a.elem_type() == ValueType::String => a,
        Some(v) => return Err(wrong(K_TOKENS, "an array of strings", &v)),
    };
    let n = tokens.len();
    let scores = match g.get(K_SCORES) {
        None => Vec::new(),
        Some(Value::Array(a)) if matches!(a.elem_type(), ValueType::F32 | ValueType::I32) => {
            check_len(K_SCORES, a.len(), n)?;
            a.to_f32_vec().unwrap_or_default()
        }
        Some(v) => return Err(wrong(K_SCORES, "an array of f32 or i32", &v)),
    };
    let mut attrs = vec![attr::NORMAL; n as usize];
    match g.get(K_TYPES) {
        None => {}
        Some(Value::Array(a)) if a.elem_type() == ValueType::I32 => {
            check_len(K_TYPES, a.len(), n)?;
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
    let texts = tokens.strings().into_iter().flatten().enumerate();
    let texts = texts.map(|(i, t)| match t.is_empty() {
        true => Cow::Owned(format!("[EMPTY_{i}]")),
        false => t,
    });
    Ok(Vocab::new(texts, scores, attrs, spm))
}

/// An array with an entry per token must not be shorter than the token list.
fn check_len(key: &'static str, found: u64, need: u64) -> Result<(), TokenizerError> {
    match found < need {
        true => Err(TokenizerError::ShortArray { key, found, need }),
        false => Ok(()),
    }
}

/// Special ids from the metadata keys: a key overrides the default, and an id outside the
/// vocabulary (default or key) is dropped.
fn read_special_ids<B: AsRef<[u8]>>(
    g: &Gguf<B>,
    n_tokens: u64,
    ids: &mut SpecialIds,
) -> Result<(), TokenizerError> {
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
        let slot = field(ids);
        if slot.is_some_and(|id| id as u64 >= n_tokens) {
            *slot = None;
        }
        if let Some(new_id) = get_id(g, key)? {
            if new_id < n_tokens {
                *slot = Some(new_id as u32);
            }
        }
    }
    Ok(())
}

/// Ids the metadata does not name, found by their text (the first text present wins);
/// such a token becomes a control token.
fn detect_special_ids_by_text(vocab: &mut Vocab, ids: &mut SpecialIds) {
    let detect = |vocab: &mut Vocab, slot: &mut Option<u32>, texts: &[&str]| {
        if slot.is_some() {
            return;
        }
        if let Some(id) = texts.iter().find_map(|t| vocab.find(t)) {
            *slot = Some(id);
            *vocab.attr_mut(id) |= attr::CONTROL;
        }
    };
    detect(vocab, &mut ids.eot, EOT_TEXTS);
    detect(vocab, &mut ids.eom, EOM_TEXTS);
    detect(vocab, &mut ids.fim_pre, FIM_PRE_TEXTS);
    detect(vocab, &mut ids.fim_suf, FIM_SUF_TEXTS);
    detect(vocab, &mut ids.fim_mid, FIM_MID_TEXTS);
    detect(vocab, &mut ids.fim_pad, FIM_PAD_TEXTS);
    detect(vocab, &mut ids.fim_rep, FIM_REP_TEXTS);
    detect(vocab, &mut ids.fim_sep, FIM_SEP_TEXTS);
}

/// Control tokens named "unused" are unused.
fn mark_unused_controls(vocab: &mut Vocab) {
    for id in 0..vocab.len() as u32 {
        let a = vocab.attr(id);
        if a & attr::CONTROL != 0 && a & attr::UNUSED == 0 && vocab.text(id).contains("unused") {
            *vocab.attr_mut(id) |= attr::UNUSED;
        }
    }
}

/// The sorted end-of-generation ids: the FIM pad/repo/separator ids, every token whose
/// text llama.cpp lists as end-of-generation (made a control token), EOS/EOT/EOM; minus
/// `<|end|>` and `</s>` where the vocabulary shows they are not (gpt-oss, gemma4/plamo).
fn end_of_generation_ids(vocab: &mut Vocab, ids: &SpecialIds) -> Vec<u32> {
    let mut eog: Vec<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for t in EOG_TEXTS {
        if let Some(id) = vocab.find(t) {
            eog.push(id);
            *vocab.attr_mut(id) |= attr::CONTROL;
        }
    }
    for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = vocab.find(t) {
            *vocab.attr_mut(id) = attr::USER_DEFINED;
        }
    }
    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
    eog.retain(|&id| (id as usize) < vocab.len());
    eog.sort_unstable();
    eog.dedup();
    let find =
        |vocab: &Vocab, eog: &[u32], t: &str| eog.iter().copied().find(|&id| vocab.text(id) == t);
    let has = |vocab: &Vocab, eog: &[u32], t: &str| find(vocab, eog, t).is_some();
    if let Some(end_id) = find(vocab, &eog, "<|end|>") {
        let has = |t| has(vocab, &eog, t);
        if (has("<|return|>") && has("<|call|>"))
            || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>"))
        {
            eog.retain(|&id| id != end_id);
            *vocab.attr_mut(end_id) = attr::USER_DEFINED;
        }
    }
    if let Some(s_id) = find(vocab, &eog, "</s>") {
        if has(vocab, &eog, "<|tool_response>") || has(vocab, &eog, "<|plamo:eos|>") {
            eog.retain(|&id| id != s_id);
            *vocab.attr_mut(s_id) = attr::NORMAL;
        }
    }
    eog
}

/// The per-model attributes llama.cpp sets by pre-tokenizer, architecture or model name.
fn set_attrs_by_model_name<B: AsRef<[u8]>>(
    g: &Gguf<B>,
    pre_name: &str,
    special_cache: &[u32],
    vocab: &mut Vocab,
) -> Result<(), TokenizerError> {
    let general = get_str(g, "general.name")?
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let arch = get_str(g, "general.architecture")?
        .map(Cow::into_owned)
        .unwrap_or_default();
    let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    let set = |vocab: &mut Vocab, t: &str, a: u16, on: bool| {
        if let Some(id) = vocab.find(t) {
            let v = vocab.attr_mut(id);
            *v = if on { *v | a } else { *v & !a };
        }
    };
    if any(
        pre_name,
        &["jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert"],
    ) || any(&arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        set(vocab, "<mask>", attr::LSTRIP, true);
    } else if any(&general, &["phi-3", "phi3"]) {
        for &id in special_cache {
            *vocab.attr_mut(id) |= attr::RSTRIP;
        }
        set(vocab, "</s>", attr::RSTRIP, true);
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            set(vocab, t, attr::RSTRIP, false);
        }
    } else if any(&general, &["modern-bert"]) {
        set(vocab, "[MASK]", attr::LSTRIP, true);
    }
    Ok(())
}
