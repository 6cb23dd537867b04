//! `pocket run -m MODEL -p PROMPT [-n N] [-t THREADS] [-c CTX] [--temp T --seed S ...]
//! [-ctk TYPE -ctv TYPE]`: streams the continuation to stdout, timings to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pocket_model::forward::ms_since;
use pocket_model::generate::{generate, GenParams};
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
    let params = GenParams {
        n_predict: a.n_predict,
        stop: Vec::new(),
    };
    let mut failed = None;
    let g = generate(&mut s, &mut sampler, &prompt, &params, |piece| {
        let r = write!(out, "{piece}").and_then(|_| out.flush());
        // A closed stdout (`pocket run ... | head`) ends the generation.
        failed = r.err();
        failed.is_none()
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    writeln!(out)?;
    let t = g.timings;
    eprintln!(
        "\nload {:.0} ms | prompt {} tokens in {:.1} ms ({:.2} t/s) | generation {} tokens in {:.1} ms ({:.2} t/s) | {} threads, {}",
        load_ms,
        t.prompt_tokens,
        t.prompt_ms,
        t.prompt_tps(),
        t.decode_steps,
        t.gen_ms,
        t.decode_tps(),
        s.threads(),
        model.isa.name(),
    );
    Ok(())
}
