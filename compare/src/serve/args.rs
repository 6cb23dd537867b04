//! `pocket serve` flags: llama-server's names and defaults where pocket implements them.
//! Flags that are no-ops on a CPU engine (`-ngl`, `-fa`, `--mlock`, ...) are accepted and
//! reported once; any other llama-server flag is refused with an error naming it, so a
//! script written for llama-server never silently runs with a setting it did not get.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;
use pocket_model::sampler::SamplerParams;
use pocket_model::{KvType, SessionOptions};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "pocket serve",
    about = "An HTTP server with llama-server's and OpenAI's API (continuous batching, streaming, cancellation)",
    // As llama-server's: a flag given twice takes its last value (the router puts a
    // model's preset options before its own command line, which wins).
    args_override_self = true
)]
pub struct ServeArgs {
    /// The GGUF model. Without it, the server starts in router mode: models from
    /// --models-dir / --models-preset, loaded on demand (see serve/models).
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Context size of all slots together; each slot holds ctx-size / parallel tokens
    /// (llama-server without a unified KV cache).
    #[arg(short = 'c', long, default_value_t = 4096)]
    pub ctx_size: usize,
    /// Every slot may hold the whole ctx-size (-kvu). llama-server shares one pool of
    /// ctx-size tokens among the slots; pocket gives each slot a cache of ctx-size, so a
    /// request never fails for lack of room another slot holds (memory: parallel x ctx-size).
    #[arg(long)]
    pub kv_unified: bool,
    /// Slots: requests served at once (-np), each a sequence of the shared KV cache.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Threads of the engine's compute pool (default: all cores).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// Most token rows in one forward batch: the generating slots' next tokens plus a chunk
    /// of pending prompts.
    #[arg(short = 'b', long, default_value_t = 2048)]
    pub batch_size: usize,
    /// Default tokens to predict per request (-1: until the context is full).
    #[arg(short = 'n', long, default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Requests that may wait for a slot; past them the server answers 503.
    #[arg(long, default_value_t = 64)]
    pub queue_size: usize,
    /// Thread placement (`-C/--cpu-mask`, `--cpu-strict`, `--poll` as llama-server's, and
    /// `--cpu-class`; see `pocket bench --help`).
    #[command(flatten)]
    pub placement: crate::cli::engine_args::PlacementArgs,
    /// LoRA adapters (`--lora`, `--lora-scaled`, `--lora-merge`; serve/lora.rs).
    #[command(flatten)]
    pub lora: crate::cli::engine_args::LoraArgs,
    /// KV cache type of keys (-ctk): f16, q8_0 or f32.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16")]
    pub type_k: KvType,
    /// KV cache type of values (-ctv): f16, q8_0 or f32.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16")]
    pub type_v: KvType,
    /// API key clients must send (`Authorization: Bearer KEY`); /health stays open.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Model name reported by /v1/models and in responses (-a); a comma-separated list
    /// gives several names, the first in sorted order being the id.
    #[arg(short = 'a', long)]
    pub alias: Option<String>,
    /// Comma-separated tags listed with the model in /models.
    #[arg(long)]
    pub tags: Option<String>,
    /// Enable the Prometheus /metrics endpoint.
    #[arg(long)]
    pub metrics: bool,
    /// Enable /slots (the default).
    #[arg(long, overrides_with = "no_slots")]
    pub slots: bool,
    /// Disable /slots.
    #[arg(long)]
    pub no_slots: bool,
    /// Chat template: chatml, gemma, llama3, command-r or jinja text [default: the model's].
    #[arg(long, value_name = "NAME|JINJA")]
    pub chat_template: Option<String>,
    /// Chat template read from a jinja file.
    #[arg(long, value_name = "FILE", conflicts_with = "chat_template")]
    pub chat_template_file: Option<PathBuf>,
    /// Accepted for llama-server compatibility (templates always run through jinja).
    #[arg(long, overrides_with = "no_jinja")]
    pub jinja: bool,
    /// Accepted for llama-server compatibility.
    #[arg(long)]
    pub no_jinja: bool,
    /// Seconds a request may go without progress before it is cancelled.
    #[arg(long = "timeout", short = 'o', default_value_t = 600)]
    pub timeout: u64,
    /// Do not serve the chat page at `/` (llama-server's --no-webui; also --no-ui).
    #[arg(long = "no-webui", visible_alias = "no-ui", overrides_with = "webui")]
    pub no_webui: bool,
    /// Serve the chat page at `/` (the default).
    #[arg(long = "webui", visible_alias = "ui")]
    pub webui: bool,
    /// Debug output: OpenAI-API answers also carry llama-server's `__verbose` object (the
    /// native result, with the prompt as the model saw it).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body: usize,
    /// Speculative decoding in every slot (llama-server's flags; see `pocket run --help`).
    #[command(flatten)]
    pub spec: crate::cli::spec_args::SpecArgs,
    #[command(flatten)]
    pub sampling: DefaultSampling,
    /// `--cors-origins`, `--cors-methods`, `--cors-headers`, `--cors-credentials`.
    #[command(flatten)]
    pub cors: super::cors::CorsArgs,
    /// Router mode's `--models-dir`, `--models-preset`, `--models-max`, `--models-autoload`.
    #[command(flatten)]
    pub router: super::models::RouterArgs,
}

impl ServeArgs {
    /// The tokens one slot's cache holds: ctx-size / parallel, or all of ctx-size with
    /// `--kv-unified`.
    pub fn n_ctx_slot(&self) -> usize {
        if self.kv_unified {
            self.ctx_size
        } else {
            self.ctx_size / self.parallel
        }
    }
    /// A session as the flags set it up (cache types, threads, placement); `pin`: its
    /// threads pinned to cores.
    pub fn session_options(&self, pin: bool) -> SessionOptions {
        // `parse` refused a placement that does not resolve, so this one does.
        let (placement, class_threads) = self.placement.resolve().unwrap_or_default();
        let mut o = SessionOptions {
            pin,
            type_k: self.type_k,
            type_v: self.type_v,
            placement,
            ..Default::default()
        };
        if let Some(t) = self.threads.or(class_threads) {
            o.n_threads = t.max(1);
        }
        o
    }
}

/// The server-wide sampling defaults (llama-server's), which each request may override.
#[derive(clap::Args, Debug, Clone)]
pub struct DefaultSampling {
    /// Temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// PRNG seed; -1 = a random seed per request.
    #[arg(short = 's', long, default_value_t = -1, allow_negative_numbers = true)]
    pub seed: i64,
    #[command(flatten)]
    pub filters: crate::cli::gen_args::FilterArgs,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
}

impl DefaultSampling {
    pub fn params(&self) -> SamplerParams {
        SamplerParams {
            temp: self.temp,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: u64::try_from(self.seed).ok(),
            ..self.filters.params()
        }
    }
}

/// llama-server's multi-letter short flags, as the long forms clap knows.
const LONG_FORMS: &[(&str, &str)] = &[
    ("-np", "--parallel"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-md", "--spec-draft-model"),
    ("-kvu", "--kv-unified"),
];

/// Flags that change nothing on a CPU engine: (flag, takes a value).
const NO_OPS: &[(&str, bool)] = &[
    ("-ngl", true),
    ("--gpu-layers", true),
    ("--n-gpu-layers", true),
    ("-fa", true),
    ("--flash-attn", true),
    ("--mlock", false),
    ("--no-mmap", false),
    ("--mmap", false),
    ("-cb", false),
    ("--cont-batching", false),
    ("-dev", true),
    ("--device", true),
    ("-sm", true),
    ("--split-mode", true),
    ("-mg", true),
    ("--main-gpu", true),
    ("-ts", true),
    ("--tensor-split", true),
    ("--no-warmup", false),
    ("--warmup", false),
    // pocket's KV cache always holds every position of sliding-window layers (the
    // window is a mask), which is what --swa-full asks llama.cpp for.
    ("--swa-full", false),
    ("--log-disable", false),
    // pocket never downloads a model: staying offline is what it always does.
    ("--offline", false),
    // Sampling on the compute backend (llama.cpp's GPU samplers): pocket samples on the
    // CPU, and a request's `backend_sampling` changes nothing either.
    ("--backend_sampling", false),
    ("--backend-sampling", false),
];

/// Flags of llama-server that pocket serve does not implement (a sample of the common
/// ones, for a clearer message than clap's "unexpected argument").
const REFUSED: &[&str] = &[
    "--mmproj",
    "--draft",
    "--embedding",
    "--embeddings",
    "--reranking",
    "--rerank",
    "--grammar",
    "--grammar-file",
    "-j",
    "--json-schema",
    "--rope-scaling",
    "--rope-freq-base",
    "--rope-freq-scale",
    "--yarn-orig-ctx",
    "-ub",
    "--ubatch-size",
    "--slot-save-path",
    "--ssl-key-file",
    "--ssl-cert-file",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-mu",
    "--model-url",
    "--path",
    "--api-prefix",
    "-sps",
    "--slot-prompt-similarity",
    "--ctx-shift",
    "--context-shift",
    "-tb",
    "--threads-batch",
    "--mirostat",
    "--dry-multiplier",
    "--xtc-probability",
    "--typical",
    "--dynatemp-range",
    "--samplers",
    "--sampling-seq",
    "--logit-bias",
    "--keep",
    "--n-keep",
    "-nocb",
    "--no-cont-batching",
    "--spm-infill",
    "--reasoning-format",
    "--reasoning-budget",
    "--cache-reuse",
    "--override-kv",
    "--numa",
    "-dt",
    "--defrag-thold",
];

/// The flag a preset's `key` stands for: `-key` for llama-server's short forms (`c`,
/// `np`, `ngl`, ...), else `--key`.
pub fn flag_of_key(key: &str) -> String {
    let short = format!("-{key}");
    let known =
        LONG_FORMS.iter().any(|(s, _)| *s == short) || NO_OPS.iter().any(|(f, _)| *f == short);
    match key.len() == 1 || known {
        true => short,
        false => format!("--{key}"),
    }
}

/// Why the flags were refused.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("{0} is a llama-server flag that pocket serve does not implement")]
    NotImplemented(String),
    #[error(transparent)]
    Clap(#[from] clap::Error),
    #[error("{0}")]
    Invalid(String),
}

/// Parsed flags, and the no-op flags that were given (reported once at start).
pub struct Parsed {
    pub args: ServeArgs,
    pub ignored: Vec<String>,
}

/// Parses `pocket serve`'s arguments (without the program name and `serve`).
pub fn parse(raw: Vec<OsString>) -> Result<Parsed, ArgsError> {
    let mut argv: Vec<OsString> = vec!["pocket serve".into()];
    let mut ignored = Vec::new();
    let mut it = raw.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().into_owned();
        let name = s.split('=').next().unwrap_or("").to_string();
        if let Some(&(_, long)) = LONG_FORMS.iter().find(|(short, _)| *short == name) {
            argv.push(s.replacen(&name, long, 1).into());
        } else if let Some(&(flag, takes_value)) = NO_OPS.iter().find(|(f, _)| *f == name) {
            if takes_value && !s.contains('=') {
                it.next();
            }
            ignored.push(flag.to_string());
        } else if REFUSED.contains(&name.as_str()) {
            return Err(ArgsError::NotImplemented(name));
        } else {
            argv.push(a);
        }
    }
    let args = ServeArgs::try_parse_from(argv)?;
    if let Err(e) = args.placement.resolve() {
        return Err(ArgsError::Invalid(e.to_string()));
    }
    if args.parallel == 0 || args.batch_size == 0 {
        return Err(ArgsError::Invalid(
            "--parallel and --batch-size must be at least 1".into(),
        ));
    }
    if args.n_ctx_slot() < 8 {
        return Err(ArgsError::Invalid(format!(
            "-c {} over {} slots leaves {} tokens per slot (raise -c or lower -np)",
            args.ctx_size,
            args.parallel,
            args.n_ctx_slot()
        )));
    }
    if let Err(e) = args.spec.kind() {
        return Err(ArgsError::Invalid(e.to_string()));
    }
    Ok(Parsed { args, ignored })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, ArgsError> {
        parse(args.iter().map(OsString::from).collect())
    }

    #[test]
    fn llama_server_flags_parse_and_no_ops_are_reported() {
        let r = p(&[
            "-m",
            "x.gguf",
            "-np",
            "2",
            "-ngl",
            "99",
            "-c",
            "512",
            "--metrics",
        ])
        .unwrap();
        assert_eq!(r.args.parallel, 2);
        assert_eq!(r.args.ctx_size, 512);
        assert!(r.args.metrics);
        assert_eq!(r.ignored, ["-ngl"]);
        assert_eq!(r.args.port, 8080);
        assert_eq!(r.args.host, "127.0.0.1");
        let r = p(&["-m", "x.gguf", "-ctk", "q8_0", "--flash-attn=on"]).unwrap();
        assert_eq!(r.args.type_k, KvType::Q8_0);
        assert_eq!(r.ignored, ["--flash-attn"]);
    }

    #[test]
    fn unimplemented_flags_are_refused_by_name() {
        let e = p(&["-m", "x.gguf", "--mmproj", "a.gguf"]).err().unwrap();
        assert!(e.to_string().contains("--mmproj"), "{e}");
        let e = p(&["-m", "x.gguf", "--no-such-flag"]).err().unwrap();
        assert!(e.to_string().contains("--no-such-flag"), "{e}");
        assert!(p(&["-m", "x.gguf", "-np", "0"]).is_err());
    }

    #[test]
    fn kv_unified_gives_each_slot_the_whole_context() {
        let r = p(&["-m", "x.gguf", "-c", "256", "-np", "4"]).unwrap();
        assert_eq!(r.args.n_ctx_slot(), 64);
        let r = p(&["-m", "x.gguf", "-c", "256", "-np", "4", "--kv-unified"]).unwrap();
        assert_eq!(r.args.n_ctx_slot(), 256);
        let r = p(&["-m", "x.gguf", "-c", "256", "-np", "4", "-kvu"]).unwrap();
        assert_eq!(r.args.n_ctx_slot(), 256);
        // 40 tokens over 8 slots is too little, but not when each slot may use all 40.
        assert!(p(&["-m", "x.gguf", "-c", "40", "-np", "8"]).is_err());
        assert!(p(&["-m", "x.gguf", "-c", "40", "-np", "8", "-kvu"]).is_ok());
    }
}
