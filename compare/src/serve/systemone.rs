//! `POST /v1/systemone`: llama-server's typed decisions (request and response shapes of
//! llama.cpp's `tools/server/server-decision.cpp`). A request gives a `state` and named
//! `questions` of three kinds: `choice` (criteria: an object of keys and descriptions),
//! `score` (criteria: 2 to 10 levels) and `noul` (a yes/no question); each answer has the
//! options' `probabilities` and the `choice`, the expected `score` with its `legend`, or
//! the probability `noul` of "yes", and a `confidence` by TypeSafe's formulas.
//!
//! llama-server answers only for native decision models (501 otherwise). pocket answers a
//! native decision model the way llama-server does (openjev, lev, nimble:
//! `systemone_native.rs`; kev, laya and clef are a 501 naming the type), and any other
//! causal LM too: each question becomes one user turn of the model's chat template (the
//! state, the question, the options listed; see [`question_prompt`] and the README), and
//! each option's key is scored as the assistant's reply with `pocket_model::score` (the
//! prompt evaluated once, the options as forked sequences in one batch); the probabilities
//! are the softmax of the options' total log-probabilities. A GGUF that declares decision
//! temperatures (`<arch>.decision.temperature.<type>[.<bucket>]`, llama.cpp's keys) without
//! a decision type has them applied to that softmax, with llama.cpp's buckets.
//!
//! The scoring runs on a blocking thread in its own session (one at a time), beside the
//! engine thread and its slots rather than through them: a decision needs the logits of
//! every option row of one batch, which the generation scheduler does not return.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::Json as AxumJson;
use pocket_model::chat::ChatMessage;
use pocket_model::decision::{temperature, DecisionModel};
use pocket_model::score::{normalize, score_in, ScoreError, ScoreInput};
use pocket_model::{Model, Session, SessionOptions};

use super::error::{bad, ApiError};
use super::ordered_json::Json;
use super::routes::loaded;
use super::state::App;
use super::systemone_native;

/// Options one question may have (each is a KV-cache sequence of the scoring session).
const MAX_OPTIONS: usize = 64;

/// One decision at a time: each holds a session as large as its options.
pub static SCORING: Mutex<()> = Mutex::new(());

pub use pocket_model::decision::QuestionKind as Kind;

/// How many options a question may have, and the order of a noul question's two.
pub struct OptionRules {
    pub max: usize,
    /// `true` then `false` (openjev), instead of `false` then `true`.
    pub noul_true_first: bool,
    /// Who sets `max`, for the error: "pocket" or "this model" (llama-server's words).
    pub limit_of: &'static str,
}

/// Any causal LM's questions (the prompts of [`question_prompt`]).
pub const GENERIC_RULES: OptionRules = OptionRules {
    max: MAX_OPTIONS,
    noul_true_first: false,
    limit_of: "pocket",
};

#[derive(Clone, Debug)]
pub struct Opt {
    pub key: String,
    /// Null when the request gives none.
    pub description: Json,
}

#[derive(Clone, Debug)]
pub struct Question {
    pub id: String,
    pub kind: Kind,
    pub instructions: Json,
    /// For `noul`: "false" then "true" (openjev: "true" then "false").
    pub options: Vec<Opt>,
}

/// The questions of a request, in order, with llama-server's checks and messages.
pub fn parse_questions(body: &Json, rules: &OptionRules) -> Result<Vec<Question>, ApiError> {
    if !body.has("state") {
        return Err(bad("\"state\" must be provided"));
    }
    let qs = match body.get("questions") {
        Some(Json::Object(m)) if !m.is_empty() => m,
        _ => return Err(bad("\"questions\" must be a non-empty object")),
    };
    let mut out = Vec::with_capacity(qs.len());
    for (id, q) in qs {
        let err = |msg: &str| bad(format!("questions.{id}: {msg}"));
        if !matches!(q, Json::Object(_)) {
            return Err(err("must be an object"));
        }
        if !q.has("instructions") {
            return Err(err("\"instructions\" must be provided"));
        }
        let criteria = q.get("criteria").unwrap_or(&Json::Null);
        let (kind, options) = match q.get("type").and_then(Json::as_str).unwrap_or("") {
            "choice" => match criteria {
                Json::Object(m) if !m.is_empty() => {
                    let opts = m.iter().map(|(k, d)| Opt {
                        key: k.clone(),
                        description: d.clone(),
                    });
                    (Kind::Choice, opts.collect())
                }
                _ => return Err(err("\"criteria\" must be a non-empty object")),
            },
            "score" => match criteria {
                Json::Array(levels) if (2..=10).contains(&levels.len()) => {
                    let opts = levels.iter().enumerate().map(|(i, d)| Opt {
                        key: i.to_string(),
                        description: d.clone(),
                    });
                    (Kind::Score, opts.collect())
                }
                _ => return Err(err("\"criteria\" must be an array of 2 to 10 levels")),
            },
            "noul" => {
                if !matches!(criteria, Json::Null | Json::Object(_)) {
                    return Err(err("\"criteria\" must be an object"));
                }
                let opt = |key: &str| Opt {
                    key: key.to_string(),
                    description: criteria.get(key).cloned().unwrap_or(Json::Null),
                };
                match rules.noul_true_first {
                    true => (Kind::Noul, vec![opt("true"), opt("false")]),
                    false => (Kind::Noul, vec![opt("false"), opt("true")]),
                }
            }
            _ => return Err(err("\"type\" must be one of: choice, score, noul")),
        };
        if options.len() > rules.max {
            return Err(err(&format!(
                "too many options ({}), {} supports at most {}",
                options.len(),
                rules.limit_of,
                rules.max
            )));
        }
        out.push(Question {
            id: id.clone(),
            kind,
            instructions: q.get("instructions").cloned().unwrap_or(Json::Null),
            options,
        });
    }
    Ok(out)
}

/// Whether the request carries images (pocket has no vision input: llama-server's 501 for
/// a server without `--mmproj`); `videos` and a malformed `images` are 400s, as there.
fn has_images(body: &Json) -> Result<bool, ApiError> {
    if matches!(body.get("videos"), Some(Json::Array(v)) if !v.is_empty())
        || matches!(body.get("videos"), Some(v) if !matches!(v, Json::Null | Json::Array(_)))
    {
        return Err(bad("\"videos\" is not supported"));
    }
    let listed = match body.get("images") {
        None | Some(Json::Null) => false,
        Some(Json::Array(a)) => !a.is_empty(),
        Some(_) => return Err(bad("\"images\" must be an array")),
    };
    let state = body.get("state").unwrap_or(&Json::Null);
    let messages = state.get("messages").unwrap_or(state);
    let in_messages = match messages {
        Json::Array(msgs) => msgs.iter().any(|m| match m.get("content") {
            Some(Json::Array(parts)) => parts
                .iter()
                .any(|p| p.get("type").and_then(Json::as_str) == Some("image_url")),
            _ => false,
        }),
        _ => false,
    };
    Ok(listed || in_messages)
}

/// The state as the model reads it: a string as it is, chat messages as `role: text`
/// lines, any other value as JSON text.
fn state_text(state: &Json) -> String {
    let messages = state.get("messages").unwrap_or(state);
    let Json::Array(msgs) = messages else {
        return state.to_text();
    };
    if !msgs.iter().all(|m| m.has("content")) {
        return state.to_text();
    }
    let line = |m: &Json| {
        let role = m.get("role").map_or("user".into(), Json::to_text);
        let text = match m.get("content") {
            Some(Json::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").map(Json::to_text))
                .collect::<Vec<_>>()
                .join(" "),
            Some(c) => c.to_text(),
            None => String::new(),
        };
        format!("{role}: {text}")
    };
    msgs.iter().map(line).collect::<Vec<_>>().join("\n")
}

/// The key the model answers with: a choice's own key, a score's level number, and
/// "yes"/"no" for a noul question (its options are "true"/"false").
fn answer_key(kind: Kind, key: &str) -> &str {
    match (kind, key) {
        (Kind::Noul, "true") => "yes",
        (Kind::Noul, _) => "no",
        _ => key,
    }
}

/// The user turn of one question (documented in the README, "Scoring and decisions").
pub fn question_prompt(state: &str, q: &Question) -> String {
    let mut p = format!(
        "{state}\n\nQuestion: {}\nOptions:\n",
        q.instructions.to_text()
    );
    // A noul question lists "yes" first, as people ask it.
    let order: Vec<&Opt> = match q.kind {
        Kind::Noul => q.options.iter().rev().collect(),
        _ => q.options.iter().collect(),
    };
    for o in order {
        let key = answer_key(q.kind, &o.key);
        match &o.description {
            Json::Null => p.push_str(&format!("- {key}\n")),
            d => p.push_str(&format!("- {key}: {}\n", d.to_text())),
        }
    }
    p.push_str("Answer with one of the options only.");
    p
}

fn confidence_choice(p: &[f64]) -> f64 {
    if p.len() < 2 {
        return 1.0;
    }
    let uniform = 1.0 / p.len() as f64;
    let max = p.iter().copied().fold(0.0, f64::max);
    ((max - uniform) / (1.0 - uniform)).max(0.0)
}

fn confidence_score(p: &[f64]) -> f64 {
    let n = p.len();
    if n < 2 {
        return 1.0;
    }
    let mode = argmax(p);
    let (mut dist, mut uniform) = (0.0, 0.0);
    for (i, &pi) in p.iter().enumerate() {
        dist += pi * (i as f64 - mode as f64).abs();
        uniform += (i as f64 - (n - 1) as f64 / 2.0).abs() / n as f64;
    }
    (1.0 - dist / uniform).max(0.0)
}

/// The first index of the largest value.
fn argmax(p: &[f64]) -> usize {
    (0..p.len()).fold(0, |b, i| if p[i] > p[b] { i } else { b })
}

/// An answer in llama-server's shape, from the options' probabilities.
pub fn format_answer(q: &Question, probs: &[f64]) -> Json {
    let mut a = Json::object();
    a.insert("type", q.kind.name());
    let mut probabilities = Json::object();
    for (o, &p) in q.options.iter().zip(probs) {
        probabilities.insert(o.key.clone(), p);
    }
    match q.kind {
        Kind::Noul => {
            let i = q.options.iter().position(|o| o.key == "true").unwrap_or(1);
            a.insert("noul", probs[i]);
        }
        Kind::Choice => {
            a.insert("choice", q.options[argmax(probs)].key.clone());
            a.insert("probabilities", probabilities);
            a.insert("confidence", confidence_choice(probs));
        }
        Kind::Score => {
            let expected: f64 = probs.iter().enumerate().map(|(i, p)| i as f64 * p).sum();
            let mut legend = Json::object();
            for o in &q.options {
                legend.insert(o.key.clone(), o.description.clone());
            }
            a.insert("score", expected);
            a.insert("legend", legend);
            a.insert("probabilities", probabilities);
            a.insert("confidence", confidence_score(probs));
        }
    }
    a
}

/// What the scoring thread needs from the request and the server.
struct DecisionWork {
    model: Arc<Model>,
    /// Each question's chat prompt.
    prompts: Vec<String>,
    questions: Vec<Question>,
    session: SessionOptions,
    n_ctx_max: usize,
}

/// Scores every question; the answers and the tokens evaluated.
fn decide(w: DecisionWork) -> Result<(Json, usize), ApiError> {
    let m = &*w.model;
    let mut inputs = Vec::with_capacity(w.questions.len());
    for (q, prompt) in w.questions.iter().zip(&w.prompts) {
        let keys: Vec<&str> = q
            .options
            .iter()
            .map(|o| answer_key(q.kind, &o.key))
            .collect();
        let input = ScoreInput::from_text(&m.tokenizer, prompt, &keys).map_err(|e| match e {
            ScoreError::Model(e) => ApiError::Server(e.to_string()),
            e => bad(format!("questions.{}: {e}", q.id)),
        })?;
        if input.n_ctx() > w.n_ctx_max {
            return Err(ApiError::ExceedsContext {
                n_prompt: input.n_ctx(),
                n_ctx: w.n_ctx_max,
            });
        }
        inputs.push(input);
    }
    // One session for the request, as large as its largest question.
    let n_ctx = inputs.iter().map(ScoreInput::n_ctx).max().unwrap_or(1);
    let n_seq = inputs.iter().map(|i| i.options.len()).max().unwrap_or(1);
    let o = SessionOptions {
        n_ctx,
        n_seq,
        ..w.session
    };
    let _one_at_a_time = SCORING.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Session::try_new(m, o).map_err(|e| ApiError::Server(e.to_string()))?;
    let g = m.gguf();
    let arch = g.get_str("general.architecture").unwrap_or_default();
    // Temperatures a GGUF declares without a decision type (one with a type is answered
    // natively, systemone_native.rs), with llama.cpp's buckets.
    let prefix = format!("{arch}.decision.temperature.");
    let lookup = |name: &str| {
        let t = g.get(&format!("{prefix}{name}")).and_then(|v| v.as_f64());
        t.filter(|&t| t > 0.0 && t.is_finite())
    };
    let mut answers = Json::object();
    let mut n_tokens = 0;
    for (q, input) in w.questions.iter().zip(&inputs) {
        let scores = score_in(&mut s, input).map_err(|e| ApiError::Server(e.to_string()))?;
        let lps: Vec<f64> = scores.iter().map(|s| s.logprob).collect();
        let t = temperature(&lookup, false, q.kind, q.options.len());
        let probs = normalize(&lps, t);
        answers.insert(q.id.clone(), format_answer(q, &probs));
        n_tokens += input.prefix.len() + input.options.iter().map(Vec::len).sum::<usize>();
    }
    Ok((answers, n_tokens))
}

/// The handler.
pub async fn systemone(
    State(app): State<Arc<App>>,
    body: Bytes,
) -> Result<AxumJson<Json>, ApiError> {
    let l = loaded(&app)?;
    let body: Json =
        serde_json::from_slice(&body).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    if !matches!(body, Json::Object(_)) {
        return Err(bad("the request body must be a JSON object"));
    }
    let rules = match &l.decision {
        Some(DecisionModel::Unsupported(t)) => {
            return Err(ApiError::NotSupported(format!(
                "decision model type {} reads {}, which pocket does not run; pocket runs the types read from label logits (openjev, lev, nimble)",
                t.name(),
                t.head()
            )))
        }
        Some(DecisionModel::Labels(d)) => OptionRules {
            max: d.max_options(),
            noul_true_first: d.noul_true_first(),
            limit_of: "this model",
        },
        None => GENERIC_RULES,
    };
    let questions = parse_questions(&body, &rules)?;
    if has_images(&body)? {
        return Err(ApiError::NotSupported(
            "This server does not support image input for decisions. For a model that supports it, start it with `--mmproj`".into(),
        ));
    }
    if matches!(l.decision, Some(DecisionModel::Labels(_))) {
        let state = body.get("state").cloned().unwrap_or(Json::Null);
        return systemone_native::answer(app.clone(), questions, state).await;
    }
    let state = state_text(body.get("state").unwrap_or(&Json::Null));
    let mut prompts = Vec::with_capacity(questions.len());
    for q in &questions {
        let turn = [ChatMessage::new("user", question_prompt(&state, q))];
        let p = l
            .template
            .render(&turn, true)
            .map_err(|e| bad(format!("chat template: {e}")))?;
        prompts.push(p);
    }
    let session = app.args.session_options(false);
    let work = DecisionWork {
        model: l.model.clone(),
        prompts,
        questions,
        session,
        n_ctx_max: l.n_ctx_slot,
    };
    let (answers, n_tokens) = tokio::task::spawn_blocking(move || decide(work))
        .await
        .map_err(|e| ApiError::Server(format!("decision thread: {e}")))??;
    Ok(AxumJson(response(&app, answers, n_tokens)))
}

/// llama-server's response: the model, the answers, the usage (counted in the metrics).
pub fn response(app: &App, answers: Json, n_tokens: usize) -> Json {
    app.shared.metrics.lock().unwrap().prompt_tokens += n_tokens as u64;
    let mut out = Json::object();
    out.insert("model", app.model_name.clone());
    out.insert("answers", answers);
    let mut usage = Json::object();
    usage.insert("input_tokens", n_tokens);
    usage.insert("output_tokens", 0usize);
    out.insert("usage", usage);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<Question>, ApiError> {
        parse_questions(&serde_json::from_str::<Json>(s).unwrap(), &GENERIC_RULES)
    }

    #[test]
    fn questions_keep_order_and_bad_ones_are_400() {
        let qs = parse(
            r#"{"state": "s", "questions": {
                "z": {"type": "noul", "instructions": "?"},
                "a": {"type": "choice", "instructions": "?", "criteria": {"y": null, "b": "desc"}},
                "m": {"type": "score", "instructions": "?", "criteria": ["lo", "hi"]}}}"#,
        )
        .unwrap();
        let ids: Vec<&str> = qs.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["z", "a", "m"]);
        let keys: Vec<&str> = qs[1].options.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["y", "b"]);
        for body in [
            r#"{"questions": {"q": {"type": "noul", "instructions": "x"}}}"#,
            r#"{"state": "s"}"#,
            r#"{"state": "s", "questions": {}}"#,
            r#"{"state": "s", "questions": {"q": {"type": "unknown", "instructions": "x"}}}"#,
            r#"{"state": "s", "questions": {"q": {"type": "noul"}}}"#,
            r#"{"state": "s", "questions": {"q": {"type": "choice", "instructions": "x"}}}"#,
            r#"{"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}}"#,
            r#"{"state": "s", "questions": {"q": {"type": "score", "instructions": "x", "criteria": ["one"]}}}"#,
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status().as_u16(), 400, "{body}: {e}");
        }
    }

    #[test]
    fn answers_follow_llama_server_formulas() {
        let qs = parse(
            r#"{"state": "s", "questions": {
                "c": {"type": "choice", "instructions": "?", "criteria": {"x": null, "y": null, "z": null, "w": null}},
                "s": {"type": "score", "instructions": "?", "criteria": ["a", "b", "c"]},
                "n": {"type": "noul", "instructions": "?"}}}"#,
        )
        .unwrap();
        let c = format_answer(&qs[0], &[0.1, 0.6, 0.2, 0.1]);
        assert_eq!(c.get("choice").and_then(Json::as_str), Some("y"));
        let num = |v: Option<&Json>| match v {
            Some(Json::Number(n)) => n.as_f64().unwrap(),
            v => panic!("{v:?}"),
        };
        // (0.6 - 1/4) / (1 - 1/4)
        assert!((num(c.get("confidence")) - 0.35 / 0.75).abs() < 1e-12);
        let s = format_answer(&qs[1], &[0.2, 0.3, 0.5]);
        assert_eq!(s.get("score"), Some(&Json::from(0.3 + 2.0 * 0.5)));
        // Mode 2: mean distance 0.2*2 + 0.3 = 0.7; uniform's (1 + 0 + 1) / 3.
        let want: f64 = 1.0 - 0.7 / (2.0 / 3.0);
        assert!((num(s.get("confidence")) - want.max(0.0)).abs() < 1e-12);
        let n = format_answer(&qs[2], &[0.25, 0.75]);
        assert_eq!(n.get("noul"), Some(&Json::from(0.75)));
        assert!(n.get("probabilities").is_none());
    }

    #[test]
    fn a_native_model_sets_the_option_limit_and_the_noul_order() {
        let rules = OptionRules {
            max: 2,
            noul_true_first: true,
            limit_of: "this model",
        };
        let body = |q: &str| {
            serde_json::from_str::<Json>(&format!(r#"{{"state": "s", "questions": {{"q": {q}}}}}"#))
                .unwrap()
        };
        let qs =
            parse_questions(&body(r#"{"type": "noul", "instructions": "?"}"#), &rules).unwrap();
        let keys: Vec<&str> = qs[0].options.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["true", "false"]);
        let e = parse_questions(
            &body(r#"{"type": "score", "instructions": "?", "criteria": ["a", "b", "c"]}"#),
            &rules,
        )
        .unwrap_err();
        assert_eq!(e.status().as_u16(), 400);
        assert_eq!(
            e.to_string(),
            "questions.q: too many options (3), this model supports at most 2"
        );
    }

    #[test]
    fn object_state_reads_as_its_json_text() {
        let obj: Json = serde_json::from_str(r#"{"ticket": "late", "plan": "pro"}"#).unwrap();
        assert_eq!(state_text(&obj), r#"{"ticket": "late", "plan": "pro"}"#);
        let msgs: Json = serde_json::from_str(
            r#"[{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "yo"}]"#,
        )
        .unwrap();
        assert_eq!(state_text(&msgs), "user: hi\nassistant: yo");
    }
}
