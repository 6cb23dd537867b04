//! `pocket serve --lora A --lora-scaled B:0` with llama-server's LoRA API, on SmolLM2:
//! `GET /lora-adapters` lists both with their scales; a request's `lora` field picks its
//! own adapters (unlisted ones at 0) and gives `pocket run --lora`'s greedy text for the
//! same adapter; `POST /lora-adapters` changes what requests without the field get; two
//! concurrent requests with different adapters (sharing the engine's batches) each get the
//! text they get alone; a bad id or shape is a 400.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::process::Command;

use serde_json::{json, Value};
use serve_common::Server;

fn content(v: &Value) -> String {
    v["content"].as_str().unwrap().to_string()
}

fn run_text(model: &std::path::Path, prompt: &str, lora: Option<&str>) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pocket"));
    c.args(["run", "-m"])
        .arg(model)
        .args(["-p", prompt, "-n", "16", "-t", "2", "--no-echo"]);
    if let Some(l) = lora {
        c.args(["--lora", l]);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .trim_end_matches('\n')
        .to_string()
}

#[test]
fn per_request_adapters_and_the_lora_adapters_endpoints() {
    let model = common::smollm2();
    let dir = std::env::temp_dir().join(format!("pocket-serve-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    for (p, seed) in [(&a, "1"), (&b, "2")] {
        let o = Command::new(env!("CARGO_BIN_EXE_pocket"))
            .args(["synth", "--lora-for"])
            .arg(&model)
            .args(["--lora-rank", "8", "--seed", seed, "-o"])
            .arg(p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let (sa, sb) = (a.to_str().unwrap(), b.to_str().unwrap());
    let scaled = format!("{sb}:0");
    let s = Server::start(
        &model,
        &[
            "-c",
            "1024",
            "-np",
            "2",
            "--lora",
            sa,
            "--lora-scaled",
            &scaled,
        ],
    );
    let (status, body) = s.get("/lora-adapters");
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list[0]["id"], 0);
    assert_eq!(list[0]["path"], sa);
    assert_eq!(list[0]["scale"], 1.0);
    assert_eq!(list[1]["scale"], 0.0);

    let prompt = "The capital of France is";
    let req = |lora: Option<Value>| {
        let mut r = json!({"prompt": prompt, "n_predict": 16, "temperature": 0});
        if let Some(l) = lora {
            r["lora"] = l;
        }
        r
    };
    let (with_a, with_b) = (
        run_text(&model, prompt, Some(sa)),
        run_text(&model, prompt, Some(sb)),
    );
    let plain = run_text(&model, prompt, None);
    assert!(with_a != plain && with_b != plain && with_a != with_b);

    // Global scales (a at 1, b at 0): a's text; per request: b alone, none.
    assert_eq!(content(&s.post("/completion", &req(None))), with_a);
    let only_b = json!([{"id": 1, "scale": 1.0}]);
    assert_eq!(
        content(&s.post("/completion", &req(Some(only_b.clone())))),
        with_b
    );
    assert_eq!(
        content(&s.post("/completion", &req(Some(json!([]))))),
        plain
    );

    // Two at once with different adapters share the batches.
    let handles: Vec<_> = [Some(only_b.clone()), Some(json!([{"id": 0, "scale": 1.0}]))]
        .into_iter()
        .map(|l| {
            let url = s.url("/completion");
            let body = req(l).to_string();
            std::thread::spawn(move || {
                let ct = "Content-Type: application/json";
                serve_common::curl(&["-H", ct, "--data-binary", &body, &url])
            })
        })
        .collect();
    let got: Vec<String> = handles
        .into_iter()
        .map(|h| {
            let (st, body) = h.join().unwrap();
            assert_eq!(st, 200, "{body}");
            content(&serde_json::from_str(&body).unwrap())
        })
        .collect();
    assert_eq!(got, [with_b.clone(), with_a.clone()]);

    // POST changes the global scales.
    let v = s.post("/lora-adapters", &only_b);
    assert_eq!(v["success"], true);
    assert_eq!(content(&s.post("/completion", &req(None))), with_b);
    let (_, body) = s.get("/lora-adapters");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (list[0]["scale"].as_f64(), list[1]["scale"].as_f64()),
        (Some(0.0), Some(1.0))
    );

    for bad in [
        json!([{"id": 7, "scale": 1.0}]),
        json!({"id": 0}),
        json!([{"scale": 1.0}]),
    ] {
        let (st, body) = s.post_raw("/completion", &req(Some(bad.clone())).to_string(), &[]);
        assert_eq!(st, 400, "{bad}: {body}");
        let (st, body) = s.post_raw("/lora-adapters", &bad.to_string(), &[]);
        assert_eq!(st, 400, "{bad}: {body}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
