//! `pocket bench`: llama-bench's command line and method on pocket's engine.
//!
//!   pocket bench -m MODEL[,MODEL...] [-p 512[,128]] [-n 128] [-pg 512,128] [-r 5]
//!                [-t 2[,1]] [-o md|csv|json|jsonl|sql]
//!
//! Lists are comma-separated as in llama-bench; `-p 0` / `-n 0` drop those tests.

use std::path::PathBuf;

use clap::Args;

use super::CliResult;
use crate::bench_format::{self, Format};
use crate::engine::Test;
use crate::pocket_bench::{self, parse_list, parse_pg};

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
        for &t in &threads {
            for &test in &tests {
                let row = pocket_bench::bench_test(&loaded, test, t, args.reps)?;
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
    }
    print!("{}", bench_format::write(&rows, format));
    Ok(())
}
