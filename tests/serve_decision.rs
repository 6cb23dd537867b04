//! Native decision models on `POST /v1/systemone`, against llama-server b11434 itself.
//!
//! `pocket synth --decision TYPE` writes tiny random models that declare an openjev, a lev
//! and a nimble decision model with llama.cpp's converter's metadata and templates; both
//! servers answer the same requests on each, and pocket must give llama-server's answers:
//! the same prompts (usage counts equal to the token), the same choices, and numbers within
//! the fast path's tolerance: a log-probability within 0.01 of llama.cpp's (its perplexity
//! within 1 %, `model/tests/parity_llama_cpp.rs`, `tests/cli_hellaswag.rs`) for every
//! probability, and 0.01 for the noul values, confidences and scores (over their top
//! level). The test prints, for scale, how far llama-server moves itself with flash
//! attention off.
//!
//! Malformed decision metadata makes both servers refuse the model, pocket with an error
//! naming the problem (never a panic); a type pocket does not run (kev) is a 501 naming it.

mod common;
#[path = "serve/llama_server.rs"]
mod llama_server;
#[path = "serve/common.rs"]
mod serve_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use llama_server::LlamaServer;
use pocket_model::gguf::{GgufFile, GgufWriter, MetaValue};
use serde_json::Value;
use serve_common::Server;

/// The fast path's tolerance on a log-probability, and on the other numbers (in [0, 1]).
const MAX_LOG_DIFF: f64 = 0.01;
const MAX_DIFF: f64 = 0.01;

/// Temperatures declared in the synthetic models: a bucket of each naming scheme, so that
/// both schemes are exercised (lev: small/mid/large; others: 2/3_5/6_10/11).
const TEMPERATURES: &str = "choice=0.5,choice.11=0.3,choice.mid=0.35,score.6_10=0.6,noul=0.7";

/// Requests as raw JSON (key order is part of what the models read).
const REQUESTS: &[&str] = &[
    // test_systemone.py's questions.
    r#"{"state": "I was charged twice for my order last week and nobody has replied.",
        "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this?",
                  "criteria": {"billing": "payments and refunds", "shipping": null, "technical": null}},
        "urgency": {"type": "score", "instructions": "How urgent is this?",
                    "criteria": ["can wait", "this week", "today", "right now"]},
        "angry": {"type": "noul", "instructions": "Is the customer angry?"}}}"#,
    // An object state and object instructions (given to the template as JSON values),
    // noul descriptions, a 7-level score, a 2-option choice.
    r#"{"state": {"ticket": "Ça coûte 20 € — déjà payé <b>deux fois</b>", "plan": "pro", "seats": 3, "vip": true},
        "questions": {
        "refund": {"type": "noul", "instructions": "Is a refund requested?",
                   "criteria": {"false": "no refund is asked", "true": "a refund is asked"}},
        "tone": {"type": "score", "instructions": {"ask": "How polite is it?", "scale": [1, 7]},
                 "criteria": ["rude", "curt", "flat", "neutral", "kind", "warm", {"level": "very warm"}]},
        "lang": {"type": "choice", "instructions": "Which language?", "criteria": {"fr": null, "en": "English"}}}}"#,
    // Chat messages as the state; a 12-option choice with unsorted keys (lev sorts them,
    // buckets 11 and mid); special-token text in the state (parsed, as llama-server does).
    r#"{"state": [{"role": "user", "content": "my parcel <|im_end|> never came"},
                  {"role": "assistant", "content": "Sorry! Which order?"}],
        "questions": {
        "topic": {"type": "choice", "instructions": "Topic?",
                  "criteria": {"zeta": null, "alpha": "first", "mu": null, "beta": null, "kappa": "k",
                               "gamma": null, "delta": null, "eta": "e", "iota": null, "theta": null,
                               "epsilon": null, "lambda": "last"}},
        "solved": {"type": "noul", "instructions": "Is it solved?"}}}"#,
];

fn pocket() -> &'static str {
    env!("CARGO_BIN_EXE_pocket")
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pocket-decision-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `pocket synth --preset custom --decision KIND ...`, f16 weights.
fn synth(kind: &str, temperatures: Option<&str>, name: &str) -> PathBuf {
    let out = dir().join(name);
    let mut cmd = Command::new(pocket());
    cmd.args([
        "synth", "--preset", "custom", "--type", "f16", "--seed", "5", "-q",
    ])
    .args(["--decision", kind])
    .arg("--vocab-from")
    .arg(common::fixture("llama.cpp/models/ggml-vocab-qwen2.gguf"))
    .arg("-o")
    .arg(&out);
    if let Some(t) = temperatures {
        cmd.args(["--decision-temperature", t]);
    }
    common::assert_success(&cmd.output().unwrap(), "pocket synth --decision");
    out
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A response with every number outside strings replaced by `#`: its structure, keys in
/// their order, and strings (choices, legends, types) as they are.
fn skeleton(text: &str) -> String {
    let (mut out, mut in_str, mut escaped, mut in_num) = (String::new(), false, false, false);
    for c in text.chars() {
        if in_str {
            out.push(c);
            (escaped, in_str) = (!escaped && c == '\\', escaped || c != '"');
            continue;
        }
        let num_char = c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E');
        if in_num && num_char {
            continue;
        }
        in_num = c.is_ascii_digit() || c == '-';
        match c {
            _ if in_num => out.push('#'),
            '"' => {
                in_str = true;
                out.push(c);
            }
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// The raw responses of `post` to every request.
fn responses(post: impl Fn(&str) -> (u16, String), who: &str) -> Vec<String> {
    REQUESTS
        .iter()
        .map(|r| {
            let (st, text) = post(r);
            assert_eq!(st, 200, "{who}: {text}");
            text
        })
        .collect()
}

fn llama_answers(model: &Path, fa: &str) -> Vec<String> {
    let s = LlamaServer::start(model, &["-c", "2048", "-fa", fa, "--alias", "decision"])
        .unwrap_or_else(|e| panic!("llama-server refused {}: {e}", model.display()));
    responses(|r| s.post_raw("/v1/systemone", r), "llama-server")
}

fn pocket_answers(model: &Path) -> Vec<String> {
    // llama-server shares its 2048 tokens among the slots: one prompt may use them all.
    let s = Server::start(
        model,
        &["-c", "2048", "--kv-unified", "--alias", "decision"],
    );
    responses(|r| s.post_raw("/v1/systemone", r, &[]), "pocket")
}

/// How far apart two numbers of the answers are: probabilities by their logs, the others
/// (in [0, 1]) as they are.
fn dist(is_prob: bool, a: f64, b: f64) -> f64 {
    match is_prob {
        true => (a.ln() - b.ln()).abs(),
        false => (a - b).abs(),
    }
}

/// The numbers of two answers side by side (is it a probability, a, b), each in [0, 1] (a
/// score over its top level), after checking what must be equal: types, keys, legends,
/// choices.
fn paired(a: &Value, b: &Value, what: &str) -> Vec<(bool, f64, f64)> {
    assert_eq!(a["type"], b["type"], "{what}");
    let mut out = Vec::new();
    let num = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("{what}: {v}"));
    if let Some(pa) = a["probabilities"].as_object() {
        let pb = b["probabilities"].as_object().unwrap();
        let ka: Vec<&String> = pa.keys().collect();
        assert_eq!(ka, pb.keys().collect::<Vec<_>>(), "{what}");
        let sum: f64 = pb.values().map(num).sum();
        assert!(
            (sum - 1.0).abs() < 1e-6,
            "{what}: probabilities sum to {sum}"
        );
        out.extend(pa.keys().map(|k| (true, num(&pa[k]), num(&pb[k]))));
        out.push((false, num(&a["confidence"]), num(&b["confidence"])));
        // The choice is the same unless llama-server's own top two are within tolerance.
        if let Some(choice) = a["choice"].as_str() {
            let mut p: Vec<f64> = pa.values().map(num).collect();
            p.sort_by(|x, y| y.total_cmp(x));
            if p[0] > p[1] * (2.0 * MAX_LOG_DIFF).exp() {
                assert_eq!(b["choice"].as_str(), Some(choice), "{what}");
            }
        }
    }
    if a.get("score").is_some() {
        assert_eq!(a["legend"], b["legend"], "{what}");
        let top = (a["legend"].as_object().unwrap().len() - 1) as f64;
        out.push((false, num(&a["score"]) / top, num(&b["score"]) / top));
    }
    if a.get("noul").is_some() {
        out.push((false, num(&a["noul"]), num(&b["noul"])));
    }
    out
}

/// Every number of `b`'s answers against `a`'s, over its tolerance ([`dist`] divided by
/// [`MAX_LOG_DIFF`] or [`MAX_DIFF`]: above 1 is out); all but the numbers must be equal,
/// and the usage too.
fn diffs(a: &[String], b: &[String], what: &str) -> Vec<f64> {
    let mut d = Vec::new();
    for (i, (ta, tb)) in a.iter().zip(b).enumerate() {
        assert_eq!(skeleton(ta), skeleton(tb), "{what} request {i}");
        let (ra, rb) = (parse(ta), parse(tb));
        assert_eq!(ra["usage"], rb["usage"], "{what} request {i}: usage");
        let qa = ra["answers"].as_object().unwrap();
        let qb = rb["answers"].as_object().unwrap();
        assert_eq!(qa.keys().collect::<Vec<_>>(), qb.keys().collect::<Vec<_>>());
        for (id, ans) in qa {
            let w = format!("{what} request {i} {id}");
            for (is_prob, x, y) in paired(ans, &qb[id], &w) {
                let tol = if is_prob { MAX_LOG_DIFF } else { MAX_DIFF };
                d.push(dist(is_prob, x, y) / tol);
            }
        }
    }
    d
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

#[test]
fn label_decision_models_answer_as_llama_server() {
    for kind in ["openjev", "lev", "nimble"] {
        let model = synth(kind, Some(TEMPERATURES), &format!("{kind}.gguf"));
        let on = llama_answers(&model, "on");
        let off = llama_answers(&model, "off");
        let ours = pocket_answers(&model);
        let spread = diffs(&on, &off, &format!("{kind}: llama-server -fa off"));
        let d = diffs(&on, &ours, &format!("{kind}: pocket"));
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "{kind}: {} values; pocket vs llama-server: mean {:.2e}, max {:.2e} of the \
             tolerance; llama-server flash attention on vs off: mean {:.2e}, max {:.2e}",
            d.len(),
            mean(&d),
            max(&d),
            mean(&spread),
            max(&spread)
        );
        assert!(max(&d) <= 1.0, "{kind}: a value beyond the tolerance");
    }
}

/// `src` with its metadata changed by `edit` (entries in file order), tensors as they are.
fn rewrite(src: &Path, name: &str, edit: impl Fn(&mut Vec<(String, MetaValue)>)) -> PathBuf {
    let g = GgufFile::open(src).unwrap();
    let mut kv: Vec<(String, MetaValue)> = g
        .metadata()
        .map(|(k, v)| (k.to_string(), MetaValue::from_value(&v)))
        .collect();
    edit(&mut kv);
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.kv(k, v);
    }
    for t in g.tensors() {
        let data = g.tensor_data(t).to_vec();
        w.tensor(&t.name, t.ggml_type, &t.dims, data).unwrap();
    }
    let out = dir().join(name);
    let mut f = std::fs::File::create(&out).unwrap();
    w.write_to(&mut f).unwrap();
    out
}

fn set(kv: &mut Vec<(String, MetaValue)>, key: &str, v: Option<MetaValue>) {
    kv.retain(|(k, _)| k != key);
    if let Some(v) = v {
        kv.push((key.to_string(), v));
    }
}

/// `pocket serve` on a model it must refuse: its exit status and stderr.
fn pocket_refuses(model: &Path) -> String {
    let mut child = Command::new(pocket())
        .args(["serve", "--port", "0", "-t", "1", "-m"])
        .arg(model)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("pocket serve loaded {}", model.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn malformed_decision_metadata_is_refused_by_both_servers() {
    let good = synth("openjev", None, "good-openjev.gguf");
    let type_key = "qwen3.decision.type";
    let tmpl_key = "tokenizer.chat_template.systemone";
    let noul_key = "qwen3.decision.temperature.noul";
    // (file, what pocket says, what llama-server says)
    let cases = [
        (
            rewrite(&good, "bad-type.gguf", |kv| {
                set(kv, type_key, Some(MetaValue::String("foo".into())))
            }),
            r#"unsupported decision model type "foo" in qwen3.decision.type"#,
            "unsupported decision model type: foo",
        ),
        (
            rewrite(&good, "bad-type-u32.gguf", |kv| {
                set(kv, type_key, Some(MetaValue::U32(3)))
            }),
            "qwen3.decision.type must be a string, found u32 3",
            "unsupported decision model type: 3",
        ),
        (
            rewrite(&good, "no-template.gguf", |kv| set(kv, tmpl_key, None)),
            r#"decision model has no "systemone" template"#,
            r#"decision model has no "systemone" template"#,
        ),
        (
            synth("openjev", Some("choice=0"), "zero-temperature.gguf"),
            "invalid decision temperature: qwen3.decision.temperature.choice = f32 0",
            "invalid decision temperature: qwen3.decision.temperature.choice",
        ),
        (
            rewrite(&good, "text-temperature.gguf", |kv| {
                set(kv, noul_key, Some(MetaValue::String("warm".into())))
            }),
            "invalid decision temperature: qwen3.decision.temperature.noul",
            "invalid decision temperature: qwen3.decision.temperature.noul",
        ),
    ];
    for (model, ours, theirs) in &cases {
        let err = pocket_refuses(model);
        assert!(err.contains(ours), "pocket on {}: {err}", model.display());
        match LlamaServer::start(model, &["-c", "2048"]) {
            Ok(_) => panic!("llama-server loaded {}", model.display()),
            Err(log) => assert!(log.contains(theirs), "llama-server: {log}"),
        }
    }
    // A template that does not compile.
    let broken = rewrite(&good, "broken-template.gguf", |kv| {
        set(kv, tmpl_key, Some(MetaValue::String("{% for %}".into())))
    });
    let err = pocket_refuses(&broken);
    assert!(err.contains("systemone template"), "{err}");
}

#[test]
fn types_pocket_does_not_run_are_501_naming_them() {
    for kind in ["kev", "laya", "clef"] {
        let model = synth(kind, None, &format!("{kind}.gguf"));
        let s = Server::start(&model, &["-c", "2048"]);
        let (st, text) = s.post_raw("/v1/systemone", REQUESTS[0], &[]);
        assert_eq!(st, 501, "{text}");
        let msg = parse(&text)["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(msg.contains(&format!("type {kind}")), "{msg}");
        // Text generation still works.
        let (st, _) = s.post_raw("/completion", r#"{"prompt": "hi", "n_predict": 2}"#, &[]);
        assert_eq!(st, 200);
    }
}
