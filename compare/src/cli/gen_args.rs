//! Flags shared by the commands that run a model (`run`, `chat`, `perplexity`): sampling
//! (llama.cpp's names and defaults, except `--temp`, which defaults to greedy), the KV
//! cache types (`-ctk` / `-ctv`) and the arithmetic (`--numerics`).

use clap::Args;
use pocket_model::sampler::{Sampler, SamplerParams};
use pocket_model::{KvType, LoadOptions, Numerics, SessionOptions};

/// Sampling: penalties → top-k → top-p → min-p → temperature → draw (`pocket_model::sampler`).
#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy (top-k/top-p/min-p then do nothing).
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
    /// Seed of the sampler's PRNG (same seed, same tokens).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep the k most likely tokens; 0 = off.
    #[arg(long, default_value_t = 40)]
    pub top_k: i32,
    /// Nucleus sampling threshold; 1.0 = off.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Minimum probability relative to the most likely token; 0.0 = off.
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalize repeated tokens; 1.0 = off.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// How many of the last tokens the repeat penalty looks at; -1 = all.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i32,
}

impl SamplingArgs {
    pub fn sampler(&self) -> Sampler {
        Sampler::new(SamplerParams {
            temp: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: Some(self.seed),
            ..Default::default()
        })
    }
}

/// KV cache element types, llama.cpp's `-ctk` / `-ctv` (`-ctk` and `-ctv` are rewritten to
/// the long forms before parsing).
#[derive(Args, Clone, Debug)]
pub struct CacheArgs {
    /// KV cache type of keys (-ctk): f16, q8_0 or f32.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16")]
    pub type_k: KvType,
    /// KV cache type of values (-ctv): f16, q8_0 or f32.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16")]
    pub type_v: KvType,
    /// Arithmetic: `fast` (pocket's kernels) or `ggml` (llama.cpp's x86 CPU arithmetic bit
    /// for bit: the same logits, greedy text and perplexity as llama.cpp; scalar and much
    /// slower; weights Q4_0/Q4_1/Q8_0/Q5_0/Q4_K/Q6_K, f16 KV cache).
    #[arg(long, value_name = "MODE", default_value = "fast", value_parser = parse_numerics)]
    pub numerics: Numerics,
}

fn parse_numerics(s: &str) -> Result<Numerics, String> {
    match s {
        "fast" => Ok(Numerics::Fast),
        "ggml" => Ok(Numerics::Ggml),
        _ => Err(format!("unknown numerics '{s}' (expected fast or ggml)")),
    }
}

impl CacheArgs {
    /// How to load the model for these options.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            numerics: self.numerics,
            ..Default::default()
        }
    }

    /// Session options for `n_ctx` tokens, `threads` (default: all cores), pinned threads.
    pub fn session_options(&self, n_ctx: usize, threads: Option<usize>) -> SessionOptions {
        let mut o = SessionOptions {
            n_ctx,
            pin: true,
            type_k: self.type_k,
            type_v: self.type_v,
            ..Default::default()
        };
        if let Some(t) = threads {
            o.n_threads = t.max(1);
        }
        o
    }
}

/// llama.cpp's multi-letter short flags, which clap cannot declare, as their long forms.
pub fn long_form(arg: &std::ffi::OsStr) -> Option<&'static str> {
    Some(match arg.to_str()? {
        "-pg" => "--pg",
        "-ctk" => "--cache-type-k",
        "-ctv" => "--cache-type-v",
        "-sys" => "--system-prompt",
        _ => return None,
    })
}
