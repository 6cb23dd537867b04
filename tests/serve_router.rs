//! `pocket serve` without `-m` (router mode, as llama-server's): models from `--models-dir`
//! and `--models-preset`, `GET /models` with their status, loading on demand by a
//! request's `model`, `POST /models/load` / `/models/unload`, `--models-max` unloading the
//! least recently used, and every bad input answered with llama-server's status and error
//! body (checked against llama-server b11434 on the same requests) while the server keeps
//! serving: no model name, an unknown one, malformed JSON, a load of an unknown model, a
//! model whose file is missing or not a GGUF, an unload of a model that is not loaded.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::Server;

fn status_of(s: &Server, id: &str) -> Value {
    let (code, text) = s.get("/models");
    assert_eq!(code, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let m = v["data"].as_array().unwrap().iter().find(|m| m["id"] == id);
    m.unwrap_or_else(|| panic!("{id} not in {text}"))["status"].clone()
}

fn wait_status(s: &Server, id: &str, want: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let st = status_of(s, id);
        if st["value"] == want {
            return st;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{id}: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (status, parsed body) of a POST.
fn post(s: &Server, path: &str, body: &str) -> (u16, Value) {
    let (code, text) = s.post_raw(path, body, &[]);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, v)
}

fn error(code: u16, msg: &str, kind: &str) -> (u16, Value) {
    (
        code,
        json!({"error": {"code": code, "message": msg, "type": kind}}),
    )
}

#[test]
fn router_loads_on_demand_and_answers_bad_input_as_llama_server() {
    let dir = std::env::temp_dir().join(format!("pocket-serve-router-{}", std::process::id()));
    let models = dir.join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(common::smollm2(), models.join("smol.gguf")).unwrap();
    std::fs::write(models.join("notgguf.gguf"), b"not a gguf").unwrap();
    let preset = dir.join("presets.ini");
    std::fs::write(
        &preset,
        format!(
            "version = 1\n[*]\nc = 512\n[missing]\nmodel = {}\n[gemma]\nmodel = {}\n",
            dir.join("nothere.gguf").display(),
            common::gemma3().display()
        ),
    )
    .unwrap();
    let s = Server::spawn_args(&[
        "--models-dir",
        models.to_str().unwrap(),
        "--models-preset",
        preset.to_str().unwrap(),
        "--models-max",
        "1",
        "-np",
        "1",
        "--temp",
        "0",
    ]);
    assert_eq!(s.get("/health").0, 200);
    for id in ["gemma", "missing", "notgguf", "smol"] {
        assert_eq!(status_of(&s, id)["value"], "unloaded", "{id}");
    }
    let (code, props) = s.get("/props");
    assert_eq!(code, 200);
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(props["role"], "router");
    assert_eq!(props["max_instances"], 1);

    let bad = "invalid_request_error";
    let gen = r#"{"prompt": "Hello", "n_predict": 4}"#;
    assert_eq!(
        post(&s, "/completion", gen),
        error(400, "model name is missing from the request", bad)
    );
    let nope = r#"{"prompt": "Hello", "n_predict": 4, "model": "nope"}"#;
    assert_eq!(
        post(&s, "/completion", nope),
        error(400, "model 'nope' not found", bad)
    );
    assert_eq!(s.get("/slots?model=nope").0, 400);
    assert_eq!(post(&s, "/v1/chat/completions", "{not json").0, 400);
    assert_eq!(
        post(&s, "/models/load", r#"{"model": "nope"}"#),
        error(404, "File Not Found", "not_found_error")
    );
    assert_eq!(
        post(&s, "/models/unload", r#"{"model": "smol"}"#),
        error(400, "model is not running", bad)
    );
    assert_eq!(
        post(&s, "/models/unload", r#"{"model": "nope"}"#),
        error(400, "model is not found", bad)
    );
    let smol = r#"{"prompt": "Hello", "n_predict": 4, "model": "smol"}"#;
    assert_eq!(
        post(&s, "/completion?autoload=false", smol),
        error(400, "model is not loaded", bad)
    );

    // A missing file and a file that is not a GGUF: the load is accepted, then fails.
    for id in ["missing", "notgguf"] {
        let body = format!(r#"{{"model": "{id}"}}"#);
        assert_eq!(
            post(&s, "/models/load", &body),
            (200, json!({"success": true}))
        );
        let st = wait_status(&s, id, "unloaded");
        assert_eq!(
            (st["failed"].clone(), st["exit_code"].clone()),
            (json!(true), json!(1))
        );
        let req = format!(r#"{{"prompt": "Hello", "n_predict": 4, "model": "{id}"}}"#);
        let msg = format!("model name={id} failed to load");
        assert_eq!(
            post(&s, "/completion", &req),
            error(500, &msg, "server_error")
        );
    }

    // On demand: the request waits for the load, then the model answers it.
    let (code, v) = post(&s, "/completion", smol);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["model"], "smol");
    assert_eq!(v["tokens_predicted"], 4);
    assert_eq!(status_of(&s, "smol")["value"], "loaded");
    assert_eq!(
        post(&s, "/models/load", r#"{"model": "smol"}"#),
        error(400, "model is already running", bad)
    );
    let (code, slots) = s.get("/slots?model=smol");
    assert_eq!(code, 200, "{slots}");

    // --models-max 1: loading gemma unloads smol.
    let chat =
        json!({"model": "gemma", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]});
    let (code, v) = post(&s, "/v1/chat/completions", &chat.to_string());
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["model"], "gemma");
    assert_eq!(status_of(&s, "smol")["value"], "unloaded");
    assert_eq!(
        post(&s, "/models/unload", r#"{"model": "gemma"}"#),
        (200, json!({"success": true}))
    );
    assert_eq!(status_of(&s, "gemma")["value"], "unloaded");
    assert_eq!(s.get("/health").0, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn router_cors_origins_localhost_reflects_only_localhost() {
    let s = Server::spawn_args(&["--cors-origins", "localhost"]);
    let preflight = |origin: &str| {
        let url = s.url("/completions");
        let o = format!("Origin: {origin}");
        let out = std::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-D",
                "-",
                "-X",
                "OPTIONS",
                "-H",
                &o,
                &url,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_lowercase()
    };
    let h = preflight("http://[::1]:3000");
    assert!(
        h.contains("access-control-allow-origin: http://[::1]:3000"),
        "{h}"
    );
    let h = preflight("http://localhost.evil.com");
    assert!(!h.contains("access-control-allow-origin"), "{h}");
    assert!(
        h.contains("access-control-allow-methods: get, post, delete, options"),
        "{h}"
    );
}
