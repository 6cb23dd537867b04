//! `pocket perplexity -m MODEL -f FILE [-c CTX]`: llama-perplexity's method. The text is
//! tokenized once (BOS first if the model adds one), cut into chunks of `n_ctx` tokens;
//! each chunk is evaluated from an empty cache with its first token replaced by BOS (when
//! the model adds BOS), and the second half of each chunk is scored.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pocket_model::forward::ms_since;
use pocket_model::perplexity::perplexity_with;
use pocket_model::Model;

use super::gen_args::CacheArgs;
use super::CliResult;

#[derive(Args)]
pub struct PerplexityArgs {
    #[arg(short, long)]
    model: PathBuf,
    /// Text file to score.
    #[arg(short, long)]
    file: PathBuf,
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx_size: usize,
    #[arg(short, long)]
    threads: Option<usize>,
    /// Score at most this many chunks.
    #[arg(long)]
    chunks: Option<usize>,
    #[command(flatten)]
    cache: CacheArgs,
}

pub fn run(a: PerplexityArgs) -> CliResult {
    let t0 = Instant::now();
    let model = Model::load_with(&a.model, a.cache.load_options())?;
    eprintln!("load {:.0} ms", ms_since(t0));
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| format!("cannot read {}: {e}", a.file.display()))?;
    let t1 = Instant::now();
    let o = a.cache.session_options(a.ctx_size, a.threads);
    let r = perplexity_with(&model, &text, o, a.chunks, |i, p| {
        eprint!("[{i}]{p:.4},");
    })?;
    let ms = ms_since(t1);
    eprintln!();
    println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.stderr);
    eprintln!(
        "{} chunks of {} tokens in {:.1} s ({:.1} t/s)",
        r.chunks,
        a.ctx_size,
        ms / 1e3,
        (r.chunks * a.ctx_size) as f64 * 1e3 / ms
    );
    Ok(())
}
