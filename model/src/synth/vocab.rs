//! Vocabularies for synthetic models: the Qwen byte-level BPE vocabulary, trimmed.
//!
//! Trimming follows how MNN-Pocket's 65,536-token vocabulary was cut from Qwen's: keep the
//! 256 byte tokens, then the results of the highest-priority merges (walking the merge list
//! in rank order, a merge's result is kept when both its parts are kept, until the regular
//! budget is full), drop every merge whose parts or result were dropped, renumber the kept
//! tokens densely in their original id order, then append the special tokens, then
//! `[PADn]` placeholders (type UNUSED, as llama.cpp's converter writes them) up to the
//! vocabulary size.
//!
//! Special-token layout (Qwen3's 26 added tokens, in Qwen3's order, right after the regular
//! tokens): with 65,510 regular tokens this puts `<|endoftext|>` at 65510 (pad and bos),
//! `<|im_start|>` at 65511 and `<|im_end|>` at 65512 (eos), exactly the ids of the MNN-Pocket
//! release, and the last special `</think>` at 65535. The full-size presets keep all
//! 151,643 regular Qwen tokens, so the specials land on Qwen's own ids (151643...).

use std::collections::HashMap;

use crate::gguf::{Gguf, ValueType};

use super::SynthError;

/// llama.cpp token types (`llama_token_type`, as stored in `tokenizer.ggml.token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
}

use token_type::{CONTROL, NORMAL, UNUSED, USER_DEFINED};

/// Qwen3's 26 added tokens (ids 151643..=151668 in Qwen3), with the type llama.cpp's
/// converter gives them (`special: true` or `<|...|>` → CONTROL, otherwise USER_DEFINED):
/// Qwen2.5's 22 and four more.
pub const QWEN3_SPECIALS: &[(&str, i32)] = &[
    ("<|endoftext|>", CONTROL),
    ("<|im_start|>", CONTROL),
    ("<|im_end|>", CONTROL),
    ("<|object_ref_start|>", CONTROL),
    ("<|object_ref_end|>", CONTROL),
    ("<|box_start|>", CONTROL),
    ("<|box_end|>", CONTROL),
    ("<|quad_start|>", CONTROL),
    ("<|quad_end|>", CONTROL),
    ("<|vision_start|>", CONTROL),
    ("<|vision_end|>", CONTROL),
    ("<|vision_pad|>", CONTROL),
    ("<|image_pad|>", CONTROL),
    ("<|video_pad|>", CONTROL),
    ("<tool_call>", USER_DEFINED),
    ("</tool_call>", USER_DEFINED),
    ("<|fim_prefix|>", CONTROL),
    ("<|fim_middle|>", CONTROL),
    ("<|fim_suffix|>", CONTROL),
    ("<|fim_pad|>", CONTROL),
    ("<|repo_name|>", CONTROL),
    ("<|file_sep|>", CONTROL),
    ("<tool_response>", USER_DEFINED),
    ("</tool_response>", USER_DEFINED),
    ("<think>", USER_DEFINED),
    ("</think>", USER_DEFINED),
];

/// Qwen2.5's 22 added tokens (ids 151643..=151664 in Qwen2.5): the first 22 of Qwen3's.
pub const QWEN2_SPECIALS: &[(&str, i32)] = QWEN3_SPECIALS.split_at(22).0;

/// Text of the bos and pad tokens, and of the eos token (Qwen's instruct models).
pub const BOS_PAD_TEXT: &str = "<|endoftext|>";
pub const EOS_TEXT: &str = "<|im_end|>";

/// ChatML, as Qwen's templates (the one of llama.cpp's Qwen vocabulary file).
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The source vocabulary (`ggml-vocab-qwen2.gguf`): its regular (NORMAL) tokens and merges.
#[derive(Clone, Debug)]
pub struct BaseVocab {
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
}

impl BaseVocab {
    pub fn from_gguf<B: AsRef<[u8]>>(g: &Gguf<B>) -> Result<BaseVocab, SynthError> {
        let bad = |m: &str| SynthError::Vocab(m.to_string());
        let strings = |key: &str| -> Result<Vec<String>, SynthError> {
            let v = g
                .get(key)
                .ok_or_else(|| bad(&format!("base vocabulary has no {key}")))?;
            let a = v
                .as_array()
                .filter(|a| a.elem_type() == ValueType::String)
                .ok_or_else(|| bad(&format!("{key} is not a string array")))?;
            Ok(a.strings()
                .into_iter()
                .flatten()
                .map(|s| s.into_owned())
                .collect())
        };
        let model = g.get_str("tokenizer.ggml.model").unwrap_or_default();
        if model != "gpt2" {
            return Err(bad(&format!(
                "base vocabulary must be byte-level BPE (tokenizer.ggml.model = gpt2), not '{model}'"
            )));
        }
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let types = g
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array().and_then(|a| a.to_i64_vec()))
            .map(|v| v.into_iter().map(|t| t as i32).collect::<Vec<_>>())
            .unwrap_or_else(|| vec![NORMAL; tokens.len()]);
        if types.len() != tokens.len() {
            return Err(bad("token_type and tokens differ in length"));
        }
        Ok(BaseVocab {
            tokens,
            types,
            merges,
        })
    }
}

/// A vocabulary ready to be written: tokens, types, merges and the special ids.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthVocab {
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub merges: Vec<String>,
    /// Regular (NORMAL) tokens, byte tokens included.
    pub n_regular: usize,
    pub bos: u32,
    pub eos: u32,
    pub pad: u32,
}

/// The 256 characters GPT-2's byte-level BPE uses for the bytes 0..=255.
pub fn gpt2_byte_chars() -> Vec<char> {
    let mut out = Vec::with_capacity(256);
    let mut n = 0u32;
    for b in 0u32..256 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        if printable {
            out.push(char::from_u32(b).unwrap());
        } else {
            out.push(char::from_u32(256 + n).unwrap());
            n += 1;
        }
    }
    out
}

/// Trims `base` to `n_regular` regular tokens, appends `specials`, pads to `total`.
pub fn trim(
    base: &BaseVocab,
    n_regular: usize,
    specials: &[(&str, i32)],
    total: usize,
) -> Result<SynthVocab, SynthError> {
    let bad = |m: String| SynthError::Vocab(m);
    if n_regular < 256 {
        return Err(bad(format!(
            "a vocabulary needs at least the 256 byte tokens, {n_regular} regular tokens asked"
        )));
    }
    if n_regular + specials.len() > total {
        return Err(bad(format!(
            "{n_regular} regular + {} special tokens do not fit in {total}",
            specials.len()
        )));
    }
    // text → base id of the regular tokens (lookups only: no iteration order leaks out)
    let mut index: HashMap<&str, u32> = HashMap::with_capacity(base.tokens.len());
    for (i, (t, &ty)) in base.tokens.iter().zip(&base.types).enumerate() {
        if ty == NORMAL {
            index.entry(t.as_str()).or_insert(i as u32);
        }
    }
    let mut kept = vec![false; base.tokens.len()];
    let mut count = 0usize;
    for c in gpt2_byte_chars() {
        let s = c.to_string();
        let id = *index
            .get(s.as_str())
            .ok_or_else(|| bad(format!("base vocabulary lacks the byte token {s:?}")))?;
        if !kept[id as usize] {
            kept[id as usize] = true;
            count += 1;
        }
    }
    // merges as (left, right, result) base ids; None when a part or the result is unknown
    let parsed: Vec<Option<(u32, u32, u32)>> = base
        .merges
        .iter()
        .map(|m| {
            let (a, b) = m.split_once(' ')?;
            let r = format!("{a}{b}");
            Some((*index.get(a)?, *index.get(b)?, *index.get(r.as_str())?))
        })
        .collect();
    for &(a, b, r) in parsed.iter().flatten() {
        if count >= n_regular {
            break;
        }
        if kept[a as usize] && kept[b as usize] && !kept[r as usize] {
            kept[r as usize] = true;
            count += 1;
        }
    }
    if count < n_regular {
        return Err(bad(format!(
            "the base vocabulary's merges reach only {count} regular tokens, {n_regular} asked"
        )));
    }
    let mut tokens = Vec::with_capacity(total);
    let mut types = Vec::with_capacity(total);
    for (i, t) in base.tokens.iter().enumerate() {
        if kept[i] {
            tokens.push(t.clone());
            types.push(NORMAL);
        }
    }
    let merges: Vec<String> = base
        .merges
        .iter()
        .zip(&parsed)
        .filter(|(_, p)| {
            p.is_some_and(|(a, b, r)| kept[a as usize] && kept[b as usize] && kept[r as usize])
        })
        .map(|(m, _)| m.clone())
        .collect();
    for &(s, ty) in specials {
        tokens.push(s.to_string());
        types.push(ty);
    }
    while tokens.len() < total {
        tokens.push(format!("[PAD{}]", tokens.len()));
        types.push(UNUSED);
    }
    let find = |s: &str| -> Result<u32, SynthError> {
        tokens
            .iter()
            .rposition(|t| t == s)
            .map(|i| i as u32)
            .ok_or_else(|| SynthError::Vocab(format!("special token {s} missing")))
    };
    let (bos, eos) = (find(BOS_PAD_TEXT)?, find(EOS_TEXT)?);
    Ok(SynthVocab {
        n_regular,
        bos,
        eos,
        pad: bos,
        tokens,
        types,
        merges,
    })
}
