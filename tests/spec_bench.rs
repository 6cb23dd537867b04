//! `pocket compare --serve --workload set` end to end on SmolLM2 with tiny settings: every
//! workload × engine × speculation mode is in the receipt, and its summaries agree with its
//! own request records (decode rates, speed-up = the rates' quotient, acceptance = kept /
//! drafted within [0, 1], tokens per step from the kept drafts, ≥ 1); pocket's speculative
//! greedy text equals its plain one; the copy workload keeps drafts.

mod common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const N_PREDICT: u64 = 16;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn the_workload_set_receipt_is_complete_and_consistent() {
    let results = std::env::temp_dir().join(format!("pocket-spec-bench-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["compare", "--serve", "--workload", "set", "-m"])
        .arg(common::smollm2())
        .args([
            "-n",
            &N_PREDICT.to_string(),
            "-r",
            "1",
            "-c",
            "1024",
            "-t",
            "2",
        ])
        .arg("--llama-server")
        .arg(common::fixture("llama.cpp-build/bin/llama-server"))
        .arg("--results")
        .arg(&results)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        dir.to_string_lossy().ends_with("-spec-workloads"),
        "{}",
        dir.display()
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("receipt.json")).unwrap()).unwrap();
    assert_eq!(r["kind"], "pocket-spec-bench");
    assert_eq!(r["settings"]["n_predict"], N_PREDICT);
    let m = &r["models"][0];
    assert_eq!(m["prompt_format"], "chat");
    let workloads = m["workloads"].as_array().unwrap();
    let names: Vec<&str> = workloads
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["extraction", "quoting", "code", "story"]);
    for w in workloads {
        check_workload(w);
    }
    let quoting = &workloads[1];
    let pocket = summary(quoting, "pocket");
    assert!(
        f(&pocket["acceptance"]) > 0.0,
        "no draft kept on quoting: {pocket}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("| quoting | ") && md.contains("| story | "),
        "{md}"
    );
    std::fs::remove_dir_all(&results).ok();
}

fn summary<'a>(w: &'a Value, engine: &str) -> &'a Value {
    w["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["engine"] == engine)
        .unwrap_or_else(|| panic!("no {engine} summary: {w}"))
}

fn check_workload(w: &Value) {
    let runs = w["runs"].as_array().unwrap();
    let mut decode = std::collections::HashMap::new();
    for engine in ["pocket", "llama-server"] {
        for spec in [false, true] {
            let run = runs
                .iter()
                .find(|r| r["engine"] == engine && r["speculative"] == spec)
                .unwrap_or_else(|| panic!("no {engine} speculative={spec} run in {w}"));
            decode.insert((engine, spec), check_run(run, spec));
        }
        let s = summary(w, engine);
        let (plain, spec) = (decode[&(engine, false)], decode[&(engine, true)]);
        assert_eq!(f(&s["plain_tps"]), plain);
        assert_eq!(f(&s["spec_tps"]), spec);
        assert!(
            (f(&s["speedup"]) - spec / plain).abs() < 1e-9 * spec / plain,
            "{s}"
        );
        if let Some(a) = s["acceptance"].as_f64() {
            assert!((0.0..=1.0).contains(&a), "{s}");
        }
        assert!(f(&s["tokens_per_step"]) >= 1.0, "{s}");
    }
    // pocket's verify keeps only its own greedy samples: the same text as plain decoding.
    assert_eq!(summary(w, "pocket")["same_text"], true, "{w}");
    let ratio = decode[&("pocket", true)] / decode[&("llama-server", true)];
    assert!((f(&w["pocket_spec_over_llama_server_spec"]) - ratio).abs() < 1e-9 * ratio);
}

/// Checks a run's figures against its requests; its decode t/s.
fn check_run(run: &Value, spec: bool) -> f64 {
    let reqs = run["requests"].as_array().unwrap();
    assert_eq!(reqs.len(), 1, "-r 1: {run}");
    let (mut drafted, mut kept, mut steps) = (0, 0, 0);
    let mut rates = Vec::new();
    for q in reqs {
        assert_eq!(q["tokens_predicted"], N_PREDICT, "{q}");
        assert_eq!(q["token_events"], N_PREDICT, "{q}");
        let secs = (f(&q["total_ms"]) - f(&q["ttft_ms"])) / 1e3;
        rates.push((N_PREDICT - 1) as f64 / secs);
        let k = q["draft_n_accepted"].as_u64().unwrap_or(0);
        drafted += q["draft_n"].as_u64().unwrap_or(0);
        kept += k;
        steps += N_PREDICT - 1 - k;
    }
    assert_eq!(run["draft_n"], drafted, "{run}");
    assert_eq!(run["draft_n_accepted"], kept, "{run}");
    assert!(kept <= drafted);
    if !spec {
        assert_eq!(drafted, 0, "a plain server drafted: {run}");
    }
    let per_step = (N_PREDICT - 1) as f64 * reqs.len() as f64 / steps as f64;
    assert!(
        (f(&run["tokens_per_step"]) - per_step).abs() < 1e-9,
        "{run}"
    );
    let rate = median(rates);
    assert!((f(&run["decode_tps"]) - rate).abs() < 1e-6 * rate, "{run}");
    assert!(!run["text"].as_str().unwrap().is_empty());
    f(&run["decode_tps"])
}

#[test]
fn the_set_refuses_several_streams_and_mixed_workloads() {
    for (flags, want) in [
        (&["--workload", "set", "-np", "2"][..], "-np must be 1"),
        (&["--workload", "repeat,code"][..], "not both"),
        (
            &["--workload", "set", "--spec-type", "none"][..],
            "measures nothing",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pocket"))
            .args(["compare", "--serve", "-m"])
            .arg(common::smollm2())
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(want),
            "{flags:?}: {stderr}"
        );
    }
}
