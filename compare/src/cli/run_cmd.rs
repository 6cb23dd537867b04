//! `pocket run -m MODEL (-p PROMPT | -f FILE) [-n N] [-t THREADS] [-c CTX] [--temp T --seed S ...]
//! [-r STOP ...] [--ignore-eos] [-ctk TYPE -ctv TYPE]
//! [--grammar G | --grammar-file F | -j SCHEMA | -jf F]`: streams the continuation to stdout, timings to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pocket_model::forward::ms_since;
use pocket_model::generate::{generate_with, GenParams};
use pocket_model::{Model, Session};

use super::engine_args::ModelArgs;
use super::gen_args::{constrain, DecodeArgs};
use super::{CliError, CliResult};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    engine: ModelArgs,
    /// The prompt (special tokens in it are parsed).
    #[arg(short, long, required_unless_present = "file", conflicts_with = "file")]
    prompt: Option<String>,
    /// A file holding the prompt, less one trailing newline (llama.cpp's `-f`).
    #[arg(short = 'f', long, value_name = "FNAME")]
    file: Option<PathBuf>,
    /// Stop when the text reaches PROMPT (cut before it; repeat for several; llama.cpp's
    /// reverse prompt).
    #[arg(short = 'r', long = "reverse-prompt", value_name = "PROMPT")]
    reverse_prompt: Vec<String>,
    /// Keep generating past end-of-generation tokens (they are never sampled).
    #[arg(long)]
    ignore_eos: bool,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 64)]
    n_predict: usize,
    #[command(flatten)]
    decode: DecodeArgs,
    /// Do not echo the prompt (llama.cpp's `--no-display-prompt`).
    #[arg(long, visible_alias = "no-display-prompt")]
    no_echo: bool,
    /// After the text, print each generated token's probability and the N most likely
    /// tokens of its step, most likely first (llama.cpp's `--n-probs`; before sampling).
    #[arg(long, value_name = "N")]
    n_probs: Option<usize>,
}

pub fn run(a: RunArgs) -> CliResult {
    let t0 = Instant::now();
    let model = a.engine.load_model()?;
    let draft = match a.decode.spec.draft_path()? {
        Some(p) => Some(Model::load_with(p, a.engine.load_options())?),
        None => None,
    };
    let load_ms = ms_since(t0);
    let tok = &model.tokenizer;
    let grammar = a.decode.grammar.compile(tok)?;
    let text = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            let mut t = std::fs::read_to_string(f)
                .map_err(|e| CliError::PromptFile { path: f.clone(), e })?;
            // As llama.cpp's `-f`: one trailing newline (the file's last line end) goes.
            if t.ends_with('\n') {
                t.pop();
            }
            t
        }
        (None, None) => unreachable!("clap requires -p or -f"),
    };
    let prompt = tok.encode(&text, true, true);
    if prompt.is_empty() {
        return Err(CliError::EmptyPrompt.into());
    }
    let n_ctx = a.engine.ctx_size;
    if prompt.len() + a.n_predict > n_ctx {
        return Err(CliError::PromptTooLong {
            prompt: prompt.len(),
            n_predict: a.n_predict,
            n_ctx,
        }
        .into());
    }
    let mut s = Session::try_new(&model, a.engine.session_options(n_ctx)?)?;
    let mut spec =
        a.decode
            .spec
            .speculator(&model, draft.as_ref(), a.engine.session_options(n_ctx)?)?;
    if let Some(top) = a.n_probs.filter(|&k| k > 0) {
        if spec.is_some() {
            return Err(CliError::NProbsWithSpeculation.into());
        }
        let run = super::run_probs::ProbsRun {
            prompt_text: &text,
            echo: !a.no_echo,
            prompt: &prompt,
            n_predict: a.n_predict,
            top,
        };
        return run.run(&mut s, &mut a.decode.sampling.sampler());
    }
    let mut out = std::io::stdout().lock();
    if !a.no_echo {
        write!(out, "{text}")?;
        out.flush()?;
    }
    let mut sampler = a.decode.sampling.sampler();
    constrain(&mut sampler, grammar.as_ref());
    let params = GenParams {
        n_predict: a.n_predict,
        stop: a.reverse_prompt.clone(),
        ignore_eos: a.ignore_eos,
    };
    let mut failed = None;
    let g = generate_with(
        &mut s,
        &mut sampler,
        spec.as_mut(),
        &prompt,
        &params,
        |piece| {
            let r = write!(out, "{piece}").and_then(|_| out.flush());
            // A closed stdout (`pocket run ... | head`) ends the generation.
            failed = r.err();
            failed.is_none()
        },
    )?;
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
    if spec.is_some() {
        let sp = g.spec;
        eprintln!(
            "speculative: drafted {} accepted {} ({:.1} %) in {} verify steps, {:.2} tokens per step",
            sp.drafted,
            sp.accepted,
            100.0 * sp.acceptance(),
            sp.verify_steps,
            t.decode_steps as f64 / (t.decode_steps - sp.accepted).max(1) as f64,
        );
    }
    Ok(())
}
