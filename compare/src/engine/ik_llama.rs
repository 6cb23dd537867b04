//! ik_llama.cpp, through its own `llama-bench` (one process per repetition, `-r 1 -o json`),
//! run as its documentation advises for CPUs: `-rtr 1` (repack the weights at load into its
//! row-interleaved `_R8` layouts) and `-fa 1` (its flash attention).
//!
//! ik_llama.cpp's llama-bench is an older fork of mainline's: its JSON rows have other
//! fields (`repack`, `mla_attn`, `fused_moe`, `test`; no `n_depth`, `cpu_mask`, `poll`) and
//! booleans where mainline prints integers (`flash_attn`), so it has its own reader, which
//! maps a row onto mainline's [`BenchRow`] and keeps the rest in `extra`.
//!
//! It has no `-d` either. Its `-gp D,N` test (`tg<N>@pp<D>`: D prompt tokens untimed, then
//! N generated ones timed) is mainline's `tg<N> @ d<D>`, and is what a generation test at
//! depth runs as; a prompt at depth it cannot run.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{sample_of, test_args, Engine, EngineInfo, EngineKind, Reference, Sample, Test};
use crate::bench_format::{check_required, ParseError, Problem};
use crate::bench_row::{BenchRow, REQUIRED_BY_EVERY};
use crate::llama_bench::{read_line, run_tool, Provisioned, ToolError};
use crate::Result;

/// The command that builds ik_llama.cpp's tools into the cache.
pub const PROVISION: &str = "bash compare/provision-ik-llama.sh";

/// The flags of every run: run-time repacking and flash attention, as ik_llama.cpp's
/// README and discussions advise for CPU inference.
pub const OPTIONS: [&str; 4] = ["-rtr", "1", "-fa", "1"];

/// ik_llama.cpp's build in the cache, written by [`PROVISION`]: the native build
/// (`<cache>/ik_llama.cpp`), else the quick one against the wheel's prebuilt AVX2 libraries
/// (`<cache>/ik_llama.cpp-prebuilt`, `--prebuilt`). Its `BUILD_INFO` says which.
#[derive(Debug, Clone)]
pub struct IkLlamaCpp {
    pub dir: PathBuf,
}

impl Provisioned for IkLlamaCpp {
    /// The build in `cache`: the native one where it is complete, else the prebuilt one; an
    /// error naming [`PROVISION`] if `llama-bench` is missing.
    fn in_cache(cache: &Path) -> Result<IkLlamaCpp, ToolError> {
        let native = IkLlamaCpp {
            dir: cache.join("ik_llama.cpp"),
        };
        let prebuilt = IkLlamaCpp {
            dir: cache.join("ik_llama.cpp-prebuilt"),
        };
        // BUILD_INFO is written last: a native build under way is not used.
        let complete = |ik: &IkLlamaCpp| ik.dir.join("BUILD_INFO").is_file();
        match (complete(&native), complete(&prebuilt)) {
            (false, true) => prebuilt.tool("llama-bench").map(|_| prebuilt),
            _ => native.tool("llama-bench").map(|_| native),
        }
    }
}

impl IkLlamaCpp {
    /// A tool of the build (`llama-bench`, `llama-perplexity`), checked to exist.
    pub fn tool(&self, name: &str) -> Result<PathBuf, ToolError> {
        let path = self.dir.join("bin").join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(ToolError::NotProvisioned {
                engine: EngineKind::IkLlamaCpp.name(),
                name: name.to_string(),
                path,
                provision: PROVISION,
            })
        }
    }

    /// llama-bench's command line for one repetition (a generation test at depth as its
    /// `-gp depth,n`; see [`IkLlamaCpp::refuses`] for what it cannot run).
    pub fn args(model: &Path, test: Test, threads: u32) -> Vec<String> {
        let (n_prompt, n_gen, pg) = if test.n_depth > 0 {
            let gp = format!("{},{}", test.n_depth, test.n_gen);
            (0, 0, vec!["-gp".into(), gp])
        } else {
            test_args(test)
        };
        let mut args: Vec<String> = vec![
            "-m".into(),
            model.display().to_string(),
            "-t".into(),
            threads.to_string(),
            "-p".into(),
            n_prompt.to_string(),
            "-n".into(),
            n_gen.to_string(),
            "-r".into(),
            "1".into(),
            "-o".into(),
            "json".into(),
        ];
        args.extend(pg);
        args.extend(OPTIONS.iter().map(|s| s.to_string()));
        args
    }
}

impl Engine for IkLlamaCpp {
    fn name(&self) -> &str {
        EngineKind::IkLlamaCpp.name()
    }

    fn bench(&self, model: &Path, test: Test, threads: u32) -> Result<Sample> {
        self.check_run(model, test)?;
        let args = IkLlamaCpp::args(model, test, threads);
        let tool = "ik_llama.cpp llama-bench";
        let stats = run_tool(&self.tool("llama-bench")?, tool, &args)?;
        sample_of(tool, test, parse_json(&stats.stdout)?, &stats)
    }
}

impl Reference for IkLlamaCpp {
    fn kind(&self) -> EngineKind {
        EngineKind::IkLlamaCpp
    }

    fn info(&self) -> EngineInfo {
        EngineInfo {
            build: read_line(&self.dir.join("BUILD_INFO")).unwrap_or_else(|| "unknown".into()),
            options: OPTIONS.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn refuses(&self, test: Test) -> Option<&'static str> {
        (test.n_depth > 0 && test.n_prompt > 0).then_some(
            "its llama-bench has no -d, and its -gp runs only generation after a prompt \
             (tg<n> @ d<depth>)",
        )
    }
}

/// The field an ik_llama.cpp row must have besides those every llama-bench's must
/// ([`REQUIRED_BY_EVERY`]): its per-repetition times.
pub const REQUIRED_OWN: &str = "samples_ns";

/// Reads ik_llama.cpp's `llama-bench -o json` output into mainline-shaped rows.
pub fn parse_json(text: &str) -> Result<Vec<BenchRow>, ParseError> {
    let what = "ik_llama.cpp llama-bench json";
    let bad = |problem| ParseError {
        what: what.to_string(),
        problem,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| bad(Problem::Json(e)))?;
    let Value::Array(items) = value else {
        return Err(bad(Problem::NotArray));
    };
    if items.is_empty() {
        return Err(bad(Problem::Empty));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(map) = item else {
                return Err(ParseError {
                    what: format!("{what} row {}", i + 1),
                    problem: Problem::NotObject,
                });
            };
            row_from_ik(map).map_err(|problem| ParseError {
                what: format!("{what} row {}", i + 1),
                problem,
            })
        })
        .collect()
}

/// One ik_llama.cpp row as a [`BenchRow`]: its booleans where mainline has integers become
/// 0/1, and the fields mainline does not know go to `extra`.
fn row_from_ik(mut map: Map<String, Value>) -> Result<BenchRow, Problem> {
    check_required(&map, REQUIRED_BY_EVERY.into_iter().chain([REQUIRED_OWN]))?;
    for field in ["flash_attn"] {
        if let Some(Value::Bool(b)) = map.get(field) {
            let n = i64::from(*b);
            map.insert(field.to_string(), Value::from(n));
        }
    }
    let mut row: BenchRow = serde_json::from_value(Value::Object(map)).map_err(Problem::Json)?;
    // A `-gp` row (`tg128@pp4096`): its prompt is mainline's depth.
    let gp = format!("tg{}@pp{}", row.n_gen, row.n_prompt);
    if row.extra.get("test").and_then(Value::as_str) == Some(gp.as_str()) {
        row.n_depth = row.n_prompt;
        row.n_prompt = 0;
    }
    if !(row.avg_ts.is_finite() && row.avg_ts > 0.0) || row.samples_ns.is_empty() {
        return Err(Problem::Unreadable(
            "avg_ts / samples_ns".into(),
            format!("{} / {:?}", row.avg_ts, row.samples_ns),
        ));
    }
    Ok(row)
}
