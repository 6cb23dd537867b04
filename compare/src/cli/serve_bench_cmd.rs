//! `pocket compare --serve`: the serving benchmark, pocket serve against llama-server.
//!
//!   pocket compare --serve -m MODEL[,MODEL...] [-np 1,2,4,8] [-p 128] [-n 64] [-c 4096]
//!                  [-t 2] [-r 3] [--engines pocket,llama-server] [--results DIR]
//!
//! Writes results/<date>-<machine>-serve/ (receipt.json, report.md, throughput.svg) and
//! prints the directory; progress goes to stderr.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use super::engine_args::positive;
use super::CliResult;
use crate::serve_bench::server::Engine;
use crate::serve_bench::{self, report, Plan, Workload};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "pocket compare --serve",
    about = "Serving benchmark: time to first token and aggregate tokens/s of pocket serve \
             and llama-server at 1, 2, 4, 8 concurrent streams"
)]
pub struct ServeBenchArgs {
    /// Model file(s); repeat -m or separate with commas.
    #[arg(short, long = "model", required = true, value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    /// `-np`: concurrent streams, comma-separated; each level starts both servers with `-np` = streams.
    #[arg(long = "parallel", value_delimiter = ',', default_value = "1,2,4,8", value_parser = positive_usize)]
    pub parallel: Vec<usize>,
    /// Prompt tokens per request (the same token ids for both servers).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128, value_parser = positive_usize)]
    pub n_prompt: usize,
    /// Tokens generated per request (greedy, ignore_eos).
    #[arg(short = 'n', long = "n-predict", default_value_t = 64, value_parser = positive_usize)]
    pub n_predict: usize,
    /// Context of both servers (split over the slots by both, as llama-server does).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096, value_parser = positive_usize)]
    pub ctx_size: usize,
    /// Threads of both servers (default: physical cores).
    #[arg(short = 't', long = "threads", value_parser = positive)]
    pub threads: Option<u32>,
    /// Batches of concurrent requests per level and engine.
    #[arg(short = 'r', long = "repetitions", default_value = "3", value_parser = positive)]
    pub reps: u32,
    /// The servers to measure.
    #[arg(long, value_delimiter = ',', default_value = "pocket,llama-server")]
    pub engines: Vec<Engine>,
    /// llama-server's binary (default: the reference build in the pocket cache).
    #[arg(long, value_name = "PATH")]
    pub llama_server: Option<PathBuf>,
    /// Where the results directory goes.
    #[arg(long, value_name = "DIR", default_value = "results")]
    pub results: PathBuf,
    /// The prompt's text: `repeat` (one paragraph repeated: copy-heavy) or `prose`.
    #[arg(long, value_enum, default_value = "repeat")]
    pub workload: Workload,
    /// Speculative decoding in both servers (llama-server's `--spec-type`): none or
    /// ngram-simple.
    #[arg(long = "spec-type", value_enum, default_value = "none")]
    pub spec_type: BenchSpec,
    /// Most drafted tokens per verify step in both servers (`--spec-draft-n-max`).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub spec_draft_n_max: usize,
}

/// Speculative decoding both servers can run from flags alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchSpec {
    None,
    NgramSimple,
}

impl ServeBenchArgs {
    /// The speculative decoding flags both servers get.
    pub fn server_args(&self) -> Vec<String> {
        match self.spec_type {
            BenchSpec::None => Vec::new(),
            BenchSpec::NgramSimple => vec![
                "--spec-type".into(),
                "ngram-simple".into(),
                "--spec-draft-n-max".into(),
                self.spec_draft_n_max.to_string(),
            ],
        }
    }
}

fn positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s} is not a positive whole number")),
    }
}

/// Whether `pocket compare ARGS` asks for this mode.
pub fn requested(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|a| a == "compare") && args.iter().any(|a| a == "--serve")
}

/// Parses `pocket compare --serve ...` (llama.cpp's `-np` spelled as clap's `--parallel`).
pub fn parse(args: Vec<OsString>) -> ServeBenchArgs {
    let rest = args
        .into_iter()
        .skip(2)
        .filter(|a| a != "--serve")
        .map(|a| if a == "-np" { "--parallel".into() } else { a });
    ServeBenchArgs::parse_from(
        std::iter::once(OsString::from("pocket compare --serve")).chain(rest),
    )
}

pub fn run(args: ServeBenchArgs) -> CliResult {
    for m in &args.model {
        if !m.is_file() {
            return Err(crate::Error::ModelNotFound(m.clone()));
        }
    }
    let llama_server = match &args.llama_server {
        Some(p) => p.clone(),
        None if args.engines.contains(&Engine::LlamaServer) => {
            // Only the reference build has llama-server (no llama-bench needed here).
            let cache = crate::llama_bench::cache_dir();
            let tools = crate::llama_bench::LlamaTools {
                native_dir: cache.join("llama.cpp-native"),
                reference_dir: cache.join("llama.cpp-build"),
            };
            tools.reference_tool("llama-server")?
        }
        None => PathBuf::new(),
    };
    let mut engines = args.engines.clone();
    engines.dedup();
    let plan = Plan {
        models: args.model.clone(),
        streams: args.parallel.clone(),
        n_prompt: args.n_prompt,
        n_predict: args.n_predict,
        ctx_size: args.ctx_size,
        threads: args
            .threads
            .unwrap_or_else(crate::pocket_bench::default_threads),
        repetitions: args.reps,
        engines,
        workload: args.workload,
        server_args: args.server_args(),
        pocket_exe: std::env::current_exe()?,
        llama_server,
    };
    let load_before = serve_bench::load_average();
    let models = serve_bench::run(&plan)?;
    let receipt = serve_bench::receipt_of(&plan, models, load_before);
    let dir = report::write_results_dir(&receipt, &args.results)?;
    eprint!("{}", report::report_md(&receipt));
    println!("{}", dir.display());
    Ok(())
}
