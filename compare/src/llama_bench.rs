//! llama.cpp's tools: where they are (the pocket cache), and running `llama-bench` with
//! the peak RSS and wall time of each process measured from outside (`crate::measure`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench_format::{self, Format};
use crate::bench_row::BenchRow;
pub use crate::measure::{run_measured, ProcessStats};
use crate::Result;

/// The command that builds llama.cpp's tools into the cache.
pub const PROVISION: &str = "bash compare/provision-llama.sh";

/// pocket's cache directory: `$POCKET_CACHE`, else `~/.cache/pocket`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("POCKET_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    Path::new(&home).join(".cache").join("pocket")
}

/// Tools a provisioning script builds into the cache: found in a given cache (tests use
/// their own), or by [`Provisioned::locate`] in [`cache_dir`], the one commands use.
pub trait Provisioned: Sized {
    /// The tools in `cache`; an error naming the provisioning script where they are missing.
    fn in_cache(cache: &Path) -> Result<Self, ToolError>;

    /// The tools in [`cache_dir`].
    fn locate() -> Result<Self, ToolError> {
        Self::in_cache(&cache_dir())
    }
}

/// llama.cpp's two builds in the cache (written by [`PROVISION`]):
///
/// - `native` (`<cache>/llama.cpp-native`, `GGML_NATIVE=ON`): the best llama.cpp can do on
///   this CPU, for speed (`llama-bench`) and as the KL-divergence reference of pocket's
///   fast path. On a CPU where -march=native selects no ggml kernel beyond x86-64-v3 it is
///   a link to the reference build.
/// - `reference` (`<cache>/llama.cpp-build`): the x86-64-v3 build on x86 (AVX2, FMA, F16C;
///   the same arithmetic on every x86-64 machine), which `--numerics ggml` reproduces bit
///   for bit: greedy-token parity and every oracle use it.
#[derive(Debug, Clone)]
pub struct LlamaTools {
    pub native_dir: PathBuf,
    pub reference_dir: PathBuf,
}

impl Provisioned for LlamaTools {
    /// The builds in `cache`; an error naming [`PROVISION`] if `llama-bench` is not there.
    fn in_cache(cache: &Path) -> Result<LlamaTools, ToolError> {
        let tools = LlamaTools {
            native_dir: cache.join("llama.cpp-native"),
            reference_dir: cache.join("llama.cpp-build"),
        };
        tools.reference_tool("llama-bench")?;
        tools.tool("llama-bench")?;
        Ok(tools)
    }
}

impl LlamaTools {
    /// A tool of the native build (`llama-bench`, `llama-perplexity`), checked to exist.
    pub fn tool(&self, name: &str) -> Result<PathBuf, ToolError> {
        find_tool(&self.native_dir, name, "native")
    }

    /// A tool of the reference build (`llama-completion`, `dump_logits`, ...).
    pub fn reference_tool(&self, name: &str) -> Result<PathBuf, ToolError> {
        find_tool(&self.reference_dir, name, "reference")
    }

    /// Whether the native build is the reference build (no ISA beyond x86-64-v3 here).
    pub fn native_is_reference(&self) -> bool {
        match (
            self.native_dir.canonicalize(),
            self.reference_dir.canonicalize(),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }

    /// The native build's one-line description (`BUILD_INFO`, and `NATIVE_INFO`: whether it
    /// is its own build or the reference one).
    pub fn build_info(&self) -> Option<String> {
        let mut line = read_line(&self.native_dir.join("BUILD_INFO"))?;
        if let Some(n) = read_line(&self.native_dir.join("NATIVE_INFO")) {
            line = format!("{line}; native: {n}");
        }
        Some(line)
    }

    /// The reference build's one-line description.
    pub fn reference_info(&self) -> Option<String> {
        read_line(&self.reference_dir.join("BUILD_INFO"))
    }
}

/// A file's words on one line (`None`: missing or empty).
pub(crate) fn read_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!line.is_empty()).then_some(line)
}

/// A llama.cpp tool (or pocket run as one) that is missing or did not do its job.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(
        "llama.cpp's {name} ({which} build) not found at {}: build it with `{PROVISION}` \
         (POCKET_CACHE selects the cache directory)",
        path.display()
    )]
    NotFound {
        name: String,
        which: &'static str,
        path: PathBuf,
    },
    /// Another engine's tool (`ik_llama.cpp`'s llama-bench) is not in the cache.
    #[error(
        "{engine}'s {name} not found at {}: build it with `{provision}` \
         (POCKET_CACHE selects the cache directory)",
        path.display()
    )]
    NotProvisioned {
        engine: &'static str,
        name: String,
        path: PathBuf,
        provision: &'static str,
    },
    /// A comparison without a reference engine (none given, none provisioned).
    #[error(
        "no engine to compare pocket with: provision one (`{PROVISION}`, \
         `bash compare/provision-ik-llama.sh`, `bash compare/provision-mnn.sh`)"
    )]
    NoEngines,
    #[error("cannot run {tool}: {source}")]
    Spawn {
        tool: String,
        source: std::io::Error,
    },
    /// `command` exited non-zero; `failure` is the exit status and its stderr's tail.
    #[error("{command} failed {failure}")]
    Failed { command: String, failure: String },
    #[error("{tool} printed {rows} rows for one test, expected 1")]
    RowCount { tool: &'static str, rows: usize },
    /// The row printed is of another test than the one asked for.
    #[error("{tool} was asked for {asked} and printed a row of {got}")]
    WrongTest {
        tool: &'static str,
        asked: String,
        got: String,
    },
    #[error("cannot find the running pocket binary: {0}")]
    NoPocketBinary(std::io::Error),
}

fn find_tool(dir: &Path, name: &str, which: &'static str) -> Result<PathBuf, ToolError> {
    let path = dir.join("bin").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ToolError::NotFound {
            name: name.to_string(),
            which,
            path,
        })
    }
}

/// What one llama-bench process is asked to do.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub model: PathBuf,
    pub threads: u32,
    /// `-p`: prompt tokens (0: no prompt test).
    pub n_prompt: u32,
    /// `-n`: generated tokens (0: no generation test).
    pub n_gen: u32,
    /// `-r`: repetitions inside the process.
    pub reps: u32,
    pub format: Format,
    /// Further llama-bench arguments, passed as they are.
    pub extra: Vec<String>,
}

impl BenchArgs {
    /// llama-bench's command line for these arguments.
    pub fn to_args(&self) -> Vec<String> {
        let format = clap::ValueEnum::to_possible_value(&self.format)
            .expect("every format has a name")
            .get_name()
            .to_string();
        let mut args: Vec<String> = vec![
            "-m".into(),
            self.model.display().to_string(),
            "-t".into(),
            self.threads.to_string(),
            "-p".into(),
            self.n_prompt.to_string(),
            "-n".into(),
            self.n_gen.to_string(),
            "-r".into(),
            self.reps.to_string(),
            "-o".into(),
            format,
        ];
        args.extend(self.extra.iter().cloned());
        args
    }
}

/// One llama-bench process: its rows and its measurements.
#[derive(Debug, Clone)]
pub struct BenchRun {
    pub rows: Vec<BenchRow>,
    pub stats: ProcessStats,
}

/// Runs one llama-bench process and parses what it prints.
pub fn run(tools: &LlamaTools, args: &BenchArgs) -> Result<BenchRun> {
    if !args.model.is_file() {
        return Err(crate::Error::ModelNotFound(args.model.clone()));
    }
    let stats = run_tool(&tools.tool("llama-bench")?, "llama-bench", &args.to_args())?;
    let rows = bench_format::parse(&stats.stdout, args.format)?;
    Ok(BenchRun { rows, stats })
}

/// Runs `program` with `args`, measured; a failed run is [`ToolError::Failed`] with the
/// command line as `name` and `args`.
pub(crate) fn run_tool(program: &Path, name: &str, args: &[String]) -> Result<ProcessStats> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let stats = run_measured(cmd)?;
    if stats.exit_code != Some(0) {
        let command = format!("{name} {}", args.join(" "));
        let failure = stats.failure();
        return Err(ToolError::Failed { command, failure }.into());
    }
    Ok(stats)
}
