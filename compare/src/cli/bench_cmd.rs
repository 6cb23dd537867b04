//! `pocket bench`: llama-bench's command line and method on pocket's engine.
//!
//!   pocket bench -m MODEL[,MODEL...] [-p 512[,128]] [-n 128] [-pg 512,128] [-r 5]
//!                [-t 2[,1]] [-o md|csv|json|jsonl|sql]
//!                [--cpu-mask HEX] [--cpu-strict 0|1] [--poll 0..100]
//!                [--breakdown] [--profile FILE.svg|FILE.pb]
//!
//! Lists are comma-separated as in llama-bench; `-p 0` / `-n 0` drop those tests.

use std::path::PathBuf;

use clap::Args;

use super::CliResult;
use crate::bench_format::{self, Format};
use crate::engine::Test;
use crate::pocket_bench::{self, parse_list, parse_pg, BenchOptions};
use pocket_model::Placement;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Model file(s); repeat -m or separate with commas.
    #[arg(short, long = "model", required = true, value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    /// Prompt lengths (pp tests), comma-separated; 0 for none.
    #[arg(short = 'p', long = "n-prompt", default_value = "512")]
    pub n_prompt: String,
    /// Generation lengths (tg tests), comma-separated; 0 for none.
    #[arg(short = 'n', long = "n-gen", default_value = "128")]
    pub n_gen: String,
    /// Prompt + generation tests `pp,tg` (written `-pg` as in llama-bench); repeatable.
    #[arg(long = "pg", value_name = "PP,TG")]
    pub pg: Vec<String>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: u32,
    /// Thread counts, comma-separated (default: physical cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<String>,
    /// Output format: md, csv, json, jsonl, sql.
    #[arg(short = 'o', long = "output", default_value = "md")]
    pub output: String,
    /// CPUs the pool may use, a hexadecimal mask as llama-bench's (`0x3`); default: the
    /// process's CPUs, one thread pinned per core.
    #[arg(short = 'C', long = "cpu-mask", value_name = "HEX")]
    pub cpu_mask: Option<String>,
    /// 1: each thread pinned to its own CPU of the mask, in order (llama-bench's
    /// --cpu-strict); 0: threads float over the mask.
    #[arg(long = "cpu-strict", value_name = "0|1", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub cpu_strict: u8,
    /// How long idle pool threads spin before parking, 0..100 (llama-bench's --poll):
    /// 0 parks at once, 50 spins 2^15 rounds, 100 twice as long.
    #[arg(long = "poll", value_name = "0..100", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub poll: u32,
    /// Per-operation time, weights GB/s (decode) and GOP/s (prefill) of the timed runs,
    /// measured in the engine; printed as a table, and a `breakdown` field in json/jsonl.
    #[arg(long)]
    pub breakdown: bool,
    /// Sampling CPU profile of the benchmark (after model load): FILE.svg for a
    /// flamegraph, FILE.pb for the pprof protobuf (`go tool pprof`).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

impl BenchArgs {
    /// The placement and accounting options of the run (bandwidth not yet probed).
    pub fn options(&self) -> crate::Result<BenchOptions> {
        let mask = match &self.cpu_mask {
            Some(m) => Placement::parse_mask(m)?,
            None => 0,
        };
        Ok(BenchOptions {
            placement: Placement {
                cpu_mask: mask,
                strict: self.cpu_strict == 1,
                poll: self.poll,
            },
            cpu_mask: self.cpu_mask.clone().unwrap_or_else(|| "0x0".into()),
            breakdown: self.breakdown,
            bandwidth: None,
        })
    }
}

/// The tests llama-bench would run for these lists: pp, then tg, then pp+tg.
pub fn tests_of(args: &BenchArgs) -> crate::Result<Vec<Test>> {
    let mut tests = Vec::new();
    for p in parse_list("-p", &args.n_prompt, true)? {
        if p > 0 {
            tests.push(Test::pp(p));
        }
    }
    for n in parse_list("-n", &args.n_gen, true)? {
        if n > 0 {
            tests.push(Test::tg(n));
        }
    }
    for pg in &args.pg {
        tests.push(parse_pg(pg)?);
    }
    if tests.is_empty() {
        return Err("no tests: every -p, -n and -pg value is 0".into());
    }
    Ok(tests)
}

pub fn run(args: BenchArgs) -> CliResult {
    let format: Format = args.output.parse()?;
    if args.reps == 0 {
        return Err("-r must be at least 1".into());
    }
    let tests = tests_of(&args)?;
    let opts = args.options()?;
    if let Some(p) = &args.profile {
        crate::profiling::kind_of(p)?;
        if args.model.len() > 1 {
            return Err("--profile takes one model (one profile file per run)".into());
        }
    }
    let threads = match &args.threads {
        Some(t) => parse_list("-t", t, false)?,
        None => vec![pocket_bench::default_threads()],
    };
    for m in &args.model {
        if !m.is_file() {
            return Err(format!("model {} not found", m.display()).into());
        }
    }
    let mut rows = Vec::new();
    for m in &args.model {
        let loaded = pocket_bench::load(m)?;
        let profile = match &args.profile {
            Some(p) => Some(crate::profiling::Profile::start(p)?),
            None => None,
        };
        for &t in &threads {
            for &test in &tests {
                let row = pocket_bench::bench_test_with(&loaded, test, t, args.reps, &opts)?;
                if format == Format::Md {
                    eprintln!(
                        "{} {} t{}: {:.2} ± {:.2} t/s, load {:.0} ms, peak RSS {:.1} MiB",
                        m.display(),
                        test,
                        t,
                        row.avg_ts,
                        row.stddev_ts,
                        loaded.load_ms,
                        pocket_bench::self_peak_rss() as f64 / (1 << 20) as f64
                    );
                }
                rows.push(row);
            }
        }
        if let (Some(p), Some(path)) = (profile, &args.profile) {
            let n = p.finish()?;
            eprintln!("profile: {n} samples -> {}", path.display());
        }
    }
    // The read-bandwidth probe (a 512 MiB buffer) runs after the timed runs, so that it
    // neither disturbs them nor lands in their peak RSS.
    let mut tables = String::new();
    if opts.breakdown {
        let t = threads.iter().copied().max().unwrap_or(1);
        let bw = crate::bandwidth::probe(crate::bandwidth::DEFAULT_BYTES, t);
        eprintln!(
            "read bandwidth {:.1} GB/s (1 thread), {:.1} GB/s ({} threads)",
            bw.single_gbs, bw.multi_gbs, bw.threads
        );
        for row in &mut rows {
            let Some(b) = row.extra.get_mut("breakdown") else {
                continue;
            };
            let mut r: crate::breakdown::Report = serde_json::from_value(b.clone())?;
            r.read_bandwidth_gbs = Some(bw.for_threads(row.n_threads as u32));
            *b = serde_json::to_value(&r)?;
            let name = std::path::Path::new(&row.model_filename)
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            tables.push_str(&r.table(&format!("{name} {} t{}", row.test_name(), row.n_threads)));
        }
    }
    print!("{}", bench_format::write(&rows, format));
    // The breakdown tables follow md on stdout; with a machine format they go to stderr.
    if !tables.is_empty() {
        if format == Format::Md {
            print!("{tables}");
        } else {
            eprint!("{tables}");
        }
    }
    Ok(())
}
