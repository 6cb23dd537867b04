//! A fast subset of llama.cpp's own server test suite (b11434 `tools/server/tests`, from
//! the sdist tests/fixtures.sh unpacks) against `pocket serve`, through
//! tests/server_suite/run.sh and its server.sh (the suite's models swapped for SmolLM2).
//! Each test listed passes on llama-server under the same swap (results/server-suite/);
//! here every one must pass on pocket. The whole suite on both servers is
//! `tests/server_suite/run.sh` (minutes, not for CI).

mod common;

use std::path::Path;
use std::process::Command;

/// The subset (pytest node ids), one a line; `#` starts a comment.
const SUBSET: &str = include_str!("server_suite/subset.txt");

fn subset() -> Vec<&'static str> {
    SUBSET
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The outcome of each test case of a JUnit XML file: (classname.name, passed).
fn junit_outcomes(xml: &str) -> Vec<(String, bool)> {
    let attr = |tag: &str, name: &str| {
        let key = format!(" {name}=\"");
        tag.split_once(&key)
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(v, _)| v.replace("&quot;", "\"").replace("&amp;", "&"))
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for case in xml.split("<testcase ").skip(1) {
        // With a leading space, every attribute is found as ` name="`.
        let open = format!(" {}", case.split_once('>').map_or(case, |(o, _)| o));
        let open = open.as_str();
        let id = format!(
            "{}::{}",
            attr(open, "classname").replace('.', "/") + ".py",
            attr(open, "name")
        );
        let body = if open.ends_with('/') {
            ""
        } else {
            case.split_once("</testcase>").map_or(case, |(b, _)| b)
        };
        let failed = ["<failure", "<error", "<skipped"]
            .iter()
            .any(|t| body.contains(t));
        out.push((id, !failed));
    }
    out
}

#[test]
fn llama_cpp_server_suite_subset_passes_on_pocket() {
    let cache = common::cache_dir();
    if !cache
        .join("llama.cpp/tools/server/tests/conftest.py")
        .exists()
    {
        panic!(
            "no llama.cpp server suite under {} (run compare/setup.sh)",
            cache.display()
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let logs = std::env::temp_dir().join(format!("pocket-suite-ci-{}", std::process::id()));
    let out = logs.join("summary.md");
    let selection = subset();
    let status = Command::new("bash")
        .arg(root.join("tests/server_suite/run.sh"))
        .arg(&out)
        .env("SUITE_SERVERS", "pocket")
        .env("POCKET_BIN", env!("CARGO_BIN_EXE_pocket"))
        .env("SUITE_LOGS", &logs)
        .env("SUITE_FILES", selection.join(" "))
        .env(
            "SUITE_PORT",
            format!("{}", 19000 + std::process::id() % 500),
        )
        .status()
        .expect("run tests/server_suite/run.sh");
    assert!(status.success(), "run.sh failed");
    let xml = std::fs::read_to_string(logs.join("pocket.xml")).expect("the suite's JUnit XML");
    let outcomes = junit_outcomes(&xml);
    let summary = std::fs::read_to_string(&out).unwrap_or_default();
    let failed: Vec<&String> = outcomes
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(id, _)| id)
        .collect();
    assert!(
        outcomes.len() >= selection.len(),
        "only {} tests ran:\n{summary}",
        outcomes.len()
    );
    assert!(
        failed.is_empty(),
        "failed on pocket: {failed:#?}\n{summary}"
    );
    let _ = std::fs::remove_dir_all(&logs);
}
