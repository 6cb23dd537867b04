//! Hyper-parameters of a model, read from GGUF metadata (`{arch}.*` keys), with the
//! per-architecture facts llama.cpp hard-codes (rope type, gemma3's sliding-window pattern
//! and local rope base, embedding scale).

use crate::gguf::{Gguf, GgufError, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    pub const SUPPORTED: &'static str = "llama, qwen2, qwen3, gemma3";

    pub fn from_name(name: &str) -> Option<Arch> {
        Some(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// How RoPE pairs the dimensions of a head (ggml's `rope_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeType {
    /// Adjacent pairs `(x[2i], x[2i+1])` (llama).
    Normal,
    /// Halves `(x[i], x[i + n_rot/2])` (GPT-NeoX; qwen2, qwen3, gemma3).
    Neox,
}

/// The gated activation of the feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnAct {
    /// `silu(gate) * up` (llama, qwen).
    Silu,
    /// `gelu_tanh(gate) * up` (gemma).
    GeluTanh,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("unsupported architecture \"{0}\" (pocket runs {supported})", supported = Arch::SUPPORTED)]
    UnknownArch(String),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("bad hyper-parameter {key}: {why}")]
    Bad { key: String, why: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Per-head width of Q and K (`attention.key_length`, else `n_embd / n_head`).
    pub head_dim: usize,
    /// Per-head width of V (`attention.value_length`, else `head_dim`).
    pub head_dim_v: usize,
    pub n_vocab: usize,
    /// Context the model was trained for.
    pub n_ctx_train: usize,
    pub eps: f32,
    pub rope_type: RopeType,
    /// Dimensions of a head that are rotated (`rope.dimension_count`, else `head_dim`).
    pub n_rot: usize,
    pub rope_base: f32,
    /// Position multiplier (1 / linear rope scaling factor).
    pub rope_freq_scale: f32,
    /// Rope base of sliding-window (local) layers.
    pub rope_base_swa: f32,
    /// Sliding window length (0 = none): a key at position `k` is seen by the query at
    /// `q` iff `q - k < n_swa`.
    pub n_swa: usize,
    /// Per layer: does it use the sliding window?
    pub swa_layers: Vec<bool>,
    /// Multiplier applied to token embeddings (gemma: `sqrt(n_embd)`).
    pub embd_scale: f32,
    /// Query scale before `softmax(q·k)`.
    pub attn_scale: f32,
    /// `tanh` softcap on the final logits (0 = none).
    pub final_logit_softcap: f32,
    pub ffn_act: FfnAct,
    /// Per-head RMSNorm on Q and K (qwen3, gemma3).
    pub qk_norm: bool,
    /// Extra norms after attention and after the FFN (gemma3).
    pub post_norms: bool,
    /// Q/K/V carry biases (qwen2).
    pub qkv_bias: bool,
}

fn bad(key: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::Bad {
        key: key.to_string(),
        why: why.into(),
    }
}

impl Config {
    pub fn from_gguf<B: AsRef<[u8]>>(g: &Gguf<B>) -> Result<Config, ConfigError> {
        let arch_name = g.get_str("general.architecture")?.into_owned();
        let arch = Arch::from_name(&arch_name)
            .ok_or_else(|| ConfigError::UnknownArch(arch_name.clone()))?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let req = |s: &str| -> Result<usize, ConfigError> { Ok(g.get_u64(&k(s))? as usize) };
        let opt = |s: &str| -> Option<usize> { g.get_u64(&k(s)).ok().map(|v| v as usize) };
        let optf = |s: &str| -> Option<f32> { g.get_f64(&k(s)).ok().map(|v| v as f32) };

        let n_layer = req("block_count")?;
        let n_embd = req("embedding_length")?;
        let n_ff = req("feed_forward_length")?;
        let n_head = req("attention.head_count")?;
        let n_head_kv = opt("attention.head_count_kv").unwrap_or(n_head);
        if n_layer == 0 || n_embd == 0 || n_head == 0 || n_head_kv == 0 {
            return Err(bad(&k("block_count"), "zero layers, width or heads"));
        }
        if n_head % n_head_kv != 0 {
            return Err(bad(
                &k("attention.head_count_kv"),
                format!("{n_head} query heads are not a multiple of {n_head_kv} kv heads"),
            ));
        }
        let head_dim = opt("attention.key_length").unwrap_or(n_embd / n_head);
        let head_dim_v = opt("attention.value_length").unwrap_or(head_dim);
        if head_dim_v != head_dim {
            return Err(bad(&k("attention.value_length"), "differs from key_length"));
        }
        let n_rot = opt("rope.dimension_count").unwrap_or(head_dim);
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(bad(&k("rope.dimension_count"), format!("{n_rot}")));
        }
        let eps = optf("attention.layer_norm_rms_epsilon").unwrap_or(1e-5);
        let n_vocab = opt("vocab_size")
            .or_else(|| match g.get("tokenizer.ggml.tokens") {
                Some(Value::Array(a)) => Some(a.len() as usize),
                _ => None,
            })
            .ok_or_else(|| bad(&k("vocab_size"), "missing, and no tokenizer.ggml.tokens"))?;
        let n_ctx_train = opt("context_length").unwrap_or(2048);
        let rope_base = optf("rope.freq_base").unwrap_or(10000.0);
        let rope_freq_scale = match g.get_str(&k("rope.scaling.type")).ok().as_deref() {
            Some("linear") => 1.0 / optf("rope.scaling.factor").unwrap_or(1.0),
            Some("none") | None => optf("rope.scale_linear").map(|f| 1.0 / f).unwrap_or(1.0),
            Some(other) => {
                return Err(bad(
                    &k("rope.scaling.type"),
                    format!("{other} scaling is not supported"),
                ))
            }
        };
        let rope_type = match arch {
            Arch::Llama => RopeType::Normal,
            _ => RopeType::Neox,
        };
        let mut n_swa = 0;
        let mut swa_layers = vec![false; n_layer];
        let mut rope_base_swa = rope_base;
        let mut embd_scale = 1.0;
        let mut ffn_act = FfnAct::Silu;
        let final_logit_softcap = optf("final_logit_softcapping").unwrap_or(0.0);
        let mut attn_scale = 1.0 / (head_dim as f32).sqrt();
        if arch == Arch::Gemma3 {
            n_swa = opt("attention.sliding_window").unwrap_or(0);
            if n_swa > 0 {
                rope_base_swa = optf("rope.freq_base_swa").unwrap_or(10000.0);
                match g.get(&k("attention.sliding_window_pattern")) {
                    Some(Value::Array(a)) => {
                        for (l, v) in a.iter().enumerate().take(n_layer) {
                            swa_layers[l] = v.as_bool().unwrap_or(false);
                        }
                    }
                    other => {
                        let p = other.and_then(|v| v.as_u64()).unwrap_or(6) as usize;
                        for (l, s) in swa_layers.iter_mut().enumerate() {
                            *s = p == 0 || l % p < p - 1;
                        }
                    }
                }
            }
            embd_scale = (n_embd as f32).sqrt();
            ffn_act = FfnAct::GeluTanh;
            // llama.cpp: 1/sqrt(head_dim) except for the 27B (62 layers): 1/sqrt(n_embd/n_head).
            if n_layer == 62 {
                attn_scale = 1.0 / ((n_embd / n_head) as f32).sqrt();
            }
        }
        Ok(Config {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v: head_dim,
            n_vocab,
            n_ctx_train,
            eps,
            rope_type,
            n_rot,
            rope_base,
            rope_freq_scale,
            rope_base_swa,
            n_swa,
            swa_layers,
            embd_scale,
            attn_scale,
            final_logit_softcap,
            ffn_act,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            post_norms: arch == Arch::Gemma3,
            qkv_bias: arch == Arch::Qwen2,
        })
    }

    /// Width of the query projection (`n_head * head_dim`).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    /// Width of the key/value projections (`n_head_kv * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.n_head / self.n_head_kv
    }
    /// Rope base of layer `l`.
    pub fn rope_base_of(&self, l: usize) -> f32 {
        if self.swa_layers[l] {
            self.rope_base_swa
        } else {
            self.rope_base
        }
    }
    /// Sliding window of layer `l` (0 = full causal attention).
    pub fn window_of(&self, l: usize) -> usize {
        if self.swa_layers[l] {
            self.n_swa
        } else {
            0
        }
    }
}
