//! The comparison receipt: one JSON file holding the machine, pocket's commit and each
//! reference engine's build and flags, every sample of every engine per (model, test,
//! threads), what is derived from them, and optional output-parity entries.
//! [`Receipt::load`] validates what it reads, and reads version 1 receipts (pocket against
//! llama.cpp alone) too.

mod derived;
mod record;
mod v1;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub use self::derived::{mean_sd, Derived, Versus};
use crate::bandwidth::Bandwidth;
use crate::engine::{EngineInfo, EngineKind, Sample, Test};
use crate::sysinfo::SysInfo;
use crate::Result;

/// The schema version this pocket writes (and, with version 1, reads).
pub const VERSION: u32 = 2;

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
    /// The engines pocket was measured against: each one's build and flags.
    pub engines: BTreeMap<EngineKind, EngineInfo>,
    /// llama.cpp's reference (x86-64-v3) build, which the greedy-token parity ran against
    /// (absent in older receipts, whose one build was native).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llama_cpp_reference_build: Option<String>,
    pub results: Vec<Comparison>,
    #[serde(default)]
    pub parity: Vec<Parity>,
    /// Thread placement pocket and llama.cpp ran with (ik_llama.cpp's llama-bench has no
    /// placement flags; absent in receipts from before the flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementRecord>,
    /// Models an engine was not run on, and why (MNN-LLM runs only the MNN-Pocket shapes;
    /// absent in receipts from before MNN).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// A model (or one test of it) an engine was not run on: those cells lack that engine's
/// column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub model: String,
    pub engine: EngineKind,
    /// The one test the engine cannot run (ik_llama.cpp's pp at a depth); absent: the
    /// whole model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<Test>,
    pub why: String,
}

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
    #[error("schema version {0}, this pocket reads versions 1 to {VERSION}")]
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
    #[error("no reference engine's samples")]
    NoEngines,
    #[error("engine {0} has samples but is not in the receipt's `engines`")]
    UnknownEngine(EngineKind),
    #[error("derived.{0} does not match the samples (edited by hand?)")]
    Derived(String),
    #[error("{0} {1} is not in 0..=1")]
    Share(&'static str, f64),
}

/// `--cpu-mask`, `--cpu-strict` and `--poll` as given to pocket and llama.cpp (llama-bench's
/// spelling and defaults: `0x0`, false, 50).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementRecord {
    pub cpu_mask: String,
    pub cpu_strict: bool,
    pub poll: u32,
}

impl PlacementRecord {
    /// The flags llama-bench and `pocket bench` got for this placement.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--cpu-mask".into(),
            self.cpu_mask.clone(),
            "--cpu-strict".into(),
            u8::from(self.cpu_strict).to_string(),
            "--poll".into(),
            self.poll.to_string(),
        ]
    }
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

/// pocket and each reference engine on one (model, test, threads). Stored with the test's
/// depth as a separate `n_depth` field ([`record`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    try_from = "record::ComparisonRecord",
    into = "record::ComparisonRecord"
)]
pub struct Comparison {
    /// The model's file name.
    pub model: String,
    /// Bytes of tensor data (what one decoded token reads), where known.
    pub model_bytes: Option<u64>,
    /// The test, with its depth (`n_depth` in the receipt).
    pub test: Test,
    pub threads: u32,
    pub pocket: EngineSamples,
    /// Each reference engine's samples.
    pub engines: BTreeMap<EngineKind, EngineSamples>,
    pub derived: Derived,
    /// Measured with a busy loop pinned to this CPU (`--contention`), absent when quiet.
    pub busy_cpu: Option<u32>,
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
    /// Share of those tokens on which pocket and llama.cpp agree (0..=1).
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

impl Comparison {
    /// A comparison from every engine's samples, derived values filled in.
    pub fn new(
        model: &str,
        model_bytes: Option<u64>,
        test: Test,
        threads: u32,
        pocket: EngineSamples,
        engines: BTreeMap<EngineKind, EngineSamples>,
        bandwidth: Option<&Bandwidth>,
    ) -> Comparison {
        let derived = Derived::compute(&pocket, &engines, test, threads, model_bytes, bandwidth);
        Comparison {
            model: model.to_string(),
            model_bytes,
            test,
            threads,
            pocket,
            engines,
            derived,
            busy_cpu: None,
        }
    }

    /// The model's file name, and the busy CPU when measured under contention: how
    /// reports, plots and the gate name the row's model.
    pub fn label(&self) -> String {
        match self.busy_cpu {
            Some(cpu) => format!("{} [CPU {cpu} busy]", self.model),
            None => self.model.clone(),
        }
    }

    /// The derived values again, with `bandwidth` (known after the timed runs).
    pub fn rederive(&mut self, bandwidth: Option<&Bandwidth>) {
        self.derived = Derived::compute(
            &self.pocket,
            &self.engines,
            self.test,
            self.threads,
            self.model_bytes,
            bandwidth,
        );
    }

    /// pocket t/s / `engine`'s t/s, if `engine` ran.
    pub fn speedup(&self, engine: EngineKind) -> Option<f64> {
        self.derived.engines.get(&engine).map(|v| v.speedup)
    }

    /// `model test tN`, how reports and the gate name a comparison.
    pub fn key(&self) -> (String, Test, u32) {
        (self.label(), self.test, self.threads)
    }
}

impl Receipt {
    /// An empty receipt for this machine and pocket commit, dated now, with no engines.
    pub fn new(machine: Machine, pocket_commit: impl Into<String>) -> Receipt {
        Receipt {
            version: VERSION,
            created: utc_now(),
            machine,
            pocket_commit: pocket_commit.into(),
            engines: BTreeMap::new(),
            llama_cpp_reference_build: None,
            results: Vec::new(),
            parity: Vec::new(),
            placement: None,
            skipped: Vec::new(),
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
            Some(Some(1)) => {
                let old: v1::ReceiptV1 =
                    serde_json::from_str(text).map_err(ReceiptError::Schema)?;
                let receipt = Receipt::from(old);
                receipt.validate()?;
                return Ok(receipt);
            }
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
            if c.engines.is_empty() {
                return Err(bad(Invalid::NoEngines));
            }
            for (kind, samples) in &c.engines {
                if !self.engines.contains_key(kind) {
                    return Err(bad(Invalid::UnknownEngine(*kind)));
                }
                samples.check(&format!("{what}: {kind}"))?;
            }
            let again = Derived::compute(
                &c.pocket,
                &c.engines,
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

    /// The reference engines of any result, in report order.
    pub fn measured_engines(&self) -> Vec<EngineKind> {
        let mut kinds: Vec<EngineKind> = self
            .results
            .iter()
            .flat_map(|c| c.engines.keys().copied())
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
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
    let (year, month, day) = pocket_model::chat::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_722_000_000), "2024-07-26T13:20:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
