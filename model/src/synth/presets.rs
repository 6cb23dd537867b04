//! Published model shapes that `pocket synth` reproduces with random weights.

use super::vocab::{QWEN2_SPECIALS, QWEN3_SPECIALS};

/// The llama.cpp architectures synth writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Per-head RMSNorm on Q and K (`attn_q_norm`, `attn_k_norm`), no biases.
    Qwen3,
    /// Biases on Q, K and V.
    Qwen2,
    /// Plain llama (SmolLM2).
    Llama,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Qwen2 => "qwen2",
            Arch::Llama => "llama",
        }
    }
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "qwen3" => Some(Arch::Qwen3),
            "qwen2" => Some(Arch::Qwen2),
            "llama" => Some(Arch::Llama),
            _ => None,
        }
    }
}

/// Hyperparameters of a dense decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub arch: Arch,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub context: u32,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// Output projection shares `token_embd` (no `output.weight`).
    pub tied: bool,
}

/// Which added tokens follow the regular ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specials {
    Qwen2,
    Qwen3,
}

impl Specials {
    pub fn list(self) -> &'static [(&'static str, i32)] {
        match self {
            Specials::Qwen2 => QWEN2_SPECIALS,
            Specials::Qwen3 => QWEN3_SPECIALS,
        }
    }
}

/// A named shape with its vocabulary layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Preset {
    pub name: String,
    /// `general.name`.
    pub model_name: String,
    pub shape: Shape,
    pub specials: Specials,
    /// Regular tokens kept from the Qwen vocabulary; `None`: all that fit before the
    /// specials (`vocab - specials`).
    pub regular: Option<usize>,
    /// Q4_1 output as MNN's 64-element groups (two 32-blocks sharing d, m).
    pub q4_1_group64: bool,
    /// A native decision model to declare (`--decision`), none by default.
    pub decision: Option<super::decision::DecisionSpec>,
}

impl Preset {
    pub fn n_regular(&self) -> usize {
        self.regular
            .unwrap_or(self.shape.vocab.saturating_sub(self.specials.list().len()))
    }
}

/// Names accepted by [`preset`].
pub const PRESET_NAMES: &[&str] = &[
    "mnn-pocket-0.3b",
    "qwen3-0.6b",
    "qwen2.5-0.5b",
    "smollm2-135m",
    "custom",
];

/// Regular tokens of the Qwen vocabulary (ids 0..151643).
pub const QWEN_REGULAR: usize = 151_643;

pub fn preset(name: &str) -> Option<Preset> {
    let p = |model_name: &str, shape, specials, regular, g64| Preset {
        name: name.to_string(),
        model_name: model_name.to_string(),
        shape,
        specials,
        regular,
        q4_1_group64: g64,
        decision: None,
    };
    Some(match name {
        "mnn-pocket-0.3b" => p(
            "MNN-Pocket 0.3B (pocket synth)",
            Shape {
                arch: Arch::Qwen3,
                layers: 28,
                hidden: 896,
                heads: 14,
                kv_heads: 2,
                head_dim: 64,
                ffn: 2560,
                vocab: 65_536,
                context: 40_960,
                rope_base: 1e6,
                rms_eps: 1e-6,
                tied: true,
            },
            Specials::Qwen3,
            None, // 65,510 regular: <|endoftext|> = 65510, <|im_end|> = 65512
            true,
        ),
        "qwen3-0.6b" => p(
            "Qwen3 0.6B (pocket synth)",
            Shape {
                arch: Arch::Qwen3,
                layers: 28,
                hidden: 1024,
                heads: 16,
                kv_heads: 8,
                head_dim: 128,
                ffn: 3072,
                vocab: 151_936,
                context: 40_960,
                rope_base: 1e6,
                rms_eps: 1e-6,
                tied: true,
            },
            Specials::Qwen3,
            Some(QWEN_REGULAR),
            false,
        ),
        "qwen2.5-0.5b" => p(
            "Qwen2.5 0.5B (pocket synth)",
            Shape {
                arch: Arch::Qwen2,
                layers: 24,
                hidden: 896,
                heads: 14,
                kv_heads: 2,
                head_dim: 64,
                ffn: 4864,
                vocab: 151_936,
                context: 32_768,
                rope_base: 1e6,
                rms_eps: 1e-6,
                tied: true,
            },
            Specials::Qwen2,
            Some(QWEN_REGULAR),
            false,
        ),
        // SmolLM2's own vocabulary is a 49,152-token GPT-2-style BPE; synth uses the Qwen
        // vocabulary trimmed to 49,152 instead (same size, different tokens).
        "smollm2-135m" => p(
            "SmolLM2 135M (pocket synth, Qwen vocabulary)",
            Shape {
                arch: Arch::Llama,
                layers: 30,
                hidden: 576,
                heads: 9,
                kv_heads: 3,
                head_dim: 64,
                ffn: 1536,
                vocab: 49_152,
                context: 8_192,
                rope_base: 1e5,
                rms_eps: 1e-5,
                tied: true,
            },
            Specials::Qwen3,
            None,
            false,
        ),
        // A tiny qwen3 for tests; every field can be overridden from the command line.
        "custom" => p(
            "custom (pocket synth)",
            Shape {
                arch: Arch::Qwen3,
                layers: 2,
                hidden: 64,
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
                ffn: 128,
                vocab: 2048,
                context: 4096,
                rope_base: 1e6,
                rms_eps: 1e-6,
                tied: true,
            },
            Specials::Qwen3,
            None,
            false,
        ),
        _ => return None,
    })
}
