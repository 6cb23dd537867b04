//! Synthetic GGUF models: published shapes with seeded random weights, written the way
//! llama.cpp's converter and `llama-quantize` would (`pocket synth`).
//!
//! - [`presets`]: the shapes (MNN-Pocket 0.3B, Qwen3 0.6B, Qwen2.5 0.5B, SmolLM2 135M, custom).
//! - [`vocab`]: the Qwen vocabulary trimmed to the preset's size.
//! - [`weights`]: the PRNG and quantization of the random tensors.
//! - [`decision`]: the metadata of a native decision model (`--decision`).
//!
//! Tensor types: `f16`, `q8_0`, `q4_0` and `q4_1` put every 2-D weight (token_embd
//! included) in that type, like `llama-quantize --pure`; a row width that is not a multiple
//! of 32 falls back to F16 as llama.cpp does. `q4_k_m` follows llama-quant.cpp's mixture
//! (tied token_embd: Q6_K, or Q8_0 when the row is not a multiple of 256; attn_v and
//! ffn_down: Q6_K on the `use_more_bits` layers; the rest Q4_K) and its fallbacks for rows
//! not a multiple of 256 (Q4_K→Q5_0, Q6_K→Q8_0, Q5_K→Q5_1). Norms and biases stay F32.
//!
//! Output is deterministic: same preset, type and seed give byte-identical files.

pub mod decision;
pub mod presets;
pub mod truncate;
pub mod vocab;
pub mod weights;

use std::io::{self, Write};

use pocket_kernels::formats::FormatError;
use pocket_kernels::GgmlType;

use crate::gguf::{GgufWriter, MetaValue};

pub use presets::{preset, Arch, Preset, Shape, Specials, PRESET_NAMES};
pub use vocab::{BaseVocab, SynthVocab};
use weights::{Encoding, Init, WEIGHT_STD};

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("unknown preset '{0}' (known: {known})", known = PRESET_NAMES.join(", "))]
    UnknownPreset(String),
    #[error("unknown type '{0}' (known: {known})", known = SynthType::NAMES.join(", "))]
    UnknownType(String),
    #[error("invalid shape: {0}")]
    Shape(String),
    #[error("vocabulary: {0}")]
    Vocab(String),
    #[error("quantization: {0}")]
    Format(#[from] FormatError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The `--type` of a synthetic model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum SynthType {
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q4_K_M,
}

impl SynthType {
    pub const NAMES: &'static [&'static str] = &["f16", "q8_0", "q4_0", "q4_1", "q4_k_m"];

    pub fn parse(s: &str) -> Result<SynthType, SynthError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f16" => SynthType::F16,
            "q8_0" => SynthType::Q8_0,
            "q4_0" => SynthType::Q4_0,
            "q4_1" => SynthType::Q4_1,
            "q4_k_m" => SynthType::Q4_K_M,
            _ => return Err(SynthError::UnknownType(s.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SynthType::F16 => "f16",
            SynthType::Q8_0 => "q8_0",
            SynthType::Q4_0 => "q4_0",
            SynthType::Q4_1 => "q4_1",
            SynthType::Q4_K_M => "q4_k_m",
        }
    }

    /// `general.file_type` (llama.cpp's `llama_ftype`).
    pub fn file_type(self) -> u32 {
        match self {
            SynthType::F16 => 1,
            SynthType::Q4_0 => 2,
            SynthType::Q4_1 => 3,
            SynthType::Q8_0 => 7,
            SynthType::Q4_K_M => 15,
        }
    }

    /// The type of the 2-D weights before llama.cpp's per-tensor choices.
    pub fn base_type(self) -> GgmlType {
        match self {
            SynthType::F16 => GgmlType::F16,
            SynthType::Q8_0 => GgmlType::Q8_0,
            SynthType::Q4_0 => GgmlType::Q4_0,
            SynthType::Q4_1 => GgmlType::Q4_1,
            SynthType::Q4_K_M => GgmlType::Q4_K,
        }
    }
}

/// What a tensor is, for the type choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    TokenEmbd,
    Output,
    Norm,
    Bias,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    FfnGate,
    FfnUp,
    FfnDown,
}

/// One tensor of the file, in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    pub name: String,
    /// ggml order: `dims[0]` is the row width.
    pub dims: Vec<u64>,
    pub role: Role,
    pub layer: Option<usize>,
    pub init: Init,
    pub encoding: Encoding,
}

impl TensorPlan {
    pub fn ggml_type(&self) -> GgmlType {
        self.encoding.ggml_type()
    }
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// Checks the shape for what llama.cpp and the block formats need.
pub fn validate(shape: &Shape) -> Result<(), SynthError> {
    let bad = |m: String| Err(SynthError::Shape(m));
    let s = shape;
    if s.layers == 0
        || s.hidden == 0
        || s.heads == 0
        || s.kv_heads == 0
        || s.head_dim == 0
        || s.ffn == 0
    {
        return bad("layers, hidden, heads, kv-heads, head-dim and ffn must be positive".into());
    }
    if !s.heads.is_multiple_of(s.kv_heads) {
        return bad(format!(
            "{} heads are not a multiple of {} KV heads",
            s.heads, s.kv_heads
        ));
    }
    if !s.head_dim.is_multiple_of(2) {
        return bad(format!("head-dim {} must be even (RoPE)", s.head_dim));
    }
    for (what, n) in [
        ("hidden", s.hidden),
        ("ffn", s.ffn),
        ("heads × head-dim", s.heads * s.head_dim),
    ] {
        if n % 32 != 0 {
            return bad(format!(
                "{what} = {n} is not a multiple of 32 (the quantization block)"
            ));
        }
    }
    if s.arch != Arch::Qwen3 && s.heads * s.head_dim != s.hidden {
        // llama.cpp's qwen2 builds wo as {n_embd, n_embd}
        if s.arch == Arch::Qwen2 {
            return bad(format!(
                "qwen2 needs heads × head-dim = hidden ({} × {} ≠ {})",
                s.heads, s.head_dim, s.hidden
            ));
        }
    }
    Ok(())
}

/// llama-quant.cpp's `use_more_bits`.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
}

/// llama-quant.cpp's `tensor_type_fallback` for a row of `ncols`.
fn fallback(ty: GgmlType, ncols: usize) -> GgmlType {
    if ncols.is_multiple_of(ty.block_size()) {
        return ty;
    }
    let t = match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if ncols.is_multiple_of(t.block_size()) {
        t
    } else {
        GgmlType::F16
    }
}

/// The type of a 2-D weight (llama_tensor_get_type for the supported ftypes).
fn weight_type(ty: SynthType, role: Role, layer: usize, n_layers: usize, ncols: usize) -> GgmlType {
    let base = ty.base_type();
    let chosen = match ty {
        SynthType::Q4_K_M => match role {
            // tied embeddings are quantized as the output tensor
            Role::TokenEmbd | Role::Output => {
                if !ncols.is_multiple_of(base.block_size()) {
                    GgmlType::Q8_0
                } else {
                    GgmlType::Q6_K
                }
            }
            Role::AttnV | Role::FfnDown if use_more_bits(layer, n_layers) => GgmlType::Q6_K,
            _ => base,
        },
        _ => base,
    };
    fallback(chosen, ncols)
}

/// The tensors of `preset` in type `ty`, in file order.
pub fn plan(preset: &Preset, ty: SynthType) -> Result<Vec<TensorPlan>, SynthError> {
    let s = &preset.shape;
    validate(s)?;
    let (h, v) = (s.hidden as u64, s.vocab as u64);
    let q_dim = (s.heads * s.head_dim) as u64;
    let kv_dim = (s.kv_heads * s.head_dim) as u64;
    let mut out = Vec::new();
    let mut push = |name: String, dims: Vec<u64>, role: Role, layer: Option<usize>| {
        let (init, encoding) = match role {
            Role::Norm => (Init::Const(1.0), Encoding::Plain(GgmlType::F32)),
            Role::Bias => (Init::Normal(WEIGHT_STD), Encoding::Plain(GgmlType::F32)),
            _ => {
                let ncols = dims[0] as usize;
                let t = weight_type(ty, role, layer.unwrap_or(0), s.layers, ncols);
                let enc = if t == GgmlType::Q4_1 && preset.q4_1_group64 && ncols.is_multiple_of(64)
                {
                    Encoding::Q4_1Group64
                } else {
                    Encoding::Plain(t)
                };
                (Init::Normal(WEIGHT_STD), enc)
            }
        };
        out.push(TensorPlan {
            name,
            dims,
            role,
            layer,
            init,
            encoding,
        });
    };
    push(
        "token_embd.weight".into(),
        vec![h, v],
        Role::TokenEmbd,
        None,
    );
    for il in 0..s.layers {
        let b = |n: &str| format!("blk.{il}.{n}");
        let l = Some(il);
        push(b("attn_norm.weight"), vec![h], Role::Norm, l);
        push(b("attn_q.weight"), vec![h, q_dim], Role::AttnQ, l);
        if s.arch == Arch::Qwen2 {
            push(b("attn_q.bias"), vec![q_dim], Role::Bias, l);
        }
        push(b("attn_k.weight"), vec![h, kv_dim], Role::AttnK, l);
        if s.arch == Arch::Qwen2 {
            push(b("attn_k.bias"), vec![kv_dim], Role::Bias, l);
        }
        push(b("attn_v.weight"), vec![h, kv_dim], Role::AttnV, l);
        if s.arch == Arch::Qwen2 {
            push(b("attn_v.bias"), vec![kv_dim], Role::Bias, l);
        }
        if s.arch == Arch::Qwen3 {
            push(
                b("attn_q_norm.weight"),
                vec![s.head_dim as u64],
                Role::Norm,
                l,
            );
            push(
                b("attn_k_norm.weight"),
                vec![s.head_dim as u64],
                Role::Norm,
                l,
            );
        }
        push(b("attn_output.weight"), vec![q_dim, h], Role::AttnOutput, l);
        push(b("ffn_norm.weight"), vec![h], Role::Norm, l);
        push(
            b("ffn_gate.weight"),
            vec![h, s.ffn as u64],
            Role::FfnGate,
            l,
        );
        push(b("ffn_up.weight"), vec![h, s.ffn as u64], Role::FfnUp, l);
        push(
            b("ffn_down.weight"),
            vec![s.ffn as u64, h],
            Role::FfnDown,
            l,
        );
    }
    push("output_norm.weight".into(), vec![h], Role::Norm, None);
    if !s.tied {
        push("output.weight".into(), vec![h, v], Role::Output, None);
    }
    Ok(out)
}

/// Builds the preset's vocabulary from the Qwen base vocabulary.
pub fn build_vocab(preset: &Preset, base: &BaseVocab) -> Result<SynthVocab, SynthError> {
    vocab::trim(
        base,
        preset.n_regular(),
        preset.specials.list(),
        preset.shape.vocab,
    )
}

/// The metadata, in the order llama.cpp's converter writes it.
pub fn metadata(
    preset: &Preset,
    ty: SynthType,
    seed: u64,
    voc: &SynthVocab,
) -> Vec<(String, MetaValue)> {
    let s = &preset.shape;
    let a = s.arch.name();
    let u32v = |n: usize| MetaValue::U32(n as u32);
    let mut kv: Vec<(String, MetaValue)> = Vec::new();
    let mut put = |k: String, v: MetaValue| kv.push((k, v));
    put("general.architecture".into(), MetaValue::String(a.into()));
    put("general.type".into(), MetaValue::String("model".into()));
    put(
        "general.name".into(),
        MetaValue::String(preset.model_name.clone()),
    );
    put(
        "general.description".into(),
        MetaValue::String(format!(
            "pocket synth --preset {} --type {} --seed {seed}: random weights (normal, std {WEIGHT_STD}), Qwen vocabulary trimmed to {}",
            preset.name,
            ty.name(),
            s.vocab
        )),
    );
    put(format!("{a}.block_count"), u32v(s.layers));
    put(format!("{a}.context_length"), MetaValue::U32(s.context));
    put(format!("{a}.embedding_length"), u32v(s.hidden));
    put(format!("{a}.feed_forward_length"), u32v(s.ffn));
    put(format!("{a}.attention.head_count"), u32v(s.heads));
    put(format!("{a}.attention.head_count_kv"), u32v(s.kv_heads));
    put(format!("{a}.rope.freq_base"), MetaValue::F32(s.rope_base));
    put(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        MetaValue::F32(s.rms_eps),
    );
    // Qwen3's config names head_dim, so its converter writes key/value_length; qwen2 and
    // llama configs only need them when head_dim differs from hidden / heads.
    if s.arch == Arch::Qwen3 || s.head_dim * s.heads != s.hidden {
        put(format!("{a}.attention.key_length"), u32v(s.head_dim));
        put(format!("{a}.attention.value_length"), u32v(s.head_dim));
    }
    put("general.file_type".into(), MetaValue::U32(ty.file_type()));
    if s.arch == Arch::Llama {
        put(format!("{a}.vocab_size"), u32v(s.vocab));
        put(format!("{a}.rope.dimension_count"), u32v(s.head_dim));
    }
    put(
        "tokenizer.ggml.model".into(),
        MetaValue::String("gpt2".into()),
    );
    put(
        "tokenizer.ggml.pre".into(),
        MetaValue::String("qwen2".into()),
    );
    put(
        "tokenizer.ggml.tokens".into(),
        MetaValue::strings(voc.tokens.iter().cloned()),
    );
    put(
        "tokenizer.ggml.token_type".into(),
        MetaValue::i32s(voc.types.iter().copied()),
    );
    put(
        "tokenizer.ggml.merges".into(),
        MetaValue::strings(voc.merges.iter().cloned()),
    );
    put(
        "tokenizer.ggml.eos_token_id".into(),
        MetaValue::U32(voc.eos),
    );
    put(
        "tokenizer.ggml.padding_token_id".into(),
        MetaValue::U32(voc.pad),
    );
    put(
        "tokenizer.ggml.bos_token_id".into(),
        MetaValue::U32(voc.bos),
    );
    put(
        "tokenizer.ggml.add_bos_token".into(),
        MetaValue::Bool(false),
    );
    put(
        "tokenizer.chat_template".into(),
        MetaValue::String(vocab::CHATML_TEMPLATE.into()),
    );
    for (k, v) in preset
        .decision
        .iter()
        .flat_map(|d| decision::metadata(a, d))
    {
        put(k, v);
    }
    put("general.quantization_version".into(), MetaValue::U32(2));
    kv
}

/// What was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub bytes: u64,
    pub n_tensors: usize,
    pub n_params: u64,
    /// Tensors per type, in ggml id order.
    pub types: Vec<(GgmlType, usize)>,
}

/// Writes the whole model to `out`. `progress(done, total)` is called with tensor-data
/// bytes after each tensor.
pub fn synthesize(
    preset: &Preset,
    ty: SynthType,
    seed: u64,
    base: &BaseVocab,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, SynthError> {
    let tensors = plan(preset, ty)?;
    let voc = build_vocab(preset, base)?;
    let mut w = GgufWriter::new();
    for (k, v) in metadata(preset, ty, seed, &voc) {
        w.kv(k, v);
    }
    let mut total = 0u64;
    for t in &tensors {
        let len = w.declare_tensor(&t.name, t.ggml_type(), &t.dims)?;
        total += len + w.padding(len);
    }
    let header = w.header_bytes()?;
    out.write_all(&header)?;
    let mut done = 0u64;
    progress(0, total);
    for (i, t) in tensors.iter().enumerate() {
        let ncols = t.dims[0] as usize;
        let nrows = (t.n_elements() / t.dims[0]) as usize;
        let bytes = weights::tensor_bytes(seed, i as u64, t.init, ncols, nrows, t.encoding)?;
        out.write_all(&bytes)?;
        let pad = w.padding(bytes.len() as u64);
        out.write_all(&vec![0u8; pad as usize])?;
        done += bytes.len() as u64 + pad;
        progress(done, total);
    }
    out.flush()?;
    let mut types: Vec<(GgmlType, usize)> = Vec::new();
    for t in &tensors {
        match types.iter_mut().find(|(g, _)| *g == t.ggml_type()) {
            Some(e) => e.1 += 1,
            None => types.push((t.ggml_type(), 1)),
        }
    }
    types.sort_by_key(|(g, _)| g.id());
    Ok(Summary {
        bytes: header.len() as u64 + total,
        n_tensors: tensors.len(),
        n_params: tensors.iter().map(|t| t.n_elements()).sum(),
        types,
    })
}
