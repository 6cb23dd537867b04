//! `pocket serve` through the official `openai` Python client (tests/serve/test_openai.py):
//! chat and completions, streamed and not (streamed text equals the whole text at
//! temperature 0), usage with cached tokens, errors as the client's typed exceptions.
//! Needs the `openai` package in the fixtures venv (`pip install openai`); fails saying so.

mod common;
#[path = "serve/common.rs"]
mod serve_common;

use std::process::Command;

#[test]
fn the_openai_client_talks_to_pocket_serve() {
    let python = common::cache_dir().join("venv/bin/python");
    let has_openai = Command::new(&python)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_openai,
        "the openai package is missing: {} -m pip install openai",
        python.display()
    );
    let s = serve_common::Server::start(
        &common::smollm2(),
        &[
            "-c",
            "1024",
            "-np",
            "2",
            "--api-key",
            "sekret",
            "-a",
            "smol",
        ],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve/test_openai.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(&s.base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
