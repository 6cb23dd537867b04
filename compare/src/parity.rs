//! Output parity of pocket and llama.cpp on one model, kept deliberately simple:
//!
//! - **Perplexity**: `tests/data/ppl_text.txt` (built into the binary) with a context of
//!   [`PPL_CTX`] tokens over the first [`PPL_CHUNKS`] chunks, by pocket's library
//!   (`pocket perplexity`'s method) and by native `llama-perplexity -c 128 --chunks 4`.
//! - **KL-divergence** of pocket's fast path from native llama.cpp on the same chunks:
//!   llama-perplexity writes its log-probabilities (`--kl-divergence-base`), pocket scores
//!   its own logits against them (mean KLD, same top token, PPL ratio). Where the native
//!   build is not the reference build (a CPU with AVX-512 or AVX-VNNI), the reference build's
//!   KLD from the native one too: llama.cpp's own spread across ISAs, the yardstick.
//! - **Greedy tokens**: [`GREEDY_TOKENS`] greedy tokens after each of [`PROMPTS`], by pocket's
//!   `Session` and by llama.cpp: its token ids from the `dump_logits` oracle when built
//!   (exact), else `llama-completion -n 16 --temp 0 -no-cnv`'s printed continuation tokenized
//!   with pocket's tokenizer (a lower bound: retokenizing text can split a token differently
//!   from how it was generated). The share is the number of leading identical tokens
//!   (agreement up to the first divergence) over all tokens compared. Against llama.cpp's
//!   reference (x86-64-v3) build.
//! - **The same in ggml numerics**: pocket's `Numerics::Ggml` (llama.cpp's arithmetic bit
//!   for bit) on the same prompts: 100 % expected wherever the model's formats have twins.

use std::path::Path;
use std::process::{Command, Stdio};

use pocket_model::kld::LogitsReader;
use pocket_model::logit_dump::LogitDump;
use pocket_model::perplexity::{kl_divergence, perplexity};
use pocket_model::sample_basic::argmax;
use pocket_model::{LoadOptions, Model, Numerics, Session, SessionOptions};

use crate::llama_bench::LlamaTools;
use crate::receipt::{KldParity, Parity};
use crate::Result;

/// A llama.cpp tool run for parity that did not give its figure.
#[derive(Debug, thiserror::Error)]
pub enum ParityError {
    #[error("cannot run {what}: {source}")]
    Run {
        what: &'static str,
        source: std::io::Error,
    },
    /// `what` exited non-zero; `tail` is the end of its stderr.
    #[error("{what} failed ({status}): {tail}")]
    Failed {
        what: &'static str,
        status: std::process::ExitStatus,
        tail: String,
    },
    #[error("no `Final estimate: PPL = ` in llama-perplexity's output")]
    NoEstimate,
    #[error("no KL-divergence statistics in llama-perplexity's output")]
    NoKld,
    #[error("dump_logits output: {0}")]
    Dump(#[from] pocket_model::logit_dump::LogitDumpError),
    #[error("llama-completion's output does not start with the prompt: {0:?}")]
    NoPrompt(String),
}

/// The perplexity text.
pub const PPL_TEXT: &str = include_str!("../../tests/data/ppl_text.txt");
pub const PPL_CTX: usize = 128;
pub const PPL_CHUNKS: usize = 4;
pub const GREEDY_TOKENS: usize = 16;
pub const PROMPTS: [&str; 2] = [
    "The capital of France is",
    "Once upon a time, in a small village,",
];

/// Both engines' parity figures on `model_path` (`None` fields where one side failed; the
/// reasons are returned as warnings).
pub fn measure(tools: &LlamaTools, model_path: &Path, threads: u32) -> (Parity, Vec<String>) {
    let name = model_path.file_name().map_or_else(
        || model_path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut p = Parity {
        model: name.clone(),
        perplexity_pocket: None,
        perplexity_llama_cpp: None,
        greedy_tokens: None,
        greedy_identical_share: None,
        ggml_numerics_identical_share: None,
        kld: None,
        kld_llama_reference: None,
    };
    let mut warnings = Vec::new();
    let mut warn = |what: &str, e: crate::Error| warnings.push(format!("{name}: {what}: {e}"));
    let model = match Model::load(model_path) {
        Ok(m) => m,
        Err(e) => {
            warn("pocket cannot load the model", e.into());
            return (p, warnings);
        }
    };
    match perplexity(
        &model,
        PPL_TEXT,
        PPL_CTX,
        Some(threads as usize),
        Some(PPL_CHUNKS),
        |_, _| {},
    ) {
        Ok(r) => p.perplexity_pocket = Some(r.ppl),
        Err(e) => warn("pocket perplexity", e.into()),
    }
    let dir = std::env::temp_dir().join(format!("pocket-parity-{}", std::process::id()));
    let base = dir.join("base.kld");
    match std::fs::create_dir_all(&dir)
        .map_err(crate::Error::from)
        .and_then(|_| llama_perplexity(tools, model_path, threads, Some(&base)))
    {
        Ok(v) => {
            p.perplexity_llama_cpp = Some(v);
            match pocket_kld(&model, &base, threads) {
                Ok(k) => p.kld = Some(k),
                Err(e) => warn("pocket --kl-divergence", e),
            }
            if !tools.native_is_reference() {
                match llama_kld(tools, model_path, &base, threads) {
                    Ok(k) => p.kld_llama_reference = Some(k),
                    Err(e) => warn("llama-perplexity --kl-divergence (reference build)", e),
                }
            }
        }
        Err(e) => warn("llama-perplexity", e),
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The same prompts in `--numerics ggml`, where the model's formats have twins.
    let exact = match Model::load_with(
        model_path,
        LoadOptions {
            numerics: Numerics::Ggml,
            ..Default::default()
        },
    ) {
        Ok(m) => Some(m),
        Err(e) => {
            warn("no ggml-numerics check", e.into());
            None
        }
    };
    let (mut same, mut same_exact, mut total) = (0usize, 0usize, 0usize);
    let mut ok = true;
    for prompt in PROMPTS {
        let ours = match pocket_greedy(&model, prompt, threads) {
            Ok(v) => v,
            Err(e) => {
                warn("pocket greedy", e);
                ok = false;
                break;
            }
        };
        // llama.cpp's own token ids where the dump_logits oracle is built (exact), else its
        // printed text retokenized by pocket (a lower bound: text does not always
        // retokenize into the ids that produced it, e.g. on the synthetic models' noise).
        let eog = |t: u32| model.tokenizer.is_eog(t);
        let ids = llama_greedy_ids(tools, model_path, prompt, threads, eog);
        let theirs = match ids {
            Some(Ok(ids)) => ids,
            Some(Err(e)) => {
                warn("dump_logits", e);
                ok = false;
                break;
            }
            None => match llama_greedy(tools, model_path, prompt, threads) {
                Ok(text) => model.tokenizer.encode(&text, false, false),
                Err(e) => {
                    warn("llama-completion", e);
                    ok = false;
                    break;
                }
            },
        };
        same += ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        total += ours.len().max(1);
        if let Some(m) = &exact {
            match pocket_greedy(m, prompt, threads) {
                Ok(o) => same_exact += o.iter().zip(&theirs).take_while(|(a, b)| a == b).count(),
                Err(e) => warn("pocket greedy (ggml numerics)", e),
            }
        }
    }
    if ok && total > 0 {
        p.greedy_tokens = Some(total as u32);
        p.greedy_identical_share = Some(same as f64 / total as f64);
        if exact.is_some() {
            p.ggml_numerics_identical_share = Some(same_exact as f64 / total as f64);
        }
    }
    (p, warnings)
}

/// pocket's greedy continuation ids (stops early at end of generation).
pub fn pocket_greedy(model: &Model, prompt: &str, threads: u32) -> Result<Vec<u32>> {
    let tok = &model.tokenizer;
    let ids = tok.encode(prompt, true, true);
    let mut s = Session::new(
        model,
        SessionOptions {
            n_ctx: ids.len() + GREEDY_TOKENS + 1,
            n_threads: threads.max(1) as usize,
            ..Default::default()
        },
    );
    let mut next = argmax(s.prefill(&ids)?);
    let mut out = Vec::new();
    for i in 0..GREEDY_TOKENS {
        if tok.is_eog(next) {
            break;
        }
        out.push(next);
        if i + 1 < GREEDY_TOKENS {
            next = argmax(s.decode(next)?);
        }
    }
    Ok(out)
}

fn output_of(cmd: &mut Command, what: &'static str) -> Result<(String, String), ParityError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ParityError::Run { what, source })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(ParityError::Failed {
            what,
            status: out.status,
            tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok((stdout, stderr))
}

/// Native `llama-perplexity`'s final estimate on the same text, context and chunks; with
/// `base`, it also writes its log-probabilities there (`--kl-divergence-base`).
pub fn llama_perplexity(
    tools: &LlamaTools,
    model: &Path,
    threads: u32,
    base: Option<&Path>,
) -> Result<f64> {
    let dir = std::env::temp_dir().join(format!("pocket-ppl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let text = dir.join("ppl_text.txt");
    std::fs::write(&text, PPL_TEXT)?;
    let mut cmd = Command::new(tools.tool("llama-perplexity")?);
    cmd.arg("-m")
        .arg(model)
        .arg("-f")
        .arg(&text)
        .args(ppl_args(threads));
    if let Some(b) = base {
        cmd.arg("--kl-divergence-base").arg(b);
    }
    let r = output_of(&mut cmd, "llama-perplexity");
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = r?;
    parse_final_estimate(&(stdout + &stderr)).ok_or_else(|| ParityError::NoEstimate.into())
}

fn ppl_args(threads: u32) -> Vec<String> {
    let (c, n, t) = (
        PPL_CTX.to_string(),
        PPL_CHUNKS.to_string(),
        threads.to_string(),
    );
    ["-c", &c, "--chunks", &n, "-t", &t]
        .map(String::from)
        .to_vec()
}

/// pocket's fast path scored against a base file.
pub fn pocket_kld(model: &Model, base: &Path, threads: u32) -> Result<KldParity> {
    let f = std::fs::File::open(base).map_err(crate::Error::file(base))?;
    let len = f.metadata().ok().map(|m| m.len());
    let name = base.display().to_string();
    let mut r = LogitsReader::new(std::io::BufReader::new(f), &name, len)?;
    let o = SessionOptions {
        n_ctx: r.n_ctx,
        n_threads: threads.max(1) as usize,
        pin: true,
        ..Default::default()
    };
    let s = kl_divergence(model, &mut r, o, |_, _| {})?.summary();
    Ok(KldParity {
        rows: s.count as u32,
        mean_kld: s.kld.0,
        same_top: s.same_top.0,
        ppl_ratio: s.ln_ppl_ratio.0.exp(),
    })
}

/// The reference build's `llama-perplexity --kl-divergence` against a base file.
pub fn llama_kld(tools: &LlamaTools, model: &Path, base: &Path, threads: u32) -> Result<KldParity> {
    let mut cmd = Command::new(tools.reference_tool("llama-perplexity")?);
    cmd.arg("-m")
        .arg(model)
        .args(ppl_args(threads))
        .arg("--kl-divergence-base")
        .arg(base)
        .arg("--kl-divergence");
    let (stdout, stderr) = output_of(&mut cmd, "llama-perplexity --kl-divergence")?;
    parse_kld_report(&(stdout + &stderr)).ok_or_else(|| ParityError::NoKld.into())
}

/// The figures of llama-perplexity's (and `pocket perplexity`'s) closing KL-divergence
/// statistics: `Mean    KLD:`, `Same top p:`, `Mean PPL(Q)/PPL(base)`; the row count from
/// the last chunk line is not printed, so `rows` is 0 here.
pub fn parse_kld_report(text: &str) -> Option<KldParity> {
    let value = |key: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim_start_matches([' ', ':'])
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(KldParity {
        rows: 0,
        mean_kld: value("Mean    KLD")?,
        same_top: value("Same top p")? / 100.0,
        ppl_ratio: value("Mean PPL(Q)/PPL(base)")?,
    })
}

/// The number after `Final estimate: PPL = ` in llama-perplexity's output.
pub fn parse_final_estimate(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.contains("Final estimate: PPL = "))?;
    line.split("PPL = ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// llama.cpp's greedy token ids after `prompt` (up to its first end-of-generation token), by
/// the `dump_logits` oracle (tests/oracle/dump_logits.cpp, built by provision-llama.sh);
/// `None` when that oracle is not built.
pub fn llama_greedy_ids(
    tools: &LlamaTools,
    model: &Path,
    prompt: &str,
    threads: u32,
    is_eog: impl Fn(u32) -> bool,
) -> Option<Result<Vec<u32>>> {
    let bin = tools.reference_tool("dump_logits").ok()?;
    let run = || -> Result<Vec<u32>> {
        let dir = std::env::temp_dir().join(format!("pocket-greedy-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let out = dir.join("dump.bin");
        let mut cmd = Command::new(bin);
        cmd.arg(model)
            .arg(prompt)
            .arg(GREEDY_TOKENS.to_string())
            .arg(&out)
            .arg(threads.max(1).to_string());
        output_of(&mut cmd, "dump_logits")?;
        let dump = LogitDump::read(&out);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(dump
            .map_err(ParityError::Dump)?
            .steps
            .iter()
            .map(|(t, _)| *t)
            .take_while(|&t| !is_eog(t))
            .collect())
    };
    Some(run())
}

/// llama.cpp's greedy continuation text (its stdout without the echoed prompt and the
/// ` [end of text]` marker).
pub fn llama_greedy(
    tools: &LlamaTools,
    model: &Path,
    prompt: &str,
    threads: u32,
) -> Result<String> {
    let mut cmd = Command::new(tools.reference_tool("llama-completion")?);
    cmd.arg("-m").arg(model).args([
        "-p",
        prompt,
        "-n",
        &GREEDY_TOKENS.to_string(),
        "--temp",
        "0",
        "-no-cnv",
        "-c",
        "256",
        "-t",
        &threads.to_string(),
    ]);
    let (stdout, _) = output_of(&mut cmd, "llama-completion")?;
    let text = stdout
        .strip_prefix(prompt)
        .ok_or_else(|| ParityError::NoPrompt(stdout.clone()))?;
    let text = text.trim_end_matches('\n');
    Ok(text
        .strip_suffix(" [end of text]")
        .unwrap_or(text)
        .to_string())
}
