//! `POST /v1/systemone` on `pocket serve`, with the assertions of llama.cpp's
//! `tools/server/tests/unit/test_systemone.py` (b11434) on both fixture models: answers in
//! the order asked, probabilities that sum to 1, `choice` the argmax, `score` the
//! expectation, the legend, confidences in [0, 1], usage counts; an object state equal to
//! its JSON text; the invalid requests (400 with an error body); images (501: pocket has
//! no vision input). And one check against an independent path: the route question's
//! probabilities equal `pocket score` on the prompt the README documents.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use serve_common::Server;

const STATE: &str = "I was charged twice for my order last week and nobody has replied.";

/// test_systemone.py's questions, as raw JSON: serde_json's `json!` would sort the keys,
/// and the order of the questions and of an object state is part of what is tested.
const QUESTIONS: &str = r#"{
    "route": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"billing": "payments and refunds", "shipping": null, "technical": null}
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgent is this?",
        "criteria": ["can wait", "this week", "today", "right now"]
    },
    "angry": {"type": "noul", "instructions": "Is the customer angry?"}
}"#;

fn questions() -> Value {
    serde_json::from_str(QUESTIONS).unwrap()
}

/// A request body with `state` (raw JSON text) and the questions, keys in this order.
fn body(state: &str, questions: &str) -> String {
    format!(r#"{{"state": {state}, "questions": {questions}}}"#)
}

fn state_str() -> String {
    Value::from(STATE).to_string()
}

/// `keys` appear in `text` in this order (serde_json's maps sort, so order is read raw).
fn in_order(text: &str, keys: &[&str]) -> bool {
    let pos: Vec<usize> = keys
        .iter()
        .map(|k| text.find(&format!("\"{k}\":")).unwrap_or(usize::MAX))
        .collect();
    pos.windows(2).all(|w| w[0] < w[1]) && pos[pos.len() - 1] != usize::MAX
}

fn post(s: &Server, body: &Value) -> (u16, String, Value) {
    post_text(s, &body.to_string())
}

fn post_text(s: &Server, body: &str) -> (u16, String, Value) {
    let (status, text) = s.post_raw("/v1/systemone", body, &[]);
    let v = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, text, v)
}

fn probs(a: &Value) -> Vec<(String, f64)> {
    a["probabilities"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect()
}

fn check_model(model: &Path) -> Server {
    let s = Server::start(model, &["-c", "2048"]);
    let (status, text, res) = post_text(&s, &body(&state_str(), QUESTIONS));
    assert_eq!(status, 200, "{text}");
    assert!(res["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(res["usage"]["output_tokens"], 0);
    assert!(in_order(&text, &["route", "urgency", "angry"]), "{text}");

    let route = &res["answers"]["route"];
    assert_eq!(route["type"], "choice");
    assert!(
        in_order(&text, &["billing", "shipping", "technical"]),
        "{text}"
    );
    let p = probs(route);
    assert_eq!(p.len(), 3);
    assert!((p.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-4);
    let best = p.iter().fold(&p[0], |b, x| if x.1 > b.1 { x } else { b });
    assert_eq!(route["choice"], best.0.as_str());
    let c = route["confidence"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&c));

    let urgency = &res["answers"]["urgency"];
    assert_eq!(urgency["type"], "score");
    assert_eq!(
        urgency["legend"],
        json!({"0": "can wait", "1": "this week", "2": "today", "3": "right now"})
    );
    let p = probs(urgency);
    let keys: Vec<&str> = p.iter().map(|x| x.0.as_str()).collect();
    assert_eq!(keys, ["0", "1", "2", "3"]);
    assert!((p.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-4);
    let expected: f64 = p.iter().enumerate().map(|(i, x)| i as f64 * x.1).sum();
    assert!((urgency["score"].as_f64().unwrap() - expected).abs() < 1e-4);
    let c = urgency["confidence"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&c));

    let angry = &res["answers"]["angry"];
    assert_eq!(angry["type"], "noul");
    let n = angry["noul"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&n));
    s
}

#[test]
fn systemone_answers_smollm2_and_match_pocket_score() {
    let model = common::smollm2();
    let s = check_model(&model);
    let (_, _, res) = post_text(&s, &body(&state_str(), QUESTIONS));
    // The same route probabilities from `pocket score` on the documented prompt: the chat
    // template (from the server's /apply-template) around the question's user turn, each
    // key as the reply.
    let turn = format!(
        "{STATE}\n\nQuestion: Which team should handle this?\nOptions:\n\
         - billing: payments and refunds\n- shipping\n- technical\n\
         Answer with one of the options only."
    );
    let prompt = s.post(
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": turn}]}),
    )["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["score", "-t", "2", "--json", "--separator", "", "-m"])
        .arg(&model)
        .args(["-p", &prompt, "--choices", "billing,shipping,technical"])
        .output()
        .unwrap();
    common::assert_success(&out, "pocket score");
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (i, key) in ["billing", "shipping", "technical"].iter().enumerate() {
        let a = res["answers"]["route"]["probabilities"][key]
            .as_f64()
            .unwrap();
        let b = cli["choices"][i]["probability"].as_f64().unwrap();
        assert!((a - b).abs() < 1e-4, "{key}: server {a}, pocket score {b}");
    }
}

#[test]
fn systemone_answers_gemma3() {
    check_model(&common::gemma3());
}

#[test]
fn systemone_object_state_invalid_requests_and_images() {
    let s = Server::start(&common::smollm2(), &["-c", "2048"]);
    let refund = r#"{"refund": {
        "type": "noul",
        "instructions": "Is a refund requested?",
        "criteria": {"false": "no refund is asked", "true": "a refund is asked"}
    }}"#;
    let state_obj = format!(r#"{{"ticket": {}, "plan": "pro"}}"#, state_str());
    let (st, text, obj) = post_text(&s, &body(&state_obj, refund));
    assert_eq!(st, 200, "{text}");
    let (st, text, txt) = post_text(
        &s,
        &body(&Value::from(state_obj.as_str()).to_string(), refund),
    );
    assert_eq!(st, 200, "{text}");
    assert_eq!(obj["usage"], txt["usage"]);
    let d = obj["answers"]["refund"]["noul"].as_f64().unwrap()
        - txt["answers"]["refund"]["noul"].as_f64().unwrap();
    assert!(d.abs() < 1e-4);

    let q = questions();
    for body in [
        json!({"questions": q}),
        json!({"state": STATE}),
        json!({"state": STATE, "questions": {}}),
        json!({"state": STATE, "questions": {"q": {"type": "unknown", "instructions": "x"}}}),
        json!({"state": STATE, "questions": {"q": {"type": "noul"}}}),
        json!({"state": STATE, "questions": {"q": {"type": "choice", "instructions": "x"}}}),
        json!({"state": STATE, "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}}),
        json!({"state": STATE, "questions": {"q": {"type": "score", "instructions": "x", "criteria": ["only one"]}}}),
    ] {
        let (st, text, v) = post(&s, &body);
        assert_eq!(st, 400, "{body}: {text}");
        assert!(v.get("error").is_some(), "{text}");
    }
    let (st, _, _) = post_text(&s, "{not json");
    assert_eq!(st, 400);

    let image = "data:image/png;base64,iVBORw0KGgo=";
    let (st, text, v) = post(
        &s,
        &json!({"state": STATE, "questions": q, "images": [image]}),
    );
    assert_eq!(st, 501, "{text}");
    assert!(v.get("error").is_some());
    let in_message = json!([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image}},
        {"type": "text", "text": STATE},
    ]}]);
    let (st, text, _) = post(&s, &json!({"state": in_message, "questions": q}));
    assert_eq!(st, 501, "{text}");
    // The server still answers after the errors.
    let (st, _, _) = post_text(&s, &body(&state_str(), refund));
    assert_eq!(st, 200);
}
