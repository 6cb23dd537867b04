//! The `pocket` command line: one clap subcommand per job, each in its own module.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod bench_cmd;
mod chat_cmd;
pub mod compare_cmd;
mod compare_run;
pub mod engine_args;
pub mod gen_args;
mod inspect_cmd;
pub mod perplexity_cmd;
mod run_cmd;
mod run_probs;
mod score_cmd;
mod serve_bench_cmd;
pub mod spec_args;
mod spec_bench_cmd;
mod synth_cmd;

#[derive(Parser)]
#[command(
    name = "pocket",
    version,
    about = "CPU inference engine for small GGUF models, and its llama.cpp comparator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a GGUF file's metadata, tensors and totals (in the spirit of gguf-dump).
    Inspect(inspect_cmd::InspectArgs),
    /// Write a GGUF of a published shape (or a custom one) with seeded random weights.
    Synth(synth_cmd::SynthArgs),
    /// llama-bench's tests (pp, tg, pp+tg) on pocket, printed as llama-bench rows.
    Bench(bench_cmd::BenchArgs),
    /// Compare pocket with llama.cpp (speed, memory, parity), or work on stored receipts: trend page, regression gate, results directory; `--serve`: pocket serve against llama-server under concurrent streams (`pocket compare --serve --help`).
    Compare(compare_cmd::CompareArgs),
    /// Generate text from a prompt (greedy at --temp 0), with timings on stderr.
    Run(run_cmd::RunArgs),
    /// Interactive multi-turn chat with the model's chat template, reusing the KV cache across turns.
    Chat(chat_cmd::ChatArgs),
    /// Perplexity of a text file, by llama-perplexity's method.
    Perplexity(perplexity_cmd::PerplexityArgs),
    /// Probability of each candidate continuation of a prompt (`--choices A,B,C`), normalized over them.
    Score(score_cmd::ScoreArgs),
    /// HTTP server with llama-server's and OpenAI's API (`pocket serve --help`).
    #[command(disable_help_flag = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

pub fn main() -> ExitCode {
    // Started by `measure::run_measured` as the wrapper of a measured child.
    if let Some(code) = crate::measure::wrapper_main_if_requested() {
        return code;
    }
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if serve_bench_cmd::requested(&raw) {
        return exit_code(serve_bench_cmd::run(serve_bench_cmd::parse(raw)));
    }
    // llama.cpp's multi-letter short flags (`-pg`, `-ctk`, `-ctv`, `-sys`) as clap's long ones.
    let args = std::env::args_os().map(|a| match gen_args::long_form(&a) {
        Some(long) => long.into(),
        None => a,
    });
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Inspect(args) => inspect_cmd::run(args),
        Command::Synth(args) => synth_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Compare(args) => compare_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::Chat(args) => chat_cmd::run(args),
        Command::Perplexity(args) => perplexity_cmd::run(args),
        Command::Score(args) => score_cmd::run(args),
        Command::Serve { args } => crate::serve::run(args),
    };
    exit_code(result)
}

fn exit_code(result: CliResult) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Errors a subcommand reports to the user (printed as `error: ...`, exit status 1).
pub type CliResult = Result<(), crate::Error>;

/// What a command refuses before it starts: values clap cannot check alone.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no tests: every -p, -n and -pg value is 0")]
    NoTests,
    #[error("--profile takes one model (one profile file per run)")]
    ProfileOneModel,
    #[error("--interleave times repetitions alone: without --profile or --breakdown")]
    InterleaveAlone,
    #[error("-n must be at least 1")]
    NoReplyTokens,
    #[error("-n {n_predict} leaves no room for the conversation in the context of {n_ctx} (raise -c or lower -n)")]
    NoRoomForChat { n_predict: usize, n_ctx: usize },
    #[error("--n-probs cannot be used with speculative decoding")]
    NProbsWithSpeculation,
    #[error("the prompt tokenizes to nothing")]
    EmptyPrompt,
    #[error("cannot read the prompt file {}: {e}", path.display())]
    PromptFile {
        path: std::path::PathBuf,
        e: std::io::Error,
    },
    #[error("the prompt ({prompt} tokens) plus {n_predict} to generate does not fit in the context of {n_ctx} (raise -c)")]
    PromptTooLong {
        prompt: usize,
        n_predict: usize,
        n_ctx: usize,
    },
    #[error("--fail-below {0} is not a positive number")]
    BadFraction(f64),
    #[error("{count} speedup regression(s) against {}", baseline.display())]
    Regressions {
        count: usize,
        baseline: std::path::PathBuf,
    },
    #[error(
        "--workload takes repeat or prose alone, or the speculative set's workloads \
         (extraction, quoting, code, story, or set for all four), not both"
    )]
    WorkloadMix,
    #[error("--workload set measures one stream: -np must be 1, not {0:?}")]
    SpecSetStreams(Vec<usize>),
    #[error("--workload set compares speculation with none: --spec-type none measures nothing")]
    SpecSetWithoutSpec,
    #[error("--q4-1-group must be 32 or 64, not {0}")]
    Q4_1Group(u32),
    #[error("cannot read the base vocabulary {}: {source} (fetch it with bash compare/provision-llama.sh, or pass --vocab-from)", path.display())]
    BaseVocab {
        path: std::path::PathBuf,
        source: pocket_model::gguf::GgufError,
    },
    #[error(transparent)]
    CpuClass(#[from] pocket_model::ClassError),
    #[error(transparent)]
    Truncate(#[from] pocket_model::synth::truncate::TruncateError),
    #[error("cannot {action} {}: {source}", path.display())]
    File {
        action: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}
