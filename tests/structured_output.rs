//! Structured output end to end on SmolLM2: `pocket run` with `-j` / `-jf` / `--grammar`
//! / `--grammar-file`, and `pocket serve`'s `json_schema`, `grammar` and
//! `response_format` fields in `/completion`, `/v1/completions` and
//! `/v1/chat/completions`. JSON answers are validated with the `jsonschema` crate (not by
//! the constraint that made them); bad grammars and schemas are a non-zero exit with the
//! problem named, and a 400 in llama-server's error shape.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::process::{Command, Output};

use serde_json::{json, Value};
use serve_common::Server;

const REVIEWS: [&str; 3] = [
    "The noodles were delicious but the waiter was rude.",
    "Way too expensive for such small portions.",
    "Delivery took two hours and the pizza arrived cold.",
];

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "attribute": {"type": "string", "maxLength": 40},
            "opinion": {"type": "string", "maxLength": 40},
            "category": {"enum": ["food", "service", "price", "delivery"]},
            "polarity": {"enum": ["positive", "negative", "neutral"]}
        },
        "required": ["attribute", "opinion", "category", "polarity"],
        "additionalProperties": false
    })
}

fn valid(text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("{e}: {text:?}"))?;
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    if errors.is_empty() {
        Ok(v)
    } else {
        Err(format!("{v}: {errors:?}"))
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .arg("run")
        .arg("-m")
        .arg(common::smollm2())
        .args(["-t", "2", "-c", "512", "--no-echo"])
        .args(args)
        .output()
        .unwrap()
}

fn prompt(review: &str) -> String {
    format!("<|im_start|>user\nExtract the attribute, opinion, category and polarity of this review as JSON.\nReview: {review}<|im_end|>\n<|im_start|>assistant\n")
}

#[test]
fn pocket_run_follows_json_schemas_and_grammars() {
    let dir = std::env::temp_dir().join(format!("pocket-structured-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema_file = dir.join("review.json");
    std::fs::write(&schema_file, schema().to_string()).unwrap();
    for (i, review) in REVIEWS.iter().enumerate() {
        let p = prompt(review);
        let schema_text = schema().to_string();
        let out = if i % 2 == 0 {
            run(&["-p", &p, "-n", "160", "-j", &schema_text])
        } else {
            run(&["-p", &p, "-n", "160", "-jf", schema_file.to_str().unwrap()])
        };
        common::assert_success(&out, "pocket run");
        let text = String::from_utf8(out.stdout).unwrap();
        valid(text.trim_end_matches('\n')).unwrap();
    }
    let choice = r#"root ::= "positive" | "negative" | "neutral""#;
    let gfile = dir.join("choice.gbnf");
    std::fs::write(&gfile, choice).unwrap();
    for args in [
        vec!["--grammar", choice],
        vec!["--grammar-file", gfile.to_str().unwrap()],
    ] {
        let p = "<|im_start|>user\nIs this review positive? The food was great.<|im_end|>\n<|im_start|>assistant\n";
        let mut a = vec!["-p", p, "-n", "12"];
        a.extend(args);
        let out = run(&a);
        common::assert_success(&out, "pocket run");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            ["positive", "negative", "neutral"].contains(&text.trim_end_matches('\n')),
            "{text:?}"
        );
    }
}

#[test]
fn pocket_run_refuses_bad_grammars_and_schemas() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--grammar", "root ::= \"a\" missing"],
            "undefined rule 'missing'",
        ),
        (
            &["--grammar", "root ::= (\"a\""],
            "line 1, column 14: expecting ')'",
        ),
        (&["-j", "{\"type\": "], "JSON schema: not valid JSON"),
        (
            &["-j", "{\"type\": \"hiccup\"}"],
            "the JSON schema does not compile",
        ),
        (
            &["--grammar-file", "/nonexistent/g.gbnf"],
            "cannot read /nonexistent/g.gbnf",
        ),
    ];
    for (args, want) in cases {
        let mut a = vec!["-p", "Hi", "-n", "4"];
        a.extend_from_slice(args);
        let out = run(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // Two constraints at once are refused by the flag parser.
    let out = run(&["-p", "Hi", "--grammar", "root ::= \"a\"", "-j", "{}"]);
    assert!(!out.status.success());
}

fn error_of((status, body): (u16, String)) -> (u16, Value) {
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, v["error"].clone())
}

#[test]
fn the_server_follows_response_formats_schemas_and_grammars() {
    let s = Server::start(&common::smollm2(), &["-c", "2048", "-np", "2"]);
    for review in REVIEWS {
        let user = format!("Extract the attribute, opinion, category and polarity of this review as JSON.\nReview: {review}");
        let chat = json!({
            "messages": [{"role": "user", "content": user}],
            "max_tokens": 160, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "review", "schema": schema()}},
        });
        let v = s.post("/v1/chat/completions", &chat);
        valid(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        // llama-server's own form: json_object with a schema.
        let chat = json!({
            "messages": [{"role": "user", "content": user}],
            "max_tokens": 160, "temperature": 0.7, "seed": 5,
            "response_format": {"type": "json_object", "schema": schema()},
        });
        let v = s.post("/v1/chat/completions", &chat);
        valid(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
        let native = json!({"prompt": prompt(review), "n_predict": 160, "temperature": 0, "json_schema": schema()});
        let v = s.post("/completion", &native);
        valid(v["content"].as_str().unwrap()).unwrap();
    }
    // Any JSON object; a choice grammar on the OpenAI completions endpoint, streamed too.
    let v = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Describe a cat."}], "max_tokens": 120,
                "temperature": 0, "response_format": {"type": "json_object"}}),
    );
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    let obj: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {content:?}"));
    assert!(obj.is_object(), "{obj}");
    let choice = r#"root ::= "positive" | "negative" | "neutral""#;
    let v = s.post(
        "/v1/completions",
        &json!({"prompt": "The review 'awful food' is", "max_tokens": 8, "grammar": choice}),
    );
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(["positive", "negative", "neutral"].contains(&text), "{v}");
    let data = s.stream(
        "/completion",
        &json!({"prompt": "The review 'great food' is", "n_predict": 8, "grammar": choice, "stream": true}),
    );
    let streamed: String = serve_common::chunks(&data)
        .iter()
        .filter_map(|c| c["content"].as_str().map(String::from))
        .collect();
    assert!(
        ["positive", "negative", "neutral"].contains(&streamed.as_str()),
        "{data:?}"
    );
}

#[test]
fn the_server_answers_400_to_grammars_and_schemas_that_do_not_compile() {
    let s = Server::start(&common::smollm2(), &["-c", "512"]);
    let cases = [
        (
            json!({"grammar": "root ::= this is (not valid GBNF"}),
            "failed to parse grammar",
        ),
        (
            json!({"grammar": "root ::= \"a\"", "json_schema": {}}),
            "Cannot use both json_schema and grammar",
        ),
        (
            json!({"response_format": {"type": "sound"}}),
            "response_format type must be one of",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": 123}}),
            "\"json_schema\"",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": {"type": 123}}}),
            "\"json_schema\"",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": {"type": "hiccup"}}}),
            "\"json_schema\"",
        ),
    ];
    for (field, want) in cases {
        for path in ["/completion", "/v1/chat/completions"] {
            let mut body = if path == "/completion" {
                json!({"prompt": "Hi", "n_predict": 2})
            } else {
                json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
            };
            body.as_object_mut()
                .unwrap()
                .extend(field.as_object().unwrap().clone());
            let (st, e) = error_of(s.post_raw(path, &body.to_string(), &[]));
            assert_eq!(st, 400, "{path} {body}: {e}");
            assert_eq!(e["type"], "invalid_request_error", "{e}");
            assert!(
                e["message"].as_str().unwrap().contains(want),
                "{path} {body}: {e}"
            );
        }
    }
    // The server is still there.
    assert_eq!(s.get("/health").0, 200);
}
