//! `pocket compare --serve` end to end on SmolLM2 with tiny settings: pocket serve and
//! llama-server each at 1 and 2 streams. Checks the results directory, the receipt's shape
//! and that its numbers agree with each other and with what was asked (every request
//! generated n_predict tokens and prefilled the whole prompt; aggregate = streams ×
//! n_predict / wall time; the ratios are the levels' quotients); and that no server is
//! left running after an error or Ctrl-C.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

const N_PROMPT: u64 = 24;
const N_PREDICT: u64 = 8;

fn llama_server() -> PathBuf {
    common::fixture("llama.cpp-build/bin/llama-server")
}

/// The model behind a uniquely named link, so that the servers started on it can be found
/// by their command lines.
fn linked_model(dir: &Path) -> PathBuf {
    let link = dir.join(format!("bench-{}.gguf", std::process::id()));
    std::os::unix::fs::symlink(common::smollm2(), &link).unwrap();
    link
}

/// Processes whose command line mentions `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

fn bench_command(model: &Path, results: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pocket"));
    c.args(["compare", "--serve", "-m"])
        .arg(model)
        .args([
            "-np",
            "1,2",
            "-p",
            &N_PROMPT.to_string(),
            "-n",
            &N_PREDICT.to_string(),
        ])
        .args(["-c", "256", "-t", "2", "-r", "2", "--results"])
        .arg(results)
        .args(extra);
    c
}

/// One benchmark at a time: they measure, and each starts two servers.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn receipt_of_a_tiny_run_is_complete_and_consistent() {
    let _serial = serial();
    let tmp = tempdir();
    let model = linked_model(&tmp);
    let out = bench_command(&model, &tmp, &["--llama-server"])
        .arg(llama_server())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[serve bench]"),
        "no progress on stderr: {stderr}"
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .ends_with("-serve"));
    for f in ["receipt.json", "report.md", "throughput.svg"] {
        assert!(dir.join(f).is_file(), "missing {f} in {}", dir.display());
    }
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("receipt.json")).unwrap()).unwrap();
    assert_eq!(r["kind"], "pocket-serve-bench");
    assert_eq!(r["settings"]["n_prompt"], N_PROMPT);
    assert_eq!(r["settings"]["n_predict"], N_PREDICT);
    assert!(
        r["llama_server_build"].as_str().unwrap().contains("b11434"),
        "{}",
        r["llama_server_build"]
    );
    let m = &r["models"][0];
    let levels = m["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 4, "2 engines × 2 levels");
    for l in levels {
        check_level(l);
    }
    check_ratios(m);

    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| streams | pocket TTFT ms"), "{md}");
    assert!(md.contains("\n| 1 | ") && md.contains("\n| 2 | "), "{md}");
    let svg = std::fs::read_to_string(dir.join("throughput.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("llama-server"));
    assert!(processes_naming(&model.display().to_string()).is_empty());
}

fn check_level(l: &Value) {
    let streams = l["streams"].as_u64().unwrap();
    let reqs = l["requests"].as_array().unwrap();
    assert_eq!(reqs.len() as u64, streams * 2, "streams × repetitions: {l}");
    for q in reqs {
        assert_eq!(q["tokens_predicted"], N_PREDICT, "{q}");
        assert_eq!(q["token_events"], N_PREDICT, "{q}");
        assert_eq!(q["tokens_evaluated"], N_PROMPT, "{q}");
        // cache_prompt: false, so every request prefilled its whole prompt.
        assert_eq!(q["server_prompt_n"], N_PROMPT, "{q}");
        let (ttft, total) = (f(&q["ttft_ms"]), f(&q["total_ms"]));
        assert!(ttft > 0.0 && total > ttft, "{q}");
    }
    assert_eq!(l["generated_tokens_per_rep"], streams * N_PREDICT);
    let agg = l["aggregate_tps_reps"].as_array().unwrap();
    let wall = l["wall_ms_reps"].as_array().unwrap();
    assert_eq!(agg.len(), 2);
    for (rep, (a, w)) in agg.iter().zip(wall).enumerate() {
        let expect = (streams * N_PREDICT) as f64 / (f(w) / 1e3);
        assert!((f(a) - expect).abs() < 1e-6 * expect, "{a} vs {expect}");
        // A batch lasts from its first send to its last final event: at least as long as
        // its slowest request, each timed from its own send.
        let slowest = reqs
            .iter()
            .filter(|q| q["rep"] == rep)
            .map(|q| f(&q["total_ms"]))
            .fold(0.0, f64::max);
        assert!(slowest > 0.0 && f(w) >= slowest - 1e-6, "{l}");
    }
    let (lo, hi) = (f(&agg[0]).min(f(&agg[1])), f(&agg[0]).max(f(&agg[1])));
    let median = f(&l["aggregate_tps"]);
    assert!(median > 0.0 && lo <= median && median <= hi, "{l}");
    let (m, p90) = (f(&l["ttft_ms_median"]), f(&l["ttft_ms_p90"]));
    assert!(m > 0.0 && m <= p90, "{l}");
    assert!(f(&l["stream_decode_tps_median"]) > 0.0);
}

fn check_ratios(m: &Value) {
    let tps = |engine: &str, s: u64| {
        let l = m["levels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["engine"] == engine && l["streams"] == s)
            .unwrap_or_else(|| panic!("no {engine} at {s}"));
        f(&l["aggregate_tps"])
    };
    let r = &m["ratios"];
    assert_eq!(f(&r["pocket_scaling"]["1"]), 1.0);
    let scaling = tps("pocket", 2) / tps("pocket", 1);
    assert!((f(&r["pocket_scaling"]["2"]) - scaling).abs() < 1e-9);
    for s in [1, 2] {
        let want = tps("pocket", s) / tps("llama-server", s);
        assert!((f(&r["pocket_over_llama_server"][s.to_string()]) - want).abs() < 1e-9);
    }
}

#[test]
fn a_failing_server_stops_the_other_and_reports_which() {
    let _serial = serial();
    let tmp = tempdir();
    let model = linked_model(&tmp);
    // llama-server replaced by a program that exits at once: pocket serve, started
    // first, must not outlive the error.
    let out = bench_command(&model, &tmp, &["--llama-server", "/bin/false"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("error: llama-server exited"), "{stderr}");
    assert!(processes_naming(&model.display().to_string()).is_empty());
}

#[test]
fn ctrl_c_stops_the_servers() {
    let _serial = serial();
    let tmp = tempdir();
    let model = linked_model(&tmp);
    let mut child = bench_command(&model, &tmp, &["--llama-server"])
        .arg(llama_server())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // Interrupt once the first batch has run (both servers are up).
    while !line.contains(" rep 1/") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "the bench ended early"
        );
    }
    let needle = model.display().to_string();
    assert_eq!(
        processes_naming(&needle).len(),
        3,
        "the bench and its two servers"
    );
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(rest.contains("interrupted"), "{rest}");
    assert!(
        processes_naming(&needle).is_empty(),
        "{:?}",
        processes_naming(&needle)
    );
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "pocket-serve-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
