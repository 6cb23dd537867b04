//! Router mode (`pocket serve` without `-m`), as llama-server's (tools/server/
//! server-models.cpp): the models of `--models-dir` / `--models-preset` are listed by
//! `GET /models`, loaded by `POST /models/load` or on demand by a request's `model`, and
//! unloaded by `POST /models/unload` or to make room under `--models-max` (the least
//! recently used first).
//!
//! llama-server runs each model as a child process (its own `llama-server` on a free
//! port) and proxies HTTP to it. pocket's models are `Arc`-owned and `Send + Sync`, so the
//! router holds each loaded model in this process instead: one `App` per model, with its
//! own engine thread, slots and batch engine, exactly what `pocket serve -m` runs; a
//! request is handed to that model's axum router in-process (no second HTTP hop, no
//! ports). The HTTP side is the same: the model's endpoints answer as in single-model
//! mode, and `/models`, `/props`, the load / unload endpoints and their errors answer as
//! llama-server's router. Unloading drops the router's `Arc<App>`: requests still running
//! on the model finish, then its engine thread ends and the weights are freed
//! (llama-server stops its child the same way, waiting up to `stop-timeout`).

mod registry;
pub mod routes;
mod sources;

pub use registry::Registry;
pub use sources::SourceError;

use std::path::PathBuf;

/// The router mode's flags (llama-server's names and defaults).
#[derive(clap::Args, Debug, Clone)]
pub struct RouterArgs {
    /// Directory of GGUF models for router mode: each `.gguf` file, or subdirectory with
    /// one, is a model named after it.
    #[arg(long, value_name = "PATH")]
    pub models_dir: Option<PathBuf>,
    /// INI file of model presets for router mode (llama-server's format: a section per
    /// model, keys are flags without the dashes; `[*]` applies to all).
    #[arg(long, value_name = "PATH")]
    pub models_preset: Option<PathBuf>,
    /// Router mode: most models loaded at once (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub models_max: usize,
    /// Router mode: load a model a request names when it is not loaded (the default).
    #[arg(long, overrides_with = "no_models_autoload")]
    pub models_autoload: bool,
    /// Router mode: answer 400 for a model that is not loaded instead of loading it.
    #[arg(long)]
    pub no_models_autoload: bool,
}
