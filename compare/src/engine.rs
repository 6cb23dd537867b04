//! The seam between the comparator and an engine: one [`Engine::bench`] call is one
//! repetition of one test in a fresh process, measured the same way for every engine.
//! pocket's (`pocket bench`) implementation is [`Pocket`]; the engines it is compared
//! against ([`EngineKind`]) also implement [`Reference`]: llama.cpp ([`LlamaCpp`]),
//! ik_llama.cpp ([`IkLlamaCpp`]) and MNN-LLM ([`Mnn`]).

mod ik_llama;
mod kind;
mod mnn;

pub use ik_llama::{parse_json as parse_ik_json, IkLlamaCpp};
pub use kind::{EngineInfo, EngineKind, Reference};
pub use mnn::{parse_json as parse_mnn_json, Mnn, MnnOutputError, MnnRun};

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bench_format::{parse_test_name, Format};
use crate::bench_row::BenchRow;
use crate::llama_bench::{
    self, run_tool, BenchArgs, LlamaTools, ProcessStats, Provisioned, ToolError,
};
use crate::Result;
use pocket_model::Placement;

/// A llama-bench test: `pp<n>` (prompt processing), `tg<n>` (generation) or
/// `pp<p>+tg<g>`, run after `n_depth` tokens are in the cache (llama-bench's `-d`; 0: from
/// an empty cache), named as llama-bench's md table names it (`tg128 @ d4096`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Test {
    pub n_prompt: u32,
    pub n_gen: u32,
    /// Tokens already in the cache when the timed run starts (filled untimed).
    pub n_depth: u32,
}

impl Test {
    pub fn pp(n: u32) -> Test {
        Test {
            n_prompt: n,
            n_gen: 0,
            n_depth: 0,
        }
    }

    pub fn tg(n: u32) -> Test {
        Test {
            n_prompt: 0,
            n_gen: n,
            n_depth: 0,
        }
    }

    /// `pp<p>+tg<g>`.
    pub fn pg(n_prompt: u32, n_gen: u32) -> Test {
        Test {
            n_prompt,
            n_gen,
            n_depth: 0,
        }
    }

    /// The same test after `depth` tokens in the cache.
    pub fn at_depth(self, depth: u32) -> Test {
        Test {
            n_depth: depth,
            ..self
        }
    }

    /// The test from an empty cache.
    pub fn without_depth(self) -> Test {
        self.at_depth(0)
    }

    /// Cache positions the test uses: the depth, the prompt and the generated tokens.
    pub fn positions(&self) -> u64 {
        u64::from(self.n_depth) + u64::from(self.n_prompt) + u64::from(self.n_gen)
    }

    /// Generation from an empty cache: its t/s is bound by reading the weights once per
    /// token (at depth, each token also reads the cache, so the weights alone bound
    /// nothing useful).
    pub fn is_decode(&self) -> bool {
        self.n_prompt == 0 && self.n_gen > 0 && self.n_depth == 0
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.n_prompt, self.n_gen) {
            (p, 0) => write!(f, "pp{p}")?,
            (0, g) => write!(f, "tg{g}")?,
            (p, g) => write!(f, "pp{p}+tg{g}")?,
        }
        if self.n_depth > 0 {
            write!(f, " @ d{}", self.n_depth)?;
        }
        Ok(())
    }
}

impl From<Test> for String {
    fn from(t: Test) -> String {
        t.to_string()
    }
}

impl TryFrom<String> for Test {
    type Error = BadTest;
    fn try_from(s: String) -> std::result::Result<Test, BadTest> {
        s.parse()
    }
}

/// A test name that is not `pp<n>`, `tg<n>` or `pp<p>+tg<g>` (each with an optional
/// ` @ d<depth>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad test `{0}` (pp<n>, tg<n> or pp<p>+tg<g>, optionally with ` @ d<depth>`)")]
pub struct BadTest(String);

impl FromStr for Test {
    type Err = BadTest;
    fn from_str(s: &str) -> std::result::Result<Test, BadTest> {
        match parse_test_name(s) {
            Some((p, g, d)) if p >= 0 && g >= 0 && d >= 0 && p + g > 0 => {
                let n = |v: i64| u32::try_from(v).map_err(|_| BadTest(s.to_string()));
                Ok(Test {
                    n_prompt: n(p)?,
                    n_gen: n(g)?,
                    n_depth: n(d)?,
                })
            }
            _ => Err(BadTest(s.to_string())),
        }
    }
}

/// One repetition of one test by one engine.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Tokens per second of the timed run.
    pub ts: f64,
    /// Peak resident set of the engine's process, in bytes.
    pub peak_rss_bytes: u64,
    /// The process's wall time, spawn to exit, in ms.
    pub wall_ms: f64,
    /// Wall time outside the timed run (model load, warm-up, teardown), in ms.
    pub setup_ms: f64,
    /// The engine's llama-bench row for the repetition.
    pub row: BenchRow,
}

/// An engine the comparator can measure.
pub trait Engine {
    /// A short name for reports (`llama.cpp`, `pocket`).
    fn name(&self) -> &str;
    /// One repetition of `test` on `model` with `threads` threads, in a fresh process.
    fn bench(&self, model: &Path, test: Test, threads: u32) -> Result<Sample>;
}

/// llama.cpp, through its `llama-bench` (one process per repetition, `-r 1 -o json`).
#[derive(Debug, Clone)]
pub struct LlamaCpp {
    pub tools: LlamaTools,
    /// The placement every run gets (`--cpu-mask 0x3 --cpu-strict 1 --poll 0`); `None`:
    /// llama-bench's defaults.
    pub placement: Option<Placement>,
}

impl LlamaCpp {
    /// llama.cpp from the pocket cache (an error naming the provisioning command if absent).
    pub fn locate() -> Result<LlamaCpp> {
        Ok(LlamaCpp {
            tools: LlamaTools::locate()?,
            placement: None,
        })
    }
}

impl Engine for LlamaCpp {
    fn name(&self) -> &str {
        EngineKind::LlamaCpp.name()
    }

    fn bench(&self, model: &Path, test: Test, threads: u32) -> Result<Sample> {
        let (n_prompt, n_gen, mut extra) = test_args(test);
        extra.extend(self.placement.iter().flat_map(crate::placement::flags));
        let args = BenchArgs {
            model: model.to_path_buf(),
            threads,
            n_prompt,
            n_gen,
            reps: 1,
            format: Format::Json,
            extra,
        };
        let run = llama_bench::run(&self.tools, &args)?;
        sample_of("llama-bench", test, run.rows, &run.stats)
    }
}

impl Reference for LlamaCpp {
    fn kind(&self) -> EngineKind {
        EngineKind::LlamaCpp
    }

    fn info(&self) -> EngineInfo {
        EngineInfo {
            build: self.tools.build_info().unwrap_or_else(|| "unknown".into()),
            options: self
                .placement
                .iter()
                .flat_map(crate::placement::flags)
                .collect(),
        }
    }
}

/// llama-bench's `-p`, `-n` and further flags for `test`: `pp<p>+tg<g>` is `-p 0 -n 0
/// -pg p,g` (llama-bench's own combined test), and a depth is `-d <depth>`.
pub(crate) fn test_args(test: Test) -> (u32, u32, Vec<String>) {
    let mut extra = Vec::new();
    let (n_prompt, n_gen) = if test.n_prompt > 0 && test.n_gen > 0 {
        let pg = format!("{},{}", test.n_prompt, test.n_gen);
        extra.extend(["-pg".into(), pg]);
        (0, 0)
    } else {
        (test.n_prompt, test.n_gen)
    };
    if test.n_depth > 0 {
        extra.extend(["-d".into(), test.n_depth.to_string()]);
    }
    (n_prompt, n_gen, extra)
}

/// The sample of a run of `tool` that printed `rows`: one row, of `test`.
pub(crate) fn sample_of(
    tool: &'static str,
    test: Test,
    rows: Vec<BenchRow>,
    stats: &ProcessStats,
) -> Result<Sample> {
    let [row] = <[BenchRow; 1]>::try_from(rows).map_err(|rows| ToolError::RowCount {
        tool,
        rows: rows.len(),
    })?;
    check_row(tool, test, &row)?;
    Ok(sample_from(row, stats))
}

/// Refuses a row of another test than `test`: an engine that ignored a flag (`-d`, say)
/// would otherwise be compared on a test pocket did not run.
fn check_row(tool: &'static str, test: Test, row: &BenchRow) -> Result<(), ToolError> {
    let asked = [test.n_prompt, test.n_gen, test.n_depth].map(i64::from);
    if [row.n_prompt, row.n_gen, row.n_depth] != asked {
        return Err(ToolError::WrongTest {
            tool,
            asked: test.to_string(),
            got: row.test_name(),
        });
    }
    Ok(())
}

/// A repetition's sample from its one row and its process's measurements.
fn sample_from(row: BenchRow, stats: &ProcessStats) -> Sample {
    let timed_ms = row.samples_ns.iter().sum::<u64>() as f64 / 1e6;
    let wall_ms = stats.wall.as_secs_f64() * 1e3;
    Sample {
        ts: row.avg_ts,
        peak_rss_bytes: stats.peak_rss_bytes,
        wall_ms,
        setup_ms: (wall_ms - timed_ms).max(0.0),
        row,
    }
}

/// pocket, through its own `pocket bench` (one process per repetition, `-r 1 -o json`),
/// measured from outside exactly as llama-bench is.
#[derive(Debug, Clone)]
pub struct Pocket {
    /// The `pocket` binary.
    pub exe: std::path::PathBuf,
    /// The placement every run gets (the same as llama-bench's); `None`: the defaults.
    pub placement: Option<Placement>,
}

impl Pocket {
    /// The running `pocket` binary.
    pub fn current() -> Result<Pocket> {
        let exe = std::env::current_exe().map_err(ToolError::NoPocketBinary)?;
        Ok(Pocket {
            exe,
            placement: None,
        })
    }

    /// The command line of one repetition.
    pub fn args(model: &Path, test: Test, threads: u32) -> Vec<String> {
        let mut args: Vec<String> = vec!["bench".into(), "-m".into(), model.display().to_string()];
        if test.n_prompt > 0 && test.n_gen > 0 {
            args.extend([
                "-p".into(),
                "0".into(),
                "-n".into(),
                "0".into(),
                "-pg".into(),
                format!("{},{}", test.n_prompt, test.n_gen),
            ]);
        } else {
            args.extend([
                "-p".into(),
                test.n_prompt.to_string(),
                "-n".into(),
                test.n_gen.to_string(),
            ]);
        }
        if test.n_depth > 0 {
            args.extend(["-d".into(), test.n_depth.to_string()]);
        }
        args.extend([
            "-t".into(),
            threads.to_string(),
            "-r".into(),
            "1".into(),
            "-o".into(),
            "json".into(),
        ]);
        args
    }
}

impl Engine for Pocket {
    fn name(&self) -> &str {
        "pocket"
    }

    fn bench(&self, model: &Path, test: Test, threads: u32) -> Result<Sample> {
        if !model.is_file() {
            return Err(crate::Error::ModelNotFound(model.to_path_buf()));
        }
        let mut args = Pocket::args(model, test, threads);
        args.extend(self.placement.iter().flat_map(crate::placement::flags));
        let stats = run_tool(&self.exe, &self.exe.display().to_string(), &args)?;
        let rows = crate::bench_format::parse(&stats.stdout, Format::Json)?;
        sample_of("pocket bench", test, rows, &stats)
    }
}
