//! The comparator's and the CLI's error: one enum whose variants say which part failed,
//! most wrapping that part's own error type.

use std::path::PathBuf;

/// What went wrong, printed to the user as `error: ...`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--contention` named a CPU the process may not run on.
    #[error(transparent)]
    Contention(#[from] crate::contention::ContentionError),
    /// A command refused its flags.
    #[error(transparent)]
    Cli(#[from] crate::cli::CliError),
    /// Speculative decoding flags that do not go together, or a draft model that cannot
    /// draft for the target.
    #[error(transparent)]
    Spec(#[from] crate::cli::spec_args::SpecArgsError),
    /// A LoRA adapter that does not load or fit the model.
    #[error(transparent)]
    Lora(#[from] pocket_model::lora::LoraError),
    /// A llama.cpp tool is missing, failed, or printed something unexpected.
    #[error(transparent)]
    Tool(#[from] crate::llama_bench::ToolError),
    /// A measured child could not be run or measured.
    #[error(transparent)]
    Measure(#[from] crate::measure::MeasureError),
    /// llama-bench-format output that does not read.
    #[error(transparent)]
    BenchOutput(#[from] crate::bench_format::ParseError),
    /// MNN-LLM's bench driver printed something that makes no sample.
    #[error(transparent)]
    MnnOutput(#[from] crate::engine::MnnOutputError),
    /// A stored receipt that does not load or validate.
    #[error(transparent)]
    Receipt(#[from] crate::receipt::ReceiptError),
    /// `--profile`: a bad file name, or the profiler failed.
    #[error(transparent)]
    Profile(#[from] crate::profiling::ProfileError),
    /// A parity measurement (perplexity, KLD, greedy tokens) failed.
    #[error(transparent)]
    Parity(#[from] crate::parity::ParityError),
    /// plotters' drawing error, rendered (its type is generic over the drawing backend).
    #[error("plot: {0}")]
    Plot(String),
    /// Reading or writing a file or directory.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("model {} not found", .0.display())]
    ModelNotFound(PathBuf),
    /// A model file pocket cannot load.
    #[error("{}: {source}", path.display())]
    Load {
        path: PathBuf,
        source: pocket_model::ModelError,
    },
    /// A test whose depth and tokens do not fit the model's context.
    #[error(
        "{test} needs {positions} cache positions (depth + prompt + generated tokens), more \
         than {model}'s context of {n_ctx}: lower -d, -p or -n"
    )]
    BeyondContext {
        test: crate::engine::Test,
        positions: u64,
        model: String,
        n_ctx: usize,
    },
    /// An engine whose benchmark cannot run a test (ik_llama.cpp has no prompt at depth).
    #[error("{engine} cannot run {test}: {why}")]
    Unsupported {
        engine: &'static str,
        test: crate::engine::Test,
        why: &'static str,
    },
    /// A benchmark or comparison plan without repetitions.
    #[error("-r must be at least 1 (a plan needs at least one repetition)")]
    NoRepetitions,
    /// One engine's repetition of one test (`pocket on m.gguf pp512 t2`).
    #[error("{run}: {source}")]
    Engine { run: String, source: Box<Error> },
    /// `pocket serve` refused its flags.
    #[error(transparent)]
    ServeArgs(#[from] crate::serve::args::ArgsError),
    /// `pocket compare --serve`: a server or a request of the benchmark failed.
    #[error(transparent)]
    ServeBench(#[from] crate::serve_bench::ServeBenchError),
    /// `pocket serve` could not start.
    #[error("serve: {0}")]
    Serve(&'static str),
    #[error("router mode: {0}")]
    ServeModels(#[from] crate::serve::models::SourceError),
    #[error(transparent)]
    Model(#[from] pocket_model::ModelError),
    #[error(transparent)]
    Gguf(#[from] pocket_model::gguf::GgufError),
    #[error(transparent)]
    Chat(#[from] pocket_model::chat::ChatError),
    #[error(transparent)]
    LogitsFile(#[from] pocket_model::kld::LogitsFileError),
    #[error(transparent)]
    Synth(#[from] pocket_model::synth::SynthError),
    #[error(transparent)]
    Score(#[from] pocket_model::score::ScoreError),
    #[error("failed to init decision model: {0}")]
    Decision(#[from] pocket_model::decision::DecisionError),
    #[error(transparent)]
    Hellaswag(#[from] pocket_model::hellaswag::HellaswagError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// A file operation's error with the file's path.
    pub fn file(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::File { path, source }
    }

    /// plotters' error, whatever its backend.
    pub fn plot<E: std::fmt::Debug>(e: E) -> Error {
        Error::Plot(format!("{e:?}"))
    }
}

/// The comparator's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
