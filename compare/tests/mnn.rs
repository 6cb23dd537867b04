//! MNN-LLM as a reference engine: its bench driver's output (stored real output of
//! `compare/mnn_bench.py` on the MNN export of pocket synth's MNN-Pocket Q4_1) is read into
//! llama-bench rows, bad output is refused with a clear error, `mnn` is an engine name of
//! receipts and `--engines`, receipts with three engines (and a skipped model) round-trip,
//! and MNN is only run on the MNN-Pocket shape.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{bandwidth, data, machine};
use pocket_compare::engine::{parse_mnn_json, EngineInfo, EngineKind, Mnn, Test};
use pocket_compare::llama_bench::Provisioned;
use pocket_compare::receipt::{Comparison, EngineSamples, Receipt, Skipped};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

#[test]
fn mnn_bench_output_is_read() {
    // pp512: the prompt's forward pass alone is timed.
    let text = fixture("mnn-bench-pp512.json");
    // MNN prints a line of its own on stdout before the driver's JSON.
    assert!(text
        .lines()
        .next()
        .unwrap()
        .starts_with("The device supports"));
    let run = parse_mnn_json(&text).unwrap();
    assert_eq!(run.mnn_version, "3.6.1");
    assert_eq!(
        (run.precision.as_str(), run.memory.as_str()),
        ("low", "low")
    );
    assert_eq!((run.attention_mode, run.dynamic_option), (8, 8));
    let row = run.row(Test::pp(512)).unwrap();
    assert_eq!((row.n_prompt, row.n_gen, row.n_depth), (512, 0, 0));
    assert_eq!(row.n_threads, 2);
    assert_eq!(row.avg_ns, run.prefill_us * 1000);
    assert_eq!(row.samples_ns, [row.avg_ns]);
    let ts = 512.0 / (run.prefill_us as f64 / 1e6);
    assert!(
        (row.avg_ts - ts).abs() < 1e-9 * ts,
        "{} vs {ts}",
        row.avg_ts
    );
    assert_eq!(row.samples_ts, [row.avg_ts]);
    assert_eq!(row.model_size, run.weight_bytes);
    assert_eq!(row.build_commit, "mnn 3.6.1");
    assert_eq!(row.extra["precision"], "low");
    assert_eq!(row.extra["prefill_us"], run.prefill_us);

    // tg128 from a one-token context: the decode steps alone, the context's pass not.
    let run = parse_mnn_json(&fixture("mnn-bench-tg128.json")).unwrap();
    assert_eq!((run.prompt_tokens, run.decode_tokens), (1, 128));
    assert!(run.prefill_us > 0, "the 1-token context was timed apart");
    let row = run.row(Test::tg(128)).unwrap();
    assert_eq!(row.avg_ns, run.decode_us * 1000);
    let ts = 128.0 / (run.decode_us as f64 / 1e6);
    assert!((row.avg_ts - ts).abs() < 1e-9 * ts);

    // pp32+tg8: both, over 40 tokens; a prompt of at most 300 tokens gets dynamic_option 0.
    let run = parse_mnn_json(&fixture("mnn-bench-pp32+tg8.json")).unwrap();
    assert_eq!(run.dynamic_option, 0);
    let row = run.row(Test::pg(32, 8)).unwrap();
    assert_eq!(row.avg_ns, (run.prefill_us + run.decode_us) * 1000);
    assert_eq!(row.test_name(), "pp32+tg8");
}

#[test]
fn bad_mnn_bench_output_is_refused() {
    let text = fixture("mnn-bench-tg128.json");
    let json = text.lines().last().unwrap();
    let err = |t: &str| parse_mnn_json(t).unwrap_err().to_string();
    assert!(err("").contains("no JSON line"));
    assert!(err("The device supports: i8sdot:0\n").contains("no JSON line"));
    assert!(err(&json[..json.len() / 2]).contains("MNN bench driver output"));
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_object_mut().unwrap().remove("decode_us");
    let e = err(&v.to_string());
    assert!(e.contains("missing field `decode_us`"), "{e}");
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["prefill_us"] = "fast".into();
    let e = err(&v.to_string());
    assert!(e.contains("invalid type: string \"fast\""), "{e}");

    let row_err = |v: &serde_json::Value, test: Test| {
        parse_mnn_json(&v.to_string())
            .unwrap()
            .row(test)
            .unwrap_err()
            .to_string()
    };
    let good: serde_json::Value = serde_json::from_str(json).unwrap();
    let e = row_err(&good, Test::pp(512));
    assert!(e.contains("a run of -p 0 -n 128, asked for pp512"), "{e}");
    let mut early = good.clone();
    early["decode_tokens"] = 100.into();
    let e = row_err(&early, Test::tg(128));
    assert!(e.contains("100 of 128 tokens generated"), "{e}");
    let mut zero = good.clone();
    zero["decode_us"] = 0.into();
    let e = row_err(&zero, Test::tg(128));
    assert!(e.contains("no time measured"), "{e}");
}

#[test]
fn mnn_is_an_engine_name() {
    assert_eq!(EngineKind::Mnn.name(), "mnn");
    assert_eq!(EngineKind::ALL.last(), Some(&EngineKind::Mnn));
    let json = serde_json::to_string(&EngineKind::Mnn).unwrap();
    assert_eq!(json, "\"mnn\"");
    assert_eq!(
        serde_json::from_str::<EngineKind>(&json).unwrap(),
        EngineKind::Mnn
    );
    assert_eq!(EngineKind::Mnn.provision(), "bash compare/provision-mnn.sh");

    use clap::Parser;
    use pocket_compare::cli::compare_cmd::CompareArgs;
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: CompareArgs,
    }
    let t = T::try_parse_from(["t", "--engines", "llama.cpp,mnn"]).unwrap();
    assert_eq!(t.a.engines, [EngineKind::LlamaCpp, EngineKind::Mnn]);
}

#[test]
fn mnn_not_provisioned_names_the_script() {
    let e = Mnn::in_cache(Path::new("/nonexistent"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bash compare/provision-mnn.sh"), "{e}");
    // The venv's python alone is not enough: VENV_INFO is written last.
    let cache = tempfile::tempdir().unwrap();
    let bin = cache.path().join("mnn/venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("python"), "").unwrap();
    assert!(Mnn::in_cache(cache.path()).is_err());
    std::fs::write(cache.path().join("mnn/VENV_INFO"), "MNN 3.6.1").unwrap();
    let mnn = Mnn::in_cache(cache.path()).unwrap();
    let gguf = cache.path().join("m.gguf");
    std::fs::write(&gguf, [0u8; 1234]).unwrap();
    assert!(mnn.model_dir(&gguf).unwrap().ends_with("mnn/models/m-1234"));
}

#[test]
fn mnn_command_line_follows_llm_bench() {
    let args = Mnn::args(Path::new("/c/mnn/models/m"), Test::pg(16, 4), 2);
    assert_eq!(
        args.join(" "),
        "--model /c/mnn/models/m -p 16 -n 4 -t 2 --precision low --memory low --attention-mode 8"
    );
}

#[test]
fn mnn_runs_only_the_mnn_pocket_shape() {
    let why = Mnn::cannot_run(&common::smollm2()).expect("SmolLM2 is not MNN-Pocket");
    assert!(why.contains("not the MNN-Pocket shape"), "{why}");
    let why = Mnn::cannot_run(Path::new("/nonexistent.gguf")).unwrap();
    assert!(why.contains("cannot read its header"), "{why}");
    let why = Mnn::cannot_run(&data("mnn-bench-pp512.json")).unwrap();
    assert!(why.contains("cannot read its header"), "{why}");
}

fn samples(ts: f64, rss_mib: u64) -> EngineSamples {
    EngineSamples {
        ts: vec![ts - 1.0, ts + 1.0],
        peak_rss_bytes: vec![rss_mib << 20; 2],
        setup_ms: vec![150.0; 2],
    }
}

#[test]
fn receipt_with_three_engines_round_trips() {
    let bw = bandwidth();
    let mut r = Receipt::new(machine("box", Some(bw.clone())), "0a1b2c3d4e5f");
    r.created = "2026-12-03T14:00:00Z".into();
    let info = |build: &str| EngineInfo {
        build: build.into(),
        options: vec!["--precision".into(), "low".into()],
    };
    for k in EngineKind::ALL {
        r.engines.insert(k, info(k.name()));
    }
    let engines = BTreeMap::from([
        (EngineKind::LlamaCpp, samples(77.0, 250)),
        (EngineKind::IkLlamaCpp, samples(116.0, 260)),
        (EngineKind::Mnn, samples(120.0, 308)),
    ]);
    r.results.push(Comparison::new(
        "mnn-pocket-0.3b-synth-q4_1.gguf",
        Some(191_000_000),
        Test::tg(128),
        2,
        samples(139.0, 200),
        engines,
        Some(&bw),
    ));
    r.skipped.push(Skipped {
        model: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
        engine: EngineKind::Mnn,
        test: None,
        why: "not the MNN-Pocket shape".into(),
    });
    let text = serde_json::to_string_pretty(&r).unwrap();
    assert!(text.contains("\"mnn\"") && text.contains("\"skipped\""));
    let back = Receipt::from_json(&text).unwrap();
    assert_eq!(back, r);
    let c = &back.results[0];
    assert!((c.speedup(EngineKind::Mnn).unwrap() - 139.0 / 120.0).abs() < 1e-9);
    assert_eq!(
        back.measured_engines(),
        [
            EngineKind::LlamaCpp,
            EngineKind::IkLlamaCpp,
            EngineKind::Mnn
        ]
    );
    let md = pocket_compare::report::report_md(&back, false);
    assert!(
        md.contains("- mnn not run on SmolLM2-135M-Instruct.Q4_1.gguf: not the MNN-Pocket shape"),
        "{md}"
    );
    // A receipt without `skipped` (every receipt before MNN) loads, and writes none.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("skipped");
    let old = Receipt::from_json(&v.to_string()).unwrap();
    assert!(old.skipped.is_empty());
    assert!(!serde_json::to_string(&old).unwrap().contains("skipped"));
}
