//! `pocket serve --spec-type ...` on SmolLM2-135M-Instruct: speculative decoding in the
//! server leaves the text unchanged (greedy, and sampled with a seed), with drafts
//! counted in the response's `timings` (`draft_n`, `draft_n_accepted`, as llama-server)
//! and in /metrics (`llamacpp:spec_decode_*`), also for concurrent requests.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use serde_json::{json, Value};
use serve_common::Server;

/// A prompt whose continuation copies from it: n-gram lookup drafts well here.
const COPY_PROMPT: &str = "Repeat the list exactly.\nList: apple, banana, cherry, date, \
    elderberry, fig, grape, honeydew, kiwi, lemon, mango.\nRepeat: apple, banana, cherry,";
const PROSE_PROMPT: &str = "Once upon a time, in a small village by the sea,";

fn completion(s: &Server, prompt: &str, extra: Value) -> Value {
    let mut req =
        json!({"prompt": prompt, "n_predict": 40, "temperature": 0, "cache_prompt": false});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    s.post("/completion", &req)
}

/// What a server answers: greedy and seeded-sampled completions of both prompts, then
/// both prompts' greedy completions sent at once.
struct Answers {
    greedy: Vec<Value>,
    sampled: Vec<Value>,
    together: Vec<Value>,
}

fn answers(s: &Server) -> Answers {
    let prompts = [COPY_PROMPT, PROSE_PROMPT];
    let sampling = json!({"temperature": 0.8, "seed": 42, "top_k": 40});
    Answers {
        greedy: prompts
            .iter()
            .map(|p| completion(s, p, json!({})))
            .collect(),
        sampled: prompts
            .iter()
            .map(|p| completion(s, p, sampling.clone()))
            .collect(),
        // Two requests at once: one batch carries both slots' rows (and drafts).
        together: std::thread::scope(|sc| {
            let hs: Vec<_> = prompts
                .iter()
                .map(|p| sc.spawn(move || completion(s, p, json!({}))))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        }),
    }
}

fn content(v: &[Value]) -> Vec<&Value> {
    v.iter().map(|r| &r["content"]).collect()
}

/// A plain server's answers (no speculation; nothing drafted).
/// The flags of every server here: two slots of 1024 tokens, /metrics on.
const SERVER_FLAGS: [&str; 5] = ["-c", "2048", "-np", "2", "--metrics"];

/// A server with [`SERVER_FLAGS`] and the speculation flags `spec`.
fn speculating_server(model: &std::path::Path, spec: &[&str]) -> Server {
    Server::start(model, &[&SERVER_FLAGS[..], spec].concat())
}

fn plain_answers(model: &std::path::Path) -> Answers {
    let s = Server::start(model, &SERVER_FLAGS);
    let a = answers(&s);
    assert_eq!(s.metric("llamacpp:spec_decode_num_draft_tokens_total"), 0.0);
    assert!(a
        .greedy
        .iter()
        .all(|r| r["timings"].get("draft_n").is_none()));
    a
}

/// `spec` (answered by `s`, a speculating server) has `plain`'s text, drafts on the copy
/// prompt, and /metrics counts what the responses' timings count.
fn assert_same_text_and_counted_drafts(plain: &Answers, spec: &Answers, s: &Server) {
    assert_eq!(
        content(&plain.greedy),
        content(&spec.greedy),
        "greedy text differs"
    );
    assert_eq!(
        content(&plain.sampled),
        content(&spec.sampled),
        "seeded sampling differs"
    );
    assert_eq!(
        content(&plain.together),
        content(&spec.together),
        "concurrent text differs"
    );
    for (a, b) in plain.greedy.iter().zip(&spec.greedy) {
        assert_eq!(a["tokens_predicted"], b["tokens_predicted"]);
    }
    let t = &spec.greedy[0]["timings"];
    assert!(
        t["draft_n"].as_u64().unwrap_or(0) > 0,
        "no drafts on the copy prompt: {t}"
    );
    assert!(
        t["draft_n_accepted"].as_u64().unwrap_or(0) > 0,
        "nothing kept: {t}"
    );
    let all = || {
        [&spec.greedy, &spec.sampled, &spec.together]
            .into_iter()
            .flat_map(|v| v.iter())
    };
    let count = |key: &str| -> u64 { all().map(|r| r["timings"][key].as_u64().unwrap_or(0)).sum() };
    let (drafted, kept) = (count("draft_n"), count("draft_n_accepted"));
    assert!(kept <= drafted, "kept {kept} of {drafted} drafts");
    assert_eq!(
        s.metric("llamacpp:spec_decode_num_draft_tokens_total"),
        drafted as f64,
        "/metrics and the timings disagree on drafted tokens"
    );
    assert_eq!(
        s.metric("llamacpp:spec_decode_num_accepted_tokens_total"),
        kept as f64,
        "/metrics and the timings disagree on kept tokens"
    );
    assert!(s.metric("llamacpp:spec_decode_num_drafts_total") > 0.0);
}

#[test]
fn ngram_speculation_in_the_server_keeps_the_text_and_counts_drafts() {
    let model = common::smollm2();
    // One server at a time (tests/serve/common.rs serializes them): the plain one is
    // dropped before the speculating one starts.
    let plain = plain_answers(&model);
    let ngram = [
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "3",
    ];
    let s = speculating_server(&model, &ngram);
    let spec = answers(&s);
    assert_same_text_and_counted_drafts(&plain, &spec, &s);
}

#[test]
fn bad_speculation_flags_are_refused() {
    let model = common::smollm2();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["serve", "-m"])
        .arg(&model)
        .args(["--port", "0", "--spec-type", "draft-simple"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("draft model"), "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["serve", "-m"])
        .arg(&model)
        .args(["--port", "0", "--spec-type", "ngram-simple"])
        .args(["--spec-ngram-simple-size-n-min", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--spec-ngram-simple-size-n-min"), "{err}");
}

/// A draft model (SmolLM2 cut to 24 of its 30 layers, `pocket synth --keep-layers`; no
/// smaller model with SmolLM2's vocabulary is at hand): the same greedy, seeded-sampled and
/// concurrent text as without it, with drafts counted. (This test used to start its
/// speculating server while the plain one was alive, and hung on the harness's one-server
/// lock; the harness now panics on that instead.)
#[test]
fn draft_model_speculation_in_the_server_keeps_the_text() {
    let model = common::smollm2();
    let draft = std::env::temp_dir().join(format!(
        "pocket-serve-spec-draft-{}.gguf",
        std::process::id()
    ));
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["synth", "--from"])
        .arg(&model)
        .args(["--keep-layers", "24", "-o"])
        .arg(&draft)
        .status()
        .unwrap();
    assert!(st.success(), "pocket synth --from failed");
    let plain = plain_answers(&model);
    let draft_flags = [
        "--spec-type",
        "draft-simple",
        "-md",
        draft.to_str().unwrap(),
    ];
    let s = speculating_server(&model, &draft_flags);
    // Loaded (mapped) by now: the file can go before anything can fail.
    let _ = std::fs::remove_file(&draft);
    let spec = answers(&s);
    assert_same_text_and_counted_drafts(&plain, &spec, &s);
}

/// The harness runs one server at a time; a test that starts a second while its first is
/// alive gets a panic saying so (it used to hang on the harness's lock: the draft-model
/// test above did, while it compared a plain and a speculating server side by side).
#[test]
#[should_panic(expected = "already has a Server alive")]
fn a_second_live_server_in_one_test_panics_instead_of_hanging() {
    let model = common::smollm2();
    let _first = Server::spawn(&model, &["-c", "256"]);
    let _second = Server::spawn(&model, &["-c", "256"]);
}
