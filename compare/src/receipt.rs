//! The comparison receipt: one JSON file holding the machine, both builds, every sample
//! of both engines per (model, test, threads), what is derived from them, and optional
//! output-parity entries. [`Receipt::load`] validates what it reads.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::bandwidth::Bandwidth;
use crate::engine::{Sample, Test};
use crate::sysinfo::SysInfo;
use crate::Result;

/// The schema version this pocket writes and reads.
pub const VERSION: u32 = 1;

/// Relative tolerance when checking stored derived values against the samples.
const TOLERANCE: f64 = 1e-6;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// Schema version ([`VERSION`]).
    pub version: u32,
    /// When the comparison ran, RFC 3339 UTC (`2026-11-30T03:10:00Z`).
    pub created: String,
    pub machine: Machine,
    pub pocket_commit: String,
    /// llama.cpp's build line (`BUILD_INFO`).
    pub llama_cpp_build: String,
    /// llama.cpp's reference (x86-64-v3) build, which the greedy-token parity ran against
    /// (absent in older receipts, whose one build was native).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama_cpp_reference_build: Option<String>,
    pub results: Vec<Comparison>,
    #[serde(default)]
    pub parity: Vec<Parity>,
    /// Thread placement both engines ran with (absent in receipts from before the flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementRecord>,
}

/// `--cpu-mask`, `--cpu-strict` and `--poll` as given to both engines (llama-bench's
/// spelling and defaults: `0x0`, false, 50).
/// A receipt that does not load: unreadable, not a receipt, or inconsistent.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("receipt {}: {source}", path.display())]
    InFile {
        path: std::path::PathBuf,
        source: Box<ReceiptError>,
    },
    #[error(transparent)]
    Io(std::io::Error),
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("no `version` field: not a pocket receipt")]
    NoVersion,
    #[error("schema version {0}, this pocket reads version {VERSION}")]
    Version(u64),
    #[error("`version` is not a whole number")]
    VersionNotNumber,
    #[error("{0}")]
    Schema(serde_json::Error),
    #[error("`created` is `{0}`, not an RFC 3339 time")]
    Created(String),
    /// What is wrong (`results[0] (m.gguf pp512 t2): pocket`) and how.
    #[error("{what}: {problem}")]
    Invalid { what: String, problem: Invalid },
}

/// How a receipt's measurements disagree with themselves.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("no samples")]
    NoSamples,
    #[error("t/s sample {0} is not a positive number")]
    BadSample(f64),
    #[error("{ts} t/s samples but {rss} peak RSS and {setup} setup samples")]
    SampleCounts { ts: usize, rss: usize, setup: usize },
    #[error("threads is 0")]
    ZeroThreads,
    #[error("derived.{0} does not match the samples (edited by hand?)")]
    Derived(&'static str),
    #[error("{0} {1} is not in 0..=1")]
    Share(&'static str, f64),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementRecord {
    pub cpu_mask: String,
    pub cpu_strict: bool,
    pub poll: u32,
}

impl From<&pocket_model::Placement> for PlacementRecord {
    fn from(p: &pocket_model::Placement) -> PlacementRecord {
        PlacementRecord {
            cpu_mask: crate::placement::CpuMask::from(p.cpu_mask).to_string(),
            cpu_strict: p.strict,
            poll: p.poll,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// The machine's name in results directories.
    pub name: String,
    pub sysinfo: SysInfo,
    #[serde(default)]
    pub bandwidth: Option<Bandwidth>,
}

/// Both engines on one (model, test, threads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    /// The model's file name.
    pub model: String,
    /// Bytes of tensor data (what one decoded token reads), where known.
    #[serde(default)]
    pub model_bytes: Option<u64>,
    pub test: Test,
    pub threads: u32,
    pub pocket: EngineSamples,
    pub llama_cpp: EngineSamples,
    pub derived: Derived,
}

/// One engine's repetitions (each in a fresh process), index-aligned.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSamples {
    /// Tokens per second, per repetition.
    pub ts: Vec<f64>,
    /// The process's peak RSS, per repetition.
    pub peak_rss_bytes: Vec<u64>,
    /// Wall time outside the timed run (load, warm-up, teardown), per repetition, ms.
    pub setup_ms: Vec<f64>,
}

/// What the samples give (stored for readers; [`Receipt::load`] checks it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Derived {
    pub pocket_ts_mean: f64,
    pub pocket_ts_sd: f64,
    pub llama_cpp_ts_mean: f64,
    pub llama_cpp_ts_sd: f64,
    /// pocket t/s / llama.cpp t/s (> 1: pocket is faster).
    pub speedup: f64,
    pub pocket_peak_rss_bytes: u64,
    pub llama_cpp_peak_rss_bytes: u64,
    /// pocket's peak RSS minus llama.cpp's (negative: pocket uses less).
    pub rss_delta_bytes: i64,
    pub pocket_setup_ms_mean: f64,
    pub llama_cpp_setup_ms_mean: f64,
    /// Decode tests: read bandwidth / model bytes, the t/s no engine can beat.
    #[serde(default)]
    pub roofline_ts: Option<f64>,
}

/// Output parity of the two engines on one model (each field where measured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parity {
    pub model: String,
    #[serde(default)]
    pub perplexity_pocket: Option<f64>,
    #[serde(default)]
    pub perplexity_llama_cpp: Option<f64>,
    /// Greedy tokens compared.
    #[serde(default)]
    pub greedy_tokens: Option<u32>,
    /// Share of those tokens on which both engines agree (0..=1).
    #[serde(default)]
    pub greedy_identical_share: Option<f64>,
    /// The same share with pocket in `--numerics ggml` (llama.cpp's arithmetic: 1.0 expected;
    /// `None` where the model has formats without twins, e.g. Q4_0). Against llama.cpp's
    /// reference (x86-64-v3) build.
    #[serde(default)]
    pub ggml_numerics_identical_share: Option<f64>,
    /// KL-divergence of pocket's fast path from native llama.cpp (llama-perplexity's
    /// `--kl-divergence` method on the perplexity text; absent in older receipts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kld: Option<KldParity>,
    /// The same of llama.cpp's reference build from its native build: llama.cpp's own
    /// spread across ISAs (absent where the native build is the reference build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kld_llama_reference: Option<KldParity>,
}

/// llama-perplexity's KL-divergence figures of one model against a base.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KldParity {
    /// Rows (scored positions) compared.
    pub rows: u32,
    /// Mean KL-divergence, nats.
    pub mean_kld: f64,
    /// "Same top p": the share of rows with the base's most likely token (0..=1).
    pub same_top: f64,
    /// PPL(Q)/PPL(base).
    pub ppl_ratio: f64,
}

/// Mean and sample standard deviation (0 for one value).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

impl EngineSamples {
    pub fn from_samples(samples: &[Sample]) -> EngineSamples {
        EngineSamples {
            ts: samples.iter().map(|s| s.ts).collect(),
            peak_rss_bytes: samples.iter().map(|s| s.peak_rss_bytes).collect(),
            setup_ms: samples.iter().map(|s| s.setup_ms).collect(),
        }
    }

    fn check(&self, what: &str) -> Result<(), ReceiptError> {
        let bad = |problem| ReceiptError::Invalid {
            what: what.to_string(),
            problem,
        };
        if self.ts.is_empty() {
            return Err(bad(Invalid::NoSamples));
        }
        if let Some(&value) = self.ts.iter().find(|t| !t.is_finite() || **t <= 0.0) {
            return Err(bad(Invalid::BadSample(value)));
        }
        let n = self.ts.len();
        if self.peak_rss_bytes.len() != n || self.setup_ms.len() != n {
            return Err(bad(Invalid::SampleCounts {
                ts: n,
                rss: self.peak_rss_bytes.len(),
                setup: self.setup_ms.len(),
            }));
        }
        Ok(())
    }
}

impl Derived {
    /// Derives from both engines' samples; `bandwidth` and `model_bytes` give the roofline
    /// of decode tests.
    pub fn compute(
        pocket: &EngineSamples,
        llama: &EngineSamples,
        test: Test,
        threads: u32,
        model_bytes: Option<u64>,
        bandwidth: Option<&Bandwidth>,
    ) -> Derived {
        let (pm, psd) = mean_sd(&pocket.ts);
        let (lm, lsd) = mean_sd(&llama.ts);
        let prss = pocket.peak_rss_bytes.iter().copied().max().unwrap_or(0);
        let lrss = llama.peak_rss_bytes.iter().copied().max().unwrap_or(0);
        let roofline_ts = match (test.is_decode(), model_bytes, bandwidth) {
            (true, Some(bytes), Some(bw)) if bytes > 0 => {
                Some(bw.for_threads(threads) * 1e9 / bytes as f64)
            }
            _ => None,
        };
        Derived {
            pocket_ts_mean: pm,
            pocket_ts_sd: psd,
            llama_cpp_ts_mean: lm,
            llama_cpp_ts_sd: lsd,
            speedup: if lm > 0.0 { pm / lm } else { 0.0 },
            pocket_peak_rss_bytes: prss,
            llama_cpp_peak_rss_bytes: lrss,
            rss_delta_bytes: prss as i64 - lrss as i64,
            pocket_setup_ms_mean: mean_sd(&pocket.setup_ms).0,
            llama_cpp_setup_ms_mean: mean_sd(&llama.setup_ms).0,
            roofline_ts,
        }
    }

    /// The first field that differs from `other` beyond rounding, if any.
    fn differs_from(&self, other: &Derived) -> Option<&'static str> {
        let close = |a: f64, b: f64| (a - b).abs() <= TOLERANCE * a.abs().max(b.abs()).max(1e-12);
        let floats = [
            ("pocket_ts_mean", self.pocket_ts_mean, other.pocket_ts_mean),
            ("pocket_ts_sd", self.pocket_ts_sd, other.pocket_ts_sd),
            (
                "llama_cpp_ts_mean",
                self.llama_cpp_ts_mean,
                other.llama_cpp_ts_mean,
            ),
            (
                "llama_cpp_ts_sd",
                self.llama_cpp_ts_sd,
                other.llama_cpp_ts_sd,
            ),
            ("speedup", self.speedup, other.speedup),
            (
                "pocket_setup_ms_mean",
                self.pocket_setup_ms_mean,
                other.pocket_setup_ms_mean,
            ),
            (
                "llama_cpp_setup_ms_mean",
                self.llama_cpp_setup_ms_mean,
                other.llama_cpp_setup_ms_mean,
            ),
        ];
        if let Some((name, ..)) = floats.iter().find(|(_, a, b)| !close(*a, *b)) {
            return Some(name);
        }
        if self.pocket_peak_rss_bytes != other.pocket_peak_rss_bytes {
            return Some("pocket_peak_rss_bytes");
        }
        if self.llama_cpp_peak_rss_bytes != other.llama_cpp_peak_rss_bytes {
            return Some("llama_cpp_peak_rss_bytes");
        }
        if self.rss_delta_bytes != other.rss_delta_bytes {
            return Some("rss_delta_bytes");
        }
        match (self.roofline_ts, other.roofline_ts) {
            (None, None) => None,
            (Some(a), Some(b)) if close(a, b) => None,
            _ => Some("roofline_ts"),
        }
    }
}

impl Comparison {
    /// A comparison from both engines' samples, derived values filled in.
    pub fn new(
        model: &str,
        model_bytes: Option<u64>,
        test: Test,
        threads: u32,
        pocket: EngineSamples,
        llama_cpp: EngineSamples,
        bandwidth: Option<&Bandwidth>,
    ) -> Comparison {
        let derived = Derived::compute(&pocket, &llama_cpp, test, threads, model_bytes, bandwidth);
        Comparison {
            model: model.to_string(),
            model_bytes,
            test,
            threads,
            pocket,
            llama_cpp,
            derived,
        }
    }

    /// `model test tN`, how reports and the gate name a comparison.
    pub fn key(&self) -> (String, Test, u32) {
        (self.model.clone(), self.test, self.threads)
    }
}

impl Receipt {
    /// An empty receipt for this machine and these builds, dated now.
    pub fn new(
        machine: Machine,
        pocket_commit: impl Into<String>,
        llama_cpp_build: impl Into<String>,
    ) -> Receipt {
        Receipt {
            version: VERSION,
            created: utc_now(),
            machine,
            pocket_commit: pocket_commit.into(),
            llama_cpp_build: llama_cpp_build.into(),
            llama_cpp_reference_build: None,
            results: Vec::new(),
            parity: Vec::new(),
            placement: None,
        }
    }

    /// Reads and validates a receipt file.
    pub fn load(path: &Path) -> Result<Receipt, ReceiptError> {
        let in_file = |source| ReceiptError::InFile {
            path: path.to_path_buf(),
            source: Box::new(source),
        };
        let text = std::fs::read_to_string(path).map_err(|e| in_file(ReceiptError::Io(e)))?;
        Receipt::from_json(&text).map_err(in_file)
    }

    /// Parses and validates receipt JSON.
    pub fn from_json(text: &str) -> Result<Receipt, ReceiptError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(ReceiptError::NotJson)?;
        match value.get("version").map(|v| v.as_u64()) {
            None => return Err(ReceiptError::NoVersion),
            Some(Some(v)) if v == u64::from(VERSION) => {}
            Some(Some(v)) => return Err(ReceiptError::Version(v)),
            Some(None) => return Err(ReceiptError::VersionNotNumber),
        }
        let receipt: Receipt = serde_json::from_str(text).map_err(ReceiptError::Schema)?;
        receipt.validate()?;
        Ok(receipt)
    }

    /// Checks what serde cannot: samples present and consistent, derived values matching.
    pub fn validate(&self) -> Result<(), ReceiptError> {
        if !self.created.contains('T') {
            return Err(ReceiptError::Created(self.created.clone()));
        }
        for (i, c) in self.results.iter().enumerate() {
            let what = format!("results[{i}] ({} {} t{})", c.model, c.test, c.threads);
            let bad = |problem| ReceiptError::Invalid {
                what: what.clone(),
                problem,
            };
            if c.threads == 0 {
                return Err(bad(Invalid::ZeroThreads));
            }
            c.pocket.check(&format!("{what}: pocket"))?;
            c.llama_cpp.check(&format!("{what}: llama_cpp"))?;
            let again = Derived::compute(
                &c.pocket,
                &c.llama_cpp,
                c.test,
                c.threads,
                c.model_bytes,
                self.machine.bandwidth.as_ref(),
            );
            if let Some(field) = c.derived.differs_from(&again) {
                return Err(bad(Invalid::Derived(field)));
            }
        }
        for (i, p) in self.parity.iter().enumerate() {
            let shares = [
                ("greedy_identical_share", p.greedy_identical_share),
                (
                    "ggml_numerics_identical_share",
                    p.ggml_numerics_identical_share,
                ),
                ("kld.same_top", p.kld.as_ref().map(|k| k.same_top)),
                (
                    "kld_llama_reference.same_top",
                    p.kld_llama_reference.as_ref().map(|k| k.same_top),
                ),
            ];
            for (field, s) in shares {
                if let Some(s) = s.filter(|s| !(0.0..=1.0).contains(s)) {
                    return Err(ReceiptError::Invalid {
                        what: format!("parity[{i}] ({})", p.model),
                        problem: Invalid::Share(field, s),
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the receipt as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n").map_err(crate::Error::file(path))
    }

    /// The comparison for a (model, test, threads), if measured.
    pub fn find(&self, key: &(String, Test, u32)) -> Option<&Comparison> {
        self.results.iter().find(|c| &c.key() == key)
    }
}

/// Now, as RFC 3339 UTC with seconds (`2026-11-30T03:10:00Z`).
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the Unix epoch as RFC 3339 UTC (civil-from-days, proleptic Gregorian).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
