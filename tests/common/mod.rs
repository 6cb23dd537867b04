//! Shared helpers of the end-to-end tests: where the fixtures are, and a clear failure
//! (never a silent skip) when they are missing.
#![allow(dead_code)]

mod fixtures;
mod report_text;
#[allow(unused_imports)]
pub use fixtures::{cache_dir, fixture};
#[allow(unused_imports)]
pub use report_text::figure;

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn smollm2() -> PathBuf {
    fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn gemma3() -> PathBuf {
    fixture("models/gemma-3-270m-q4_k_m.gguf")
}

/// Every `ggml-vocab-*.gguf` of the llama.cpp sdist.
pub fn vocab_ggufs() -> Vec<PathBuf> {
    let dir = fixture("llama.cpp/models");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read llama.cpp/models")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with("ggml-vocab-") && n.ends_with(".gguf")
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 10,
        "expected the sdist's vocab files in {}",
        dir.display()
    );
    v
}

/// The Python with the `gguf` package (`POCKET_PYTHON`, default the cache's venv).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("POCKET_PYTHON") {
        return PathBuf::from(p);
    }
    fixture("venv/bin/python")
}

/// Fails the test, saying what failed and its stderr, unless `out`'s process succeeded.
pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A JSON array of unsigned integers (a tensor's dims, token ids), as numbers.
pub fn u64s(v: &serde_json::Value) -> Vec<u64> {
    let items = v.as_array().unwrap_or_else(|| panic!("not an array: {v}"));
    items
        .iter()
        .map(|x| x.as_u64().unwrap_or_else(|| panic!("not a u64: {x}")))
        .collect()
}

/// Runs a Python script of `tests/oracle/` and returns its stdout.
pub fn run_oracle(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oracle")
        .join(script);
    let out = Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .expect("run python oracle");
    assert!(
        out.status.success(),
        "{} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("oracle output is UTF-8")
}

/// All real GGUF files the reader tests cover: the two models and every vocab file.
pub fn all_real_ggufs() -> Vec<PathBuf> {
    let mut v = vec![smollm2(), gemma3()];
    v.extend(vocab_ggufs());
    v
}
