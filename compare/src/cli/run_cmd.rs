//! `pocket run -m MODEL -p PROMPT [-n N] [-t THREADS] [-c CTX] [--temp T --seed S ...]
//! [-ctk TYPE -ctv TYPE]`: streams the continuation to stdout, timings to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pocket_model::forward::ms_since;
use pocket_model::tokenizer::StreamDecoder;
use pocket_model::{Model, Session};

use super::gen_args::{CacheArgs, SamplingArgs};
use super::CliResult;

#[derive(Args)]
pub struct RunArgs {
    /// The GGUF model.
    #[arg(short, long)]
    model: PathBuf,
    /// The prompt (special tokens in it are parsed).
    #[arg(short, long)]
    prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 64)]
    n_predict: usize,
    /// Threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Context size (prompt + generated tokens).
    #[arg(short = 'c', long, default_value_t = 2048)]
    ctx_size: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Do not echo the prompt.
    #[arg(long)]
    no_echo: bool,
}

pub fn run(a: RunArgs) -> CliResult {
    let t0 = Instant::now();
    let model = Model::load_with(&a.model, a.cache.load_options())?;
    let load_ms = ms_since(t0);
    let tok = &model.tokenizer;
    let prompt = tok.encode(&a.prompt, true, true);
    if prompt.is_empty() {
        return Err("the prompt tokenizes to nothing".into());
    }
    if prompt.len() + a.n_predict > a.ctx_size {
        return Err(format!(
            "the prompt ({} tokens) plus {} to generate does not fit in the context of {} (raise -c)",
            prompt.len(),
            a.n_predict,
            a.ctx_size
        )
        .into());
    }
    let mut s = Session::try_new(&model, a.cache.session_options(a.ctx_size, a.threads))?;
    let mut out = std::io::stdout().lock();
    if !a.no_echo {
        write!(out, "{}", a.prompt)?;
        out.flush()?;
    }
    let mut sampler = a.sampling.sampler();
    prompt.iter().for_each(|&t| sampler.accept(t));
    let t1 = Instant::now();
    let mut next = sampler.sample(s.prefill(&prompt)?);
    sampler.accept(next);
    let prompt_ms = ms_since(t1);
    let t2 = Instant::now();
    let mut dec = StreamDecoder::new();
    let mut n_gen = 0usize;
    for i in 0..a.n_predict {
        if tok.is_eog(next) {
            break;
        }
        write!(out, "{}", dec.push(tok, next, false))?;
        out.flush()?;
        n_gen += 1;
        if i + 1 == a.n_predict {
            break;
        }
        next = sampler.sample(s.decode(next)?);
        sampler.accept(next);
    }
    write!(out, "{}", dec.finish())?;
    writeln!(out)?;
    let gen_ms = ms_since(t2);
    // n_gen tokens were sampled, n_gen - 1 decode steps evaluated.
    let n_dec = n_gen.saturating_sub(1);
    eprintln!(
        "\nload {:.0} ms | prompt {} tokens in {:.1} ms ({:.2} t/s) | generation {} tokens in {:.1} ms ({:.2} t/s) | {} threads, {}",
        load_ms,
        prompt.len(),
        prompt_ms,
        prompt.len() as f64 * 1e3 / prompt_ms,
        n_dec,
        gen_ms,
        if gen_ms > 0.0 { n_dec as f64 * 1e3 / gen_ms } else { 0.0 },
        s.threads(),
        model.isa.name(),
    );
    Ok(())
}
