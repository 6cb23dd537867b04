//! `pocket perplexity -m MODEL -f FILE [-c CTX]`: llama-perplexity's method. The text is
//! tokenized once (BOS first if the model adds one), cut into chunks of `n_ctx` tokens;
//! each chunk is evaluated from an empty cache with its first token replaced by BOS (when
//! the model adds BOS), and the second half of each chunk is scored.
//!
//! `--hellaswag [--hellaswag-tasks N]` with `-f TASKS`: llama-perplexity's HellaSwag
//! multiple-choice accuracy (`pocket_model::hellaswag`).
//!
//! KL-divergence, as llama-perplexity: `--kl-divergence-base F` with `-f` writes the base
//! model's log-probabilities to F (llama.cpp's file format, so either engine can be the
//! base); `--kl-divergence-base F --kl-divergence` then scores another model (or the same
//! model in other numerics or KV types) on the tokens stored in F.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pocket_model::forward::ms_since;
use pocket_model::hellaswag::{hellaswag, parse_tasks, select_tasks};
use pocket_model::kld::{KldSummary, LogitsReader};
use pocket_model::perplexity::{kl_divergence, perplexity_base};
use pocket_model::Model;

use super::engine_args::ModelArgs;
use super::{CliError, CliResult};

#[derive(Args)]
#[command(mut_arg("ctx_size", |a| a.default_value("512").help("Context size: tokens per chunk")))]
pub struct PerplexityArgs {
    #[command(flatten)]
    engine: ModelArgs,
    /// Text file to score (not needed with --kl-divergence: the tokens come from the base).
    #[arg(short, long, required_unless_present = "kl_divergence")]
    file: Option<PathBuf>,
    /// Score at most this many chunks.
    #[arg(long)]
    chunks: Option<usize>,
    /// The KL-divergence base file: written by a perplexity run, read with --kl-divergence.
    #[arg(long, value_name = "FILE")]
    kl_divergence_base: Option<PathBuf>,
    /// Compare this model with the base file of --kl-divergence-base.
    #[arg(long, requires = "kl_divergence_base")]
    kl_divergence: bool,
    /// HellaSwag multiple-choice accuracy of the task file (-f; llama-perplexity's format:
    /// 6 lines per task) by llama-perplexity's method.
    #[arg(long, requires = "file", conflicts_with = "kl_divergence")]
    hellaswag: bool,
    /// Tasks to score, drawn in llama-perplexity's random order.
    #[arg(long, default_value_t = 400, value_name = "N")]
    hellaswag_tasks: usize,
}

pub fn run(a: PerplexityArgs) -> CliResult {
    let t0 = Instant::now();
    let model = a.engine.load_model()?;
    eprintln!("load {:.0} ms", ms_since(t0));
    if a.kl_divergence {
        return run_kld(&a, &model);
    }
    if a.hellaswag {
        return run_hellaswag(&a, &model);
    }
    let file = a
        .file
        .as_ref()
        .expect("clap requires -f without --kl-divergence");
    let text = std::fs::read_to_string(file).map_err(|source| CliError::File {
        action: "read",
        path: file.clone(),
        source,
    })?;
    let base = match &a.kl_divergence_base {
        Some(p) => {
            eprintln!("saving all logits to {}", p.display());
            let f = File::create(p).map_err(|source| CliError::File {
                action: "create",
                path: p.clone(),
                source,
            })?;
            Some(BufWriter::new(f))
        }
        None => None,
    };
    let t1 = Instant::now();
    let o = a.engine.session_options(a.engine.ctx_size)?;
    let r = perplexity_base(&model, &text, o, a.chunks, base, |i, p| {
        eprint!("[{i}]{p:.4},");
    })?;
    let ms = ms_since(t1);
    eprintln!();
    println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.stderr);
    eprintln!(
        "{} chunks of {} tokens in {:.1} s ({:.1} t/s)",
        r.chunks,
        a.engine.ctx_size,
        ms / 1e3,
        (r.chunks * a.engine.ctx_size) as f64 * 1e3 / ms
    );
    Ok(())
}

/// llama-perplexity's HellaSwag output: one line per task with the accuracy so far and its
/// 95 % interval (stdout), each task's endings' mean log-probabilities on stderr.
fn run_hellaswag(a: &PerplexityArgs, model: &Model) -> CliResult {
    let file = a.file.as_ref().expect("clap requires -f with --hellaswag");
    let text = std::fs::read_to_string(file).map_err(|source| CliError::File {
        action: "read",
        path: file.clone(),
        source,
    })?;
    let all = parse_tasks(&text)?;
    eprintln!(
        "hellaswag: loaded {} tasks from {}",
        all.len(),
        file.display()
    );
    let tasks = select_tasks(all, a.hellaswag_tasks);
    eprintln!("hellaswag: selecting {} randomized tasks", tasks.len());
    let t1 = Instant::now();
    let o = a.engine.session_options(a.engine.ctx_size)?;
    println!("\ntask\tacc_norm\t95% confidence interval");
    let mut n = 0;
    hellaswag(model, &tasks, o, |t| {
        n += 1;
        println!(
            "{n}\t{:3.8}%\t[{:3.4}%, {:3.4}%]",
            t.acc * 100.0,
            t.interval.0 * 100.0,
            t.interval.1 * 100.0
        );
        let m = t.mean_logprob;
        eprintln!(
            "task at line {}: mean logprobs [{:.6}, {:.6}, {:.6}, {:.6}], picked {}, gold {}",
            t.line, m[0], m[1], m[2], m[3], t.predicted, t.gold
        );
    })?;
    eprintln!("{} tasks in {:.1} s", tasks.len(), ms_since(t1) / 1e3);
    Ok(())
}

fn run_kld(a: &PerplexityArgs, model: &Model) -> CliResult {
    let path = a
        .kl_divergence_base
        .as_ref()
        .expect("clap requires the base");
    let f = File::open(path).map_err(|source| CliError::File {
        action: "open",
        path: path.clone(),
        source,
    })?;
    let len = f.metadata().ok().map(|m| m.len());
    let mut base = LogitsReader::new(BufReader::new(f), &path.display().to_string(), len)?;
    eprintln!(
        "computing over {} chunks, n_ctx={}",
        base.n_chunk, base.n_ctx
    );
    let t1 = Instant::now();
    let o = a.engine.session_options(base.n_ctx)?;
    println!("{}", KldSummary::TABLE_HEADER);
    let stats = kl_divergence(model, &mut base, o, |i, st| {
        println!("{}", st.summary().chunk_line(i));
    })?;
    println!();
    print!("{}", stats.summary().report());
    eprintln!(
        "{} chunks of {} tokens in {:.1} s",
        base.n_chunk,
        base.n_ctx,
        ms_since(t1) / 1e3
    );
    Ok(())
}
