//! `pocket compare --serve`: the serving benchmark, pocket serve against llama-server.
//!
//!   pocket compare --serve -m MODEL[,MODEL...] [-np 1,2,4,8] [-p 128] [-n 64] [-c 4096]
//!                  [-t 2] [-r 3] [--engines pocket,llama-server] [--results DIR]
//!                  [--workload repeat|prose] [--spec-type none|ngram-simple|draft-simple]
//!                  [-md DRAFT] [--spec-draft-n-max 8]
//!   pocket compare --serve -m MODEL --workload set|extraction,quoting,code,story
//!                  [--spec-type ngram-simple] [-n 64] [-r 3] ...
//!
//! Writes results/<date>-<machine>-serve/ (receipt.json, report.md, throughput.svg) and
//! prints the directory; progress goes to stderr. The speculative workload set writes
//! results/<date>-<machine>-spec-workloads/ (`spec_bench_cmd`).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use super::engine_args::positive;
use super::spec_args::{SpecArgsError, SpecKind};
use super::{CliError, CliResult};
use crate::serve_bench::server::Engine;
use crate::serve_bench::workloads::SpecWorkload;
use crate::serve_bench::{self, report, Plan, Runs, Workload};

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
    /// `-np`: concurrent streams, comma-separated; each level starts both servers with
    /// `-np` = streams [default: 1,2,4,8; the speculative set: 1].
    #[arg(long = "parallel", value_delimiter = ',', value_parser = positive_usize)]
    pub parallel: Option<Vec<usize>>,
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
    /// The prompt: `repeat` (one paragraph repeated: copy-heavy) or `prose`, cut to -p
    /// tokens; or the speculative set's requests (comma-separated, `set` for all):
    /// extraction, quoting, code, story.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "repeat")]
    pub workload: Vec<WorkloadArg>,
    /// Speculative decoding in both servers (llama-server's `--spec-type`): none,
    /// ngram-simple, or draft-simple (with -md) [default: draft-simple with -md, else none].
    #[arg(long = "spec-type", value_enum)]
    pub spec_type: Option<BenchSpec>,
    /// Draft model both servers get for draft-simple (`-md`, llama-server's flag).
    #[arg(long = "model-draft", value_name = "FNAME")]
    pub model_draft: Option<PathBuf>,
    /// Most drafted tokens per verify step in both servers (`--spec-draft-n-max`).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub spec_draft_n_max: usize,
    /// ngram-simple's lookup length in both servers (`--spec-ngram-simple-size-n`; the
    /// servers' default, 12, when not given).
    #[arg(long, value_name = "N")]
    pub spec_ngram_simple_size_n: Option<usize>,
}

/// A `--workload` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadArg {
    Repeat,
    Prose,
    Extraction,
    Quoting,
    Code,
    Story,
    /// extraction, quoting, code and story.
    Set,
}

/// What `--workload` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadMode {
    /// The concurrency benchmark with a prompt of -p tokens.
    Streams(Workload),
    /// The speculative-decoding workload set.
    SpecSet(Vec<SpecWorkload>),
}

/// Speculative decoding both servers run from the same flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchSpec {
    None,
    NgramSimple,
    /// Drafts from the model given with -md.
    DraftSimple,
}

impl ServeBenchArgs {
    /// `-t`, or the physical cores.
    pub fn threads(&self) -> u32 {
        self.threads
            .unwrap_or_else(crate::pocket_bench::default_threads)
    }

    pub fn mode(&self) -> Result<WorkloadMode, CliError> {
        let single = |w: WorkloadArg| match w {
            WorkloadArg::Repeat => Some(Workload::Repeat),
            WorkloadArg::Prose => Some(Workload::Prose),
            _ => None,
        };
        if let [w] = self.workload[..] {
            if let Some(w) = single(w) {
                return Ok(WorkloadMode::Streams(w));
            }
        }
        let mut set = Vec::new();
        for &w in &self.workload {
            let add: &[SpecWorkload] = match w {
                WorkloadArg::Repeat | WorkloadArg::Prose => return Err(CliError::WorkloadMix),
                WorkloadArg::Extraction => &[SpecWorkload::Extraction],
                WorkloadArg::Quoting => &[SpecWorkload::Quoting],
                WorkloadArg::Code => &[SpecWorkload::Code],
                WorkloadArg::Story => &[SpecWorkload::Story],
                WorkloadArg::Set => &SpecWorkload::ALL,
            };
            for a in add {
                if !set.contains(a) {
                    set.push(*a);
                }
            }
        }
        Ok(WorkloadMode::SpecSet(set))
    }

    /// The part of a plan both serving benchmarks share (models checked, engines deduplicated).
    pub fn runs(&self) -> Result<Runs, crate::Error> {
        let llama_server = checked_paths(self)?;
        let mut engines = self.engines.clone();
        engines.dedup();
        Ok(Runs {
            models: self.model.clone(),
            engines,
            pocket_exe: std::env::current_exe()?,
            llama_server,
            n_predict: self.n_predict,
            ctx_size: self.ctx_size,
            threads: self.threads(),
            repetitions: self.reps,
        })
    }

    /// The speculative decoding flags both servers get (llama-server's spelling, which
    /// `pocket serve` shares); refuses a draft model without draft-simple and the reverse.
    pub fn server_args(&self) -> Result<Vec<String>, SpecArgsError> {
        let kind = match (self.spec_type, &self.model_draft) {
            (None, Some(_)) => BenchSpec::DraftSimple,
            (None, None) => BenchSpec::None,
            (Some(BenchSpec::DraftSimple), None) => return Err(SpecArgsError::NoDraftModel),
            (Some(BenchSpec::None), Some(_)) => {
                return Err(SpecArgsError::UnusedDraftModel(SpecKind::None))
            }
            (Some(BenchSpec::NgramSimple), Some(_)) => {
                return Err(SpecArgsError::UnusedDraftModel(SpecKind::NgramSimple))
            }
            (Some(k), _) => k,
        };
        let n_max = [
            "--spec-draft-n-max".into(),
            self.spec_draft_n_max.to_string(),
        ];
        Ok(match (kind, &self.model_draft) {
            (BenchSpec::None, _) => Vec::new(),
            (BenchSpec::NgramSimple, _) => {
                let size_n = self.spec_ngram_simple_size_n.iter();
                let size_n =
                    size_n.flat_map(|n| ["--spec-ngram-simple-size-n".into(), n.to_string()]);
                ["--spec-type".into(), "ngram-simple".into()]
                    .into_iter()
                    .chain(n_max)
                    .chain(size_n)
                    .collect()
            }
            (BenchSpec::DraftSimple, draft) => {
                let draft = draft.as_ref().ok_or(SpecArgsError::NoDraftModel)?;
                [
                    "--spec-type".into(),
                    "draft-simple".into(),
                    "-md".into(),
                    draft.display().to_string(),
                ]
                .into_iter()
                .chain(n_max)
                .collect()
            }
        })
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

/// Parses `pocket compare --serve ...` (llama.cpp's `-np` and `-md` spelled as clap's
/// `--parallel` and `--model-draft`: clap's short flags are one letter).
pub fn parse(args: Vec<OsString>) -> ServeBenchArgs {
    let rest = args
        .into_iter()
        .skip(2)
        .filter(|a| a != "--serve")
        .map(|a| match a.to_str() {
            Some("-np") => "--parallel".into(),
            Some("-md") => "--model-draft".into(),
            _ => a,
        });
    ServeBenchArgs::parse_from(
        std::iter::once(OsString::from("pocket compare --serve")).chain(rest),
    )
}

pub fn run(args: ServeBenchArgs) -> CliResult {
    let workload = match args.mode()? {
        WorkloadMode::SpecSet(set) => return super::spec_bench_cmd::run(&args, set),
        WorkloadMode::Streams(w) => w,
    };
    let server_args = args.server_args()?;
    let plan = Plan {
        runs: args.runs()?,
        streams: args.parallel.clone().unwrap_or_else(|| vec![1, 2, 4, 8]),
        n_prompt: args.n_prompt,
        workload,
        server_args,
    };
    let load_before = serve_bench::load_average();
    let models = serve_bench::run(&plan)?;
    let receipt = serve_bench::receipt_of(&plan, models, load_before);
    let dir = report::write_results_dir(&receipt, &args.results)?;
    eprint!("{}", report::report_md(&receipt));
    println!("{}", dir.display());
    Ok(())
}

/// Refuses a missing model file; llama-server's binary (the reference build's unless
/// `--llama-server` names one; none when it is not measured).
fn checked_paths(args: &ServeBenchArgs) -> Result<PathBuf, crate::Error> {
    for m in args.model.iter().chain(&args.model_draft) {
        if !m.is_file() {
            return Err(crate::Error::ModelNotFound(m.clone()));
        }
    }
    Ok(match &args.llama_server {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[&str]) -> ServeBenchArgs {
        let mut v: Vec<OsString> = ["pocket", "compare", "--serve", "-m", "t.gguf"]
            .map(OsString::from)
            .into();
        v.extend(flags.iter().map(OsString::from));
        parse(v)
    }

    #[test]
    fn draft_simple_passes_the_draft_model_to_both_servers() {
        let want = "--spec-type draft-simple -md d.gguf --spec-draft-n-max 4";
        for flags in [
            &["--spec-type", "draft-simple", "-md", "d.gguf"][..],
            &["-md", "d.gguf"][..], // -md alone means draft-simple, as in llama-server
        ] {
            let mut f = flags.to_vec();
            f.extend(["--spec-draft-n-max", "4"]);
            assert_eq!(args(&f).server_args().unwrap().join(" "), want);
        }
        assert_eq!(
            args(&["--spec-type", "ngram-simple"])
                .server_args()
                .unwrap()
                .join(" "),
            "--spec-type ngram-simple --spec-draft-n-max 8"
        );
        assert!(args(&[]).server_args().unwrap().is_empty());
    }

    #[test]
    fn a_draft_model_without_draft_simple_is_refused_and_the_reverse() {
        assert!(matches!(
            args(&["--spec-type", "draft-simple"]).server_args(),
            Err(SpecArgsError::NoDraftModel)
        ));
        assert!(matches!(
            args(&["--spec-type", "ngram-simple", "-md", "d.gguf"]).server_args(),
            Err(SpecArgsError::UnusedDraftModel(SpecKind::NgramSimple))
        ));
    }

    #[test]
    fn workloads_select_the_benchmark() {
        let mode = |w: &str| args(&["--workload", w]).mode();
        assert_eq!(
            args(&[]).mode().unwrap(),
            WorkloadMode::Streams(Workload::Repeat)
        );
        assert_eq!(
            mode("prose").unwrap(),
            WorkloadMode::Streams(Workload::Prose)
        );
        assert_eq!(
            mode("set").unwrap(),
            WorkloadMode::SpecSet(SpecWorkload::ALL.to_vec())
        );
        assert_eq!(
            mode("code,quoting,code").unwrap(),
            WorkloadMode::SpecSet(vec![SpecWorkload::Code, SpecWorkload::Quoting])
        );
        assert!(matches!(mode("repeat,code"), Err(CliError::WorkloadMix)));
        assert!(matches!(mode("repeat,prose"), Err(CliError::WorkloadMix)));
    }
}
