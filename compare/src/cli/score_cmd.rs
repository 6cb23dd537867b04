//! `pocket score -m MODEL -p PROMPT --choices A,B,C [--json]`: the probability of each
//! candidate continuation of the prompt, normalized over the candidates, with each one's
//! total log-probability and token count. The prompt is evaluated once and the candidates
//! run as sequences forked from its KV cache, all in one batch (`pocket_model::score`);
//! `--separately` scores each candidate in its own session instead (the baseline the
//! one-batch path is measured against).

use std::time::Instant;

use clap::Args;
use pocket_model::forward::ms_since;
use pocket_model::score::{score, score_separately, ScoreInput};
use pocket_model::{Model, ModelError};
use serde_json::json;

use super::engine_args::ModelArgs;
use super::CliResult;

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    engine: ModelArgs,
    /// The prompt (special tokens in it are parsed).
    #[arg(short, long)]
    prompt: String,
    /// The candidate continuations, comma-separated (repeat the flag for one with a comma).
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    choices: Vec<String>,
    /// Text put between the prompt and each candidate.
    #[arg(long, default_value = " ")]
    separator: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Score each candidate in its own session (prompt evaluated once per candidate).
    #[arg(long)]
    separately: bool,
}

pub fn run(a: ScoreArgs) -> CliResult {
    let t0 = Instant::now();
    let model = Model::load_with(&a.engine.model, a.engine.load_options())?;
    let load_ms = ms_since(t0);
    let texts: Vec<String> = a
        .choices
        .iter()
        .map(|c| format!("{}{c}", a.separator))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let input = ScoreInput::from_text(&model.tokenizer, &a.prompt, &refs)?;
    if input.n_ctx() > a.engine.ctx_size {
        let e = ModelError::ContextFull {
            need: input.n_ctx(),
            n_ctx: a.engine.ctx_size,
        };
        return Err(e.into());
    }
    let base = a.engine.session_options(input.n_ctx())?;
    let t1 = Instant::now();
    let scores = if a.separately {
        score_separately(&model, &base, &input)?
    } else {
        score(&model, &base, &input)?
    };
    let score_ms = ms_since(t1);
    let best = (0..scores.len())
        .max_by(|&i, &j| scores[i].prob.total_cmp(&scores[j].prob).then(j.cmp(&i)))
        .expect("at least one choice");
    if a.json {
        let choices: Vec<_> = a
            .choices
            .iter()
            .zip(&scores)
            .map(|(c, s)| {
                json!({"text": c, "probability": s.prob, "logprob": s.logprob, "n_tokens": s.n_tokens})
            })
            .collect();
        let v = json!({
            "choices": choices,
            "best": a.choices[best],
            "prompt_tokens": input.prefix.len(),
            "ms": score_ms,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let w = a.choices.iter().map(|c| c.len()).max().unwrap_or(0).max(6);
        println!(
            "{:<w$}  {:>11}  {:>12}  {:>6}",
            "choice", "probability", "logprob", "tokens"
        );
        for (i, (c, s)) in a.choices.iter().zip(&scores).enumerate() {
            let mark = if i == best { " *" } else { "" };
            println!(
                "{c:<w$}  {:>11.6}  {:>12.4}  {:>6}{mark}",
                s.prob, s.logprob, s.n_tokens
            );
        }
    }
    eprintln!(
        "load {load_ms:.0} ms | prompt {} tokens, {} choices ({} tokens) scored in {score_ms:.1} ms{}",
        input.prefix.len(),
        scores.len(),
        input.options.iter().map(Vec::len).sum::<usize>(),
        if a.separately { ", separately" } else { " in one batch" },
    );
    Ok(())
}
