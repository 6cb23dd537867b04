//! `/v1/systemone` on a native decision model (openjev, lev, nimble: see
//! `pocket_model::decision` for what llama-server reads from the GGUF and how it answers),
//! the way llama.cpp b11434's `server-decision.cpp` does it:
//!
//! - The template gets, as raw JSON values (it prints the ones that are not strings as JSON
//!   itself): `id`, `type`, `instructions`, `state` (the request's, unchanged), `options`
//!   (`{key, description}` in the order shown, plus `label` for lev and nimble), for nimble
//!   `questions` (every question of the request, options in their first order), and
//!   `images` (always empty here: pocket has no vision input, a request with images is a
//!   501 before this). lev gets every object's keys sorted, as it was trained.
//! - Each prompt is tokenized without BOS, special tokens parsed, and evaluated in one
//!   session; consecutive prompts share their common prefix (llama-server groups the
//!   questions of a request on slots for the same effect). The label logits at the last
//!   token are the scores; the answers follow `LabelDecision::probabilities` and the
//!   generic path's `format_answer`. `usage.input_tokens` counts every prompt's tokens.

use std::sync::Arc;

use axum::Json as AxumJson;
use pocket_model::decision::{DecisionModel, DecisionType, LabelDecision, LEV_N_RATINGS};
use pocket_model::{Session, SessionOptions};

use super::error::{bad, ApiError};
use super::ordered_json::Json;
use super::routes::loaded;
use super::state::App;
use super::systemone::{format_answer, response, Kind, Question, SCORING};

/// One prompt to evaluate: a variant of a question, and the label tokens read after it.
struct Prompt {
    question: usize,
    tokens: Vec<u32>,
    labels: Vec<u32>,
}

/// The options as the template sees them in `variant` (the second is in reverse order).
fn options_input(d: &LabelDecision, q: &Question, variant: usize) -> Json {
    let n = q.options.len();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let o = &q.options[if variant == 0 { i } else { n - 1 - i }];
        let mut opt = Json::object();
        opt.insert("key", o.key.clone());
        opt.insert("description", o.description.clone());
        if let Some(label) = d.label_texts.get(i) {
            opt.insert("label", label.clone());
        }
        out.push(opt);
    }
    Json::Array(out)
}

/// Every object's keys in byte order (llama-server's `decision_sort_keys`).
fn sort_keys(v: Json) -> Json {
    match v {
        Json::Array(a) => Json::Array(a.into_iter().map(sort_keys).collect()),
        Json::Object(m) => {
            let mut m: Vec<(String, Json)> =
                m.into_iter().map(|(k, v)| (k, sort_keys(v))).collect();
            m.sort_by(|a, b| a.0.cmp(&b.0));
            Json::Object(m)
        }
        v => v,
    }
}

/// The template's variables for one variant of `q` (llama-server's `render`).
fn template_input(
    d: &LabelDecision,
    state: &Json,
    questions: &[Question],
    q: &Question,
    variant: usize,
) -> Json {
    let mut inp = Json::object();
    inp.insert("id", q.id.clone());
    inp.insert("type", q.kind.name());
    inp.insert("instructions", q.instructions.clone());
    inp.insert("state", state.clone());
    inp.insert("options", options_input(d, q, variant));
    if d.kind == DecisionType::Nimble {
        let all = questions.iter().map(|q| {
            let mut e = Json::object();
            e.insert("id", q.id.clone());
            e.insert("type", q.kind.name());
            e.insert("instructions", q.instructions.clone());
            e.insert("options", options_input(d, q, 0));
            e
        });
        inp.insert("questions", Json::Array(all.collect()));
    }
    if d.kind == DecisionType::Lev {
        inp = sort_keys(inp);
    }
    inp.insert("images", Json::Array(Vec::new()));
    inp
}

/// Every prompt of the request, in llama-server's task order.
fn prompts(
    d: &LabelDecision,
    tok: &pocket_model::tokenizer::Tokenizer,
    state: &Json,
    questions: &[Question],
) -> Result<Vec<Prompt>, ApiError> {
    let mut out = Vec::new();
    for (qi, q) in questions.iter().enumerate() {
        let n_outputs = d.n_outputs(q.kind, q.options.len());
        for variant in 0..d.n_variants(q.kind, q.options.len()) {
            let inp = template_input(d, state, questions, q, variant);
            let text = d
                .template
                .render_value(&inp)
                .map_err(|e| bad(format!("questions.{}: systemone template: {e}", q.id)))?;
            out.push(Prompt {
                question: qi,
                tokens: tok.encode(&text, false, true),
                labels: d.labels[..n_outputs].to_vec(),
            });
        }
    }
    Ok(out)
}

/// The raw scores of every prompt: the label logits at its last token.
fn evaluate(
    s: &mut Session,
    prompts: &[Prompt],
) -> Result<Vec<Vec<f32>>, pocket_model::ModelError> {
    let mut out = Vec::with_capacity(prompts.len());
    for p in prompts {
        let kept = s.reuse_prefix(&p.tokens);
        let rest = &p.tokens[kept..];
        let logits = s.forward(rest, rest.len() - 1..rest.len())?;
        out.push(p.labels.iter().map(|&t| logits[t as usize]).collect());
    }
    Ok(out)
}

/// The answer of `q` from its variants' scores.
fn answer_of(d: &LabelDecision, q: &Question, scores: &[Vec<f32>]) -> Json {
    let t = d.temperature(q.kind, q.options.len());
    let probs = LabelDecision::probabilities(scores, t);
    if d.kind == DecisionType::Lev && q.kind == Kind::Noul {
        // The expected rating, 0 = certainly no .. 8 = certainly yes, scaled to [0, 1].
        let top = (LEV_N_RATINGS - 1) as f64;
        let noul: f64 = probs
            .iter()
            .enumerate()
            .map(|(i, p)| p * i as f64 / top)
            .sum();
        let mut a = Json::object();
        a.insert("type", q.kind.name());
        a.insert("noul", noul);
        return a;
    }
    format_answer(q, &probs)
}

/// Answers `questions` about `state` with the loaded native decision model.
pub async fn answer(
    app: Arc<App>,
    questions: Vec<Question>,
    state: Json,
) -> Result<AxumJson<Json>, ApiError> {
    let work = app.clone();
    let (answers, n_tokens) =
        tokio::task::spawn_blocking(move || decide(&work, &questions, &state))
            .await
            .map_err(|e| ApiError::Server(format!("decision thread: {e}")))??;
    Ok(AxumJson(response(&app, answers, n_tokens)))
}

/// On a blocking thread: renders, evaluates and answers; the answers and the tokens read.
fn decide(app: &App, questions: &[Question], state: &Json) -> Result<(Json, usize), ApiError> {
    let l = loaded(app)?;
    let Some(DecisionModel::Labels(d)) = &l.decision else {
        return Err(ApiError::Server(
            "the model is not a label decision model".into(),
        ));
    };
    let prompts = prompts(d, &l.model.tokenizer, state, questions)?;
    let n_ctx = prompts.iter().map(|p| p.tokens.len()).max().unwrap_or(0);
    if let Some(p) = prompts.iter().find(|p| p.tokens.len() > l.n_ctx_slot) {
        return Err(ApiError::ExceedsContext {
            n_prompt: p.tokens.len(),
            n_ctx: l.n_ctx_slot,
        });
    }
    if prompts.iter().any(|p| p.tokens.is_empty()) {
        return Err(ApiError::Server(
            "the systemone template rendered an empty prompt".into(),
        ));
    }
    let o = SessionOptions {
        n_ctx,
        n_seq: 1,
        ..app.args.session_options(false)
    };
    let scores = {
        let _one_at_a_time = SCORING.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Session::try_new(&l.model, o).map_err(|e| ApiError::Server(e.to_string()))?;
        evaluate(&mut s, &prompts).map_err(|e| ApiError::Server(e.to_string()))?
    };
    let mut answers = Json::object();
    for (qi, q) in questions.iter().enumerate() {
        let of_q: Vec<Vec<f32>> = prompts
            .iter()
            .zip(&scores)
            .filter(|(p, _)| p.question == qi)
            .map(|(_, s)| s.clone())
            .collect();
        answers.insert(q.id.clone(), answer_of(d, q, &of_q));
    }
    let n_tokens = prompts.iter().map(|p| p.tokens.len()).sum();
    Ok((answers, n_tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lev_sorts_keys_at_every_depth() {
        let v: Json =
            serde_json::from_str(r#"{"b": [{"z": 1, "a": 2}], "a": {"y": 0, "x": 1}}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&sort_keys(v)).unwrap(),
            r#"{"a":{"x":1,"y":0},"b":[{"a":2,"z":1}]}"#
        );
    }
}
