//! MNN-LLM (Alibaba's MNN, the PyPI wheel `mnn==3.6.1`), the engine MNN-Pocket was
//! co-designed with, through a small driver (`compare/mnn_bench.py`, run with the private
//! venv's python) that follows MNN's own `llm_bench`: a prompt of N token ids, generation
//! from a one-token context, precision and memory "low", flash attention, one warm-up run,
//! then one timed run, in a fresh process per repetition. Its JSON line carries MNN's own
//! timers (`prefill_us`, `decode_us`), read by [`parse_json`].
//!
//! MNN runs its own format, 4-bit weights in blocks of 64 with a scale and a zero point,
//! which its exporter makes from a Hugging Face checkpoint (`compare/mnn_export.py`: the
//! GGUF dequantized, then MNN's `llmexport`). From an MNN-Pocket Q4_1 GGUF (pocket synth's
//! 64-groups) that gives back the same codes, so MNN runs the same weights as the other
//! engines; from anything else it would not, and [`Mnn::cannot_run`] says so: those cells
//! are skipped. A GGUF is exported once, into `<cache>/mnn/models/<name>-<size>/`, before its
//! first run.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use super::{sample_of, Engine, EngineInfo, EngineKind, Reference, Sample, Test};
use crate::bench_row::BenchRow;
use crate::llama_bench::{read_line, run_tool, Provisioned, ToolError};
use crate::Result;
use pocket_kernels::GgmlType;
use pocket_model::gguf::Gguf;
use pocket_model::{Arch, Config};

/// The command that installs MNN-LLM into the cache.
pub const PROVISION: &str = "bash compare/provision-mnn.sh";

/// The bench driver and the exporter, written into `<cache>/mnn/` when missing or changed
/// (so the command lines name a file, and the running pocket's copy is the one run).
pub const BENCH_SCRIPT: (&str, &str) = ("mnn_bench.py", include_str!("../../mnn_bench.py"));
pub const EXPORT_SCRIPT: (&str, &str) = ("mnn_export.py", include_str!("../../mnn_export.py"));

/// The driver's flags of every run (llm_bench's defaults: precision and memory low, i.e.
/// int4 weights with int8 activations; attention mode 8, flash attention with unquantized
/// KV; dynamic_option 0 for prompts of 1-300 tokens, else 8; no mmap; the driver's greedy
/// sampler).
pub const OPTIONS: [&str; 6] = [
    "--precision",
    "low",
    "--memory",
    "low",
    "--attention-mode",
    "8",
];

/// What the driver does beyond its flags, for the receipt: llm_bench's dynamic_option rule,
/// no mmap, one warm-up run, prompt token 16, the greedy sampler; and the weights' format.
pub const DRIVER_CONVENTIONS: [&str; 6] = [
    "dynamic_option=0|8(prompt<=300|else)",
    "use_mmap=false",
    "warmup=1",
    "prompt_token=16",
    "sampler=greedy",
    "weights=llmexport-int4-block64-asym",
];

/// The shape MNN is run on: MNN-Pocket's (qwen3, 28 layers, hidden 896, 14 q / 2 kv heads
/// of 64, FFN 2560, vocabulary 65536, tied embeddings).
const MNN_POCKET: Shape = Shape {
    n_layer: 28,
    n_embd: 896,
    n_head: 14,
    n_head_kv: 2,
    head_dim: 64,
    n_ff: 2560,
    n_vocab: 65_536,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    n_layer: usize,
    n_embd: usize,
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
    n_ff: usize,
    n_vocab: usize,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} layers, hidden {}, {}/{} heads of {}, FFN {}, vocabulary {}",
            self.n_layer,
            self.n_embd,
            self.n_head,
            self.n_head_kv,
            self.head_dim,
            self.n_ff,
            self.n_vocab
        )
    }
}

/// MNN-LLM's venv in the cache (`<cache>/mnn`), written by [`PROVISION`].
#[derive(Debug, Clone)]
pub struct Mnn {
    pub dir: PathBuf,
}

impl Provisioned for Mnn {
    /// The venv in `cache`: complete once `VENV_INFO` is written (the script's last step); an
    /// error naming [`PROVISION`] if it is not.
    fn in_cache(cache: &Path) -> Result<Mnn, ToolError> {
        let mnn = Mnn {
            dir: cache.join("mnn"),
        };
        for path in [mnn.dir.join("VENV_INFO"), mnn.python()] {
            if !path.is_file() {
                return Err(ToolError::NotProvisioned {
                    engine: EngineKind::Mnn.name(),
                    name: "venv".into(),
                    path,
                    provision: PROVISION,
                });
            }
        }
        Ok(mnn)
    }
}

impl Mnn {
    /// The venv's python.
    pub fn python(&self) -> PathBuf {
        self.dir.join("venv").join("bin").join("python")
    }

    /// Where the MNN export of the GGUF at `gguf` lives: `models/<file stem>-<size>`.
    pub fn model_dir(&self, gguf: &Path) -> Result<PathBuf> {
        let size = std::fs::metadata(gguf)
            .map_err(|source| crate::Error::File {
                path: gguf.to_path_buf(),
                source,
            })?
            .len();
        let stem = gguf
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
        Ok(self.dir.join("models").join(format!("{stem}-{size}")))
    }

    /// The MNN export of `gguf`, made now (a minute or more) if there is none yet.
    pub fn exported(&self, gguf: &Path) -> Result<PathBuf> {
        let out = self.model_dir(gguf)?;
        if out.join("EXPORT_INFO").is_file() {
            return Ok(out);
        }
        let script = self.script(EXPORT_SCRIPT)?;
        eprintln!(
            "exporting {} to MNN's format in {} ...",
            gguf.display(),
            out.display()
        );
        let output = Command::new(self.python())
            .arg(&script)
            .arg("--gguf")
            .arg(gguf)
            .arg("--out")
            .arg(&out)
            .output()
            .map_err(|source| ToolError::Spawn {
                tool: script.display().to_string(),
                source,
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            return Err(ToolError::Failed {
                command: format!(
                    "{} {} --gguf {}",
                    self.python().display(),
                    script.display(),
                    gguf.display()
                ),
                failure: format!("({}):\n{tail}", output.status),
            }
            .into());
        }
        Ok(out)
    }

    /// `<cache>/mnn/<name>` with `text`, rewritten if it differs.
    fn script(&self, (name, text): (&str, &str)) -> Result<PathBuf> {
        let path = self.dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            std::fs::write(&path, text).map_err(|source| crate::Error::File {
                path: path.clone(),
                source,
            })?;
        }
        Ok(path)
    }

    /// The driver's command line (after the script) for one repetition.
    pub fn args(model_dir: &Path, test: Test, threads: u32) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--model".into(),
            model_dir.display().to_string(),
            "-p".into(),
            test.n_prompt.to_string(),
            "-n".into(),
            test.n_gen.to_string(),
            "-t".into(),
            threads.to_string(),
        ];
        args.extend(OPTIONS.iter().map(|s| s.to_string()));
        args
    }

    /// Why MNN is not run on the GGUF at `model`, if it is not: anything but an MNN-Pocket
    /// shape with Q4_1 weights (the only GGUF whose weights MNN's 4-bit block-64 export
    /// keeps as they are).
    pub fn cannot_run(model: &Path) -> Option<String> {
        let g = match Gguf::open(model) {
            Ok(g) => g,
            Err(e) => return Some(format!("cannot read its header: {e}")),
        };
        let c = match Config::from_gguf(&g) {
            Ok(c) => c,
            Err(e) => return Some(format!("cannot read its configuration: {e}")),
        };
        let shape = Shape {
            n_layer: c.n_layer,
            n_embd: c.n_embd,
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            n_ff: c.n_ff,
            n_vocab: c.n_vocab,
        };
        let tied = g.tensor_info("output.weight").is_none();
        if c.arch != Arch::Qwen3 || shape != MNN_POCKET || !tied {
            let tied = if tied { "tied" } else { "untied" };
            return Some(format!(
                "not the MNN-Pocket shape ({} {shape}, {tied}; MNN is run on qwen3 \
                 {MNN_POCKET}, tied)",
                c.arch.name()
            ));
        }
        let other = g
            .tensors()
            .iter()
            .find(|t| t.dims.len() == 2 && t.ggml_type != GgmlType::Q4_1);
        if let Some(t) = other {
            return Some(format!(
                "{} is {:?}: MNN runs 4-bit block-64 weights, the same as the other engines' \
                 only from Q4_1",
                t.name, t.ggml_type
            ));
        }
        let split = g
            .tensors()
            .iter()
            .find(|t| t.dims.len() == 2 && !in_groups_of_64(g.tensor_data(t)));
        split.map(|t| {
            format!(
                "{}: Q4_1 not in MNN's 64-groups (pairs of 32-blocks sharing d, m), so MNN's \
                 export would change its weights",
                t.name
            )
        })
    }
}

/// Whether Q4_1 `data` is in MNN's 64-groups: each pair of 32-blocks (20 bytes: fp16 d,
/// fp16 m, 16 bytes of nibbles) has the same d and m, as pocket synth's MNN-Pocket writes.
fn in_groups_of_64(data: &[u8]) -> bool {
    const BLOCK: usize = 20;
    data.len().is_multiple_of(2 * BLOCK)
        && data
            .chunks_exact(2 * BLOCK)
            .all(|pair| pair[..4] == pair[BLOCK..BLOCK + 4])
}

impl Engine for Mnn {
    fn name(&self) -> &str {
        EngineKind::Mnn.name()
    }

    fn bench(&self, model: &Path, test: Test, threads: u32) -> Result<Sample> {
        self.check_run(model, test)?;
        let dir = self.exported(model)?;
        let script = self.script(BENCH_SCRIPT)?;
        let mut args = vec![script.display().to_string()];
        args.extend(Mnn::args(&dir, test, threads));
        let tool = "MNN-LLM (mnn_bench.py)";
        let stats = run_tool(&self.python(), tool, &args)?;
        let run = parse_json(&stats.stdout)?;
        let mut row = run.row(test)?;
        row.model_filename = model.display().to_string();
        sample_of("mnn_bench.py", test, vec![row], &stats)
    }
}

impl Reference for Mnn {
    fn kind(&self) -> EngineKind {
        EngineKind::Mnn
    }

    fn info(&self) -> EngineInfo {
        // The driver's flags, then what it does as llm_bench does (see its header).
        let mut options: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
        options.extend(DRIVER_CONVENTIONS.map(String::from));
        EngineInfo {
            build: read_line(&self.dir.join("VENV_INFO")).unwrap_or_else(|| "unknown".into()),
            options,
        }
    }

    fn refuses(&self, test: Test) -> Option<&'static str> {
        (test.n_depth > 0).then_some("its bench driver starts every run from an empty cache")
    }

    fn cannot_run(&self, model: &Path) -> Option<String> {
        Mnn::cannot_run(model)
    }
}

/// What `mnn_bench.py` printed: one run's MNN timers, the tokens they cover and the options.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MnnRun {
    pub mnn_version: String,
    pub model_dir: String,
    pub weight_bytes: u64,
    pub n_prompt: u32,
    pub n_gen: u32,
    pub threads: u32,
    pub precision: String,
    pub memory: String,
    pub attention_mode: i64,
    pub dynamic_option: i64,
    /// Tokens of the prompt's forward pass (1 for a generation test: its context).
    pub prompt_tokens: u32,
    /// Tokens generated (fewer than `n_gen` if a stop token came first).
    pub decode_tokens: u32,
    pub prefill_us: u64,
    pub decode_us: u64,
}

/// Why the driver's output could not be read or does not make a sample.
#[derive(Debug, thiserror::Error)]
pub enum MnnOutputError {
    #[error("MNN bench driver output: no JSON line in {0:?}")]
    NoJson(String),
    #[error("MNN bench driver output: {0}")]
    Json(serde_json::Error),
    #[error("MNN bench driver output: {0}")]
    Bad(String),
}

/// Reads the driver's output: its last line that starts with `{` (MNN logs to stderr, but
/// a stray line on stdout is not the result).
pub fn parse_json(text: &str) -> Result<MnnRun, MnnOutputError> {
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| MnnOutputError::NoJson(text.chars().take(200).collect()))?;
    serde_json::from_str(line).map_err(MnnOutputError::Json)
}

impl MnnRun {
    /// The run as a llama-bench row of `test`: its timed part (prefill for a prompt,
    /// decode for generation, both for pp+tg) and its t/s; MNN's options in `extra`.
    pub fn row(&self, test: Test) -> Result<BenchRow, MnnOutputError> {
        let bad = |s: String| Err(MnnOutputError::Bad(s));
        if (self.n_prompt, self.n_gen) != (test.n_prompt, test.n_gen) {
            return bad(format!(
                "a run of -p {} -n {}, asked for {test}",
                self.n_prompt, self.n_gen
            ));
        }
        if test.n_gen > 0 && self.decode_tokens != test.n_gen {
            return bad(format!(
                "{} of {} tokens generated (a stop token came first)",
                self.decode_tokens, test.n_gen
            ));
        }
        if test.n_prompt > 0 && self.prompt_tokens != test.n_prompt {
            return bad(format!(
                "a prompt of {} tokens, asked for {}",
                self.prompt_tokens, test.n_prompt
            ));
        }
        let mut us = 0;
        if test.n_prompt > 0 {
            us += self.prefill_us;
        }
        if test.n_gen > 0 {
            us += self.decode_us;
        }
        if us == 0 {
            return bad(format!(
                "no time measured (prefill_us {}, decode_us {})",
                self.prefill_us, self.decode_us
            ));
        }
        let tokens = u64::from(test.n_prompt) + u64::from(test.n_gen);
        let ns = us * 1000;
        let ts = tokens as f64 * 1e9 / ns as f64;
        let mut extra = serde_json::Map::new();
        for (k, v) in [
            ("precision", self.precision.clone().into()),
            ("memory", self.memory.clone().into()),
            ("attention_mode", self.attention_mode.into()),
            ("dynamic_option", self.dynamic_option.into()),
            ("prefill_us", self.prefill_us.into()),
            ("decode_us", self.decode_us.into()),
            ("mnn_model_dir", self.model_dir.clone().into()),
        ] {
            extra.insert(k.to_string(), v);
        }
        Ok(BenchRow {
            build_commit: format!("mnn {}", self.mnn_version),
            backends: "CPU".into(),
            model_type: "qwen3 MNN 4-bit g64 asym".into(),
            model_size: self.weight_bytes,
            n_threads: i64::from(self.threads),
            n_prompt: i64::from(test.n_prompt),
            n_gen: i64::from(test.n_gen),
            avg_ns: ns,
            avg_ts: ts,
            samples_ns: vec![ns],
            samples_ts: vec![ts],
            extra,
            ..BenchRow::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::in_groups_of_64;

    /// A Q4_1 block: fp16 d and m as raw bytes, 16 bytes of nibbles.
    fn block(d: [u8; 2], m: [u8; 2], fill: u8) -> Vec<u8> {
        let mut b = vec![d[0], d[1], m[0], m[1]];
        b.extend([fill; 16]);
        b
    }

    #[test]
    fn groups_of_64_are_pairs_of_blocks_sharing_d_and_m() {
        let pair = |a: Vec<u8>, b: Vec<u8>| [a, b].concat();
        let g64 = pair(block([1, 2], [3, 4], 0x11), block([1, 2], [3, 4], 0xf0));
        assert!(in_groups_of_64(&[g64.clone(), g64.clone()].concat()));
        let other_d = pair(block([1, 2], [3, 4], 0), block([1, 9], [3, 4], 0));
        assert!(!in_groups_of_64(&[g64.clone(), other_d].concat()));
        let other_m = pair(block([1, 2], [3, 4], 0), block([1, 2], [3, 5], 0));
        assert!(!in_groups_of_64(&other_m));
        // An odd number of blocks is no whole number of groups.
        assert!(!in_groups_of_64(&[g64, block([1, 2], [3, 4], 0)].concat()));
    }
}
