//! Sampling flags shared by the commands that generate (`run`, `chat`): llama.cpp's names
//! and defaults, except `--temp`, which defaults to greedy. The model and engine flags are
//! in `engine_args`.

use clap::Args;
use pocket_model::sampler::{Sampler, SamplerParams};

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

/// llama.cpp's multi-letter short flags, which clap cannot declare, as their long forms.
pub fn long_form(arg: &std::ffi::OsStr) -> Option<&'static str> {
    Some(match arg.to_str()? {
        "-pg" => "--pg",
        "-ctk" => "--cache-type-k",
        "-ctv" => "--cache-type-v",
        "-sys" => "--system-prompt",
        "-md" => "--spec-draft-model",
        _ => return None,
    })
}
