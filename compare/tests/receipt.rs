//! The receipt schema (round trip, clear errors for missing/wrong fields), its results
//! directory, the history page, and the regression gate (library and `pocket compare`).

mod common;

use std::path::Path;

use common::{bandwidth, load_err, machine};
use pocket_compare::bandwidth::{self};
use pocket_compare::cli::compare_cmd::{self, CompareArgs};
use pocket_compare::cli::engine_args::{PlacementArgs, TestLists};
use std::collections::BTreeMap;

use pocket_compare::engine::{EngineInfo, EngineKind, Test};
use pocket_compare::receipt::{rfc3339, Comparison, EngineSamples, KldParity, Parity, Receipt};
use pocket_compare::sysinfo::{meminfo_total, SysInfo};
use pocket_compare::{gate, history, report};

fn samples(ts: &[f64], rss_mib: u64) -> EngineSamples {
    EngineSamples {
        ts: ts.to_vec(),
        peak_rss_bytes: ts.iter().map(|_| rss_mib << 20).collect(),
        setup_ms: ts.iter().map(|_| 120.0).collect(),
    }
}

/// A receipt with pocket at `speedups` × llama.cpp on SmolLM2 tg8/pp32 × 1/2 threads.
fn receipt(created: &str, speedups: [f64; 4]) -> Receipt {
    let bw = bandwidth();
    let mut r = Receipt::new(machine("test box", Some(bw.clone())), "0a1b2c3d4e5f");
    r.engines.insert(
        EngineKind::LlamaCpp,
        EngineInfo {
            build: "b11434 test".into(),
            options: vec![],
        },
    );
    r.created = created.into();
    let cases = [
        (Test::tg(8), 1, 60.0),
        (Test::tg(8), 2, 100.0),
        (Test::pp(32), 1, 300.0),
        (Test::pp(32), 2, 550.0),
    ];
    for ((test, threads, llama_ts), speedup) in cases.into_iter().zip(speedups) {
        let llama = samples(&[llama_ts, llama_ts * 1.02, llama_ts * 0.98], 180);
        let pocket = samples(&[llama_ts * speedup; 3], 100);
        r.results.push(Comparison::new(
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            Some(96_576_768),
            test,
            threads,
            pocket,
            BTreeMap::from([(EngineKind::LlamaCpp, llama)]),
            Some(&bw),
        ));
    }
    r.parity.push(Parity {
        model: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
        perplexity_pocket: Some(18.25),
        perplexity_llama_cpp: Some(18.24),
        greedy_tokens: Some(128),
        greedy_identical_share: Some(1.0),
        ggml_numerics_identical_share: Some(1.0),
        kld: Some(KldParity {
            rows: 252,
            mean_kld: 0.0123,
            same_top: 0.95,
            ppl_ratio: 1.002,
        }),
        kld_llama_reference: None,
    });
    r
}

#[test]
fn receipt_round_trips_and_derives() {
    let r = receipt("2026-11-30T03:00:00Z", [1.1, 1.2, 0.9, 1.0]);
    let text = serde_json::to_string_pretty(&r).unwrap();
    let back = Receipt::from_json(&text).unwrap();
    assert_eq!(back, r);
    let c = &r.results[0];
    assert!((c.speedup(EngineKind::LlamaCpp).unwrap() - 1.1).abs() < 1e-9);
    assert_eq!(
        c.derived.engines[&EngineKind::LlamaCpp].rss_delta_bytes,
        -(80 << 20)
    );
    // roofline: 9 GB/s / 96.6 MB ≈ 93 t/s for one thread, 15 GB/s for two
    let roof = c.derived.roofline_ts.unwrap();
    assert!((roof - 9e9 / 96_576_768.0).abs() < 1e-6, "{roof}");
    assert!(
        r.results[2].derived.roofline_ts.is_none(),
        "pp has no roofline"
    );
    assert!(
        text.contains("\"test\": \"tg8\""),
        "tests are stored by name"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("receipt.json");
    r.save(&path).unwrap();
    assert_eq!(Receipt::load(&path).unwrap(), r);
}

#[test]
fn receipt_errors_are_clear() {
    let r = receipt("2026-11-30T03:00:00Z", [1.1, 1.2, 0.9, 1.0]);
    let good: serde_json::Value = serde_json::to_value(&r).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        f(&mut v);
        v.to_string()
    };

    let e = load_err(&edit(&|v| {
        v.as_object_mut().unwrap().remove("version");
    }));
    assert!(e.contains("version"), "{e}");
    let e = load_err(&edit(&|v| v["version"] = 7.into()));
    assert!(
        e.contains("version 7") && e.contains("reads versions 1 to 2"),
        "{e}"
    );
    let e = load_err(&edit(&|v| {
        v["results"][0].as_object_mut().unwrap().remove("threads");
    }));
    assert!(e.contains("missing field `threads`"), "{e}");
    let e = load_err(&edit(&|v| v["results"][0]["threads"] = "two".into()));
    assert!(e.contains("invalid type") && e.contains("two"), "{e}");
    let e = load_err(&edit(&|v| v["results"][0]["test"] = "xx9".into()));
    assert!(e.contains("bad test `xx9`"), "{e}");
    let e = load_err(&edit(&|v| v["results"][0]["speed_up"] = 1.into()));
    assert!(e.contains("unknown field `speed_up`"), "{e}");
    let e = load_err(&edit(&|v| {
        v["results"][1]["derived"]["engines"]["llama.cpp"]["speedup"] = 3.0.into()
    }));
    assert!(
        e.contains("results[1]") && e.contains("derived.engines.llama.cpp.speedup"),
        "{e}"
    );
    let e = load_err(&edit(&|v| {
        v["results"][0]["pocket"]["ts"] = serde_json::json!([])
    }));
    assert!(e.contains("pocket: no samples"), "{e}");
    let e = load_err(&edit(&|v| {
        v["parity"][0]["greedy_identical_share"] = 1.5.into()
    }));
    assert!(e.contains("greedy_identical_share"), "{e}");
    let e = load_err(&edit(&|v| {
        v["parity"][0]["kld"]["same_top"] = (-0.1).into()
    }));
    assert!(e.contains("kld.same_top"), "{e}");
    let e = load_err("{ not json");
    assert!(e.contains("not JSON"), "{e}");

    let missing = Receipt::load(Path::new("/nonexistent/receipt.json")).unwrap_err();
    assert!(
        missing.to_string().contains("/nonexistent/receipt.json"),
        "{missing}"
    );
}

#[test]
fn results_dir_has_receipt_csv_report_and_plots() {
    let r = receipt("2026-11-30T03:00:00Z", [1.1, 1.2, 0.9, 1.0]);
    let root = tempfile::tempdir().unwrap();
    let dir = report::write_results_dir(&r, root.path()).unwrap();
    assert_eq!(dir.file_name().unwrap(), "2026-11-30-test-box");
    assert_eq!(Receipt::load(&dir.join("receipt.json")).unwrap(), r);
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4 * 2 * 3);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for needle in [
        "| SmolLM2-135M-Instruct.Q4_1 | tg8 | 1 |",
        "1.100",
        "-80.0",
        "roofline",
        "speedup.svg",
        "100.0%",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle}:\n{md}");
    }
    for svg in ["speedup.svg", "roofline.svg"] {
        let text = std::fs::read_to_string(dir.join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("</svg>"), "{svg}");
        assert!(text.contains("<text"), "{svg} has labels");
    }

    // `pocket compare --report R --results DIR` writes the same directory from a receipt.
    let again = tempfile::tempdir().unwrap();
    compare_cmd::run(CompareArgs {
        report: Some(dir.join("receipt.json")),
        results: Some(again.path().to_path_buf()),
        ..args()
    })
    .unwrap();
    let md2 = std::fs::read_to_string(again.path().join("2026-11-30-test-box/report.md")).unwrap();
    assert_eq!(md2, md);
}

#[test]
fn history_page_plots_every_receipt() {
    let root = tempfile::tempdir().unwrap();
    report::write_results_dir(
        &receipt("2026-11-28T03:00:00Z", [1.0, 1.1, 0.8, 0.9]),
        root.path(),
    )
    .unwrap();
    let mut newer = receipt("2026-11-30T03:00:00Z", [1.1, 1.2, 0.9, 1.0]);
    newer.machine.name = "other".into();
    report::write_results_dir(&newer, root.path()).unwrap();
    std::fs::create_dir(root.path().join("broken")).unwrap();
    std::fs::write(root.path().join("broken/receipt.json"), "{}").unwrap();

    let (receipts, skipped) = history::load_all(root.path()).unwrap();
    assert_eq!(receipts.len(), 2);
    assert_eq!(receipts[0].created, "2026-11-28T03:00:00Z");
    assert_eq!(skipped.len(), 1);
    let html = history::history_html(&receipts, &skipped).unwrap();
    assert_eq!(html.matches("<svg").count(), 1 + 4);
    assert!(html.contains("2026-11-28") && html.contains("skipped"));
    // Two machines: their latest receipts side by side.
    assert!(html.contains("Machines side by side"));
    assert!(html.contains("<th>other</th>") && html.contains("<th>test box</th>"));
    assert!(html.contains("1.10× llama.cpp ("), "{html}");

    compare_cmd::run(CompareArgs {
        history: Some(root.path().to_path_buf()),
        ..args()
    })
    .unwrap();
    assert!(root.path().join("history.html").is_file());
}

fn args() -> CompareArgs {
    CompareArgs {
        engines: Vec::new(),
        history: None,
        out: None,
        baseline: None,
        current: None,
        fail_below: 0.95,
        report: None,
        results: None,
        model: Vec::new(),
        threads: Vec::new(),
        tests: TestLists {
            n_prompt: vec![512],
            n_gen: vec![128],
            n_depth: vec![0],
        },
        reps: 5,
        no_parity: false,
        no_bandwidth: false,
        placement: PlacementArgs::default(),
        contention: None,
    }
}

#[test]
fn gate_lists_every_drop_and_passes_otherwise() {
    let base = receipt("2026-11-28T03:00:00Z", [1.10, 1.20, 0.90, 1.00]);
    let fine = receipt("2026-11-30T03:00:00Z", [1.08, 1.25, 0.87, 1.00]);
    let worse = receipt("2026-11-30T03:00:00Z", [1.00, 1.20, 0.80, 1.00]);

    let ok = gate::check(&base, &fine, 0.95);
    assert!(ok.passed() && ok.checked == 4, "{ok}");
    let bad = gate::check(&base, &worse, 0.95);
    assert!(!bad.passed());
    let keys: Vec<String> = bad
        .regressions
        .iter()
        .map(|r| format!("{} t{}", r.test, r.threads))
        .collect();
    assert_eq!(keys, ["tg8 t1", "pp32 t1"]);
    let text = bad.to_string();
    assert!(
        text.contains("gate FAILED: 2 of 4") && text.contains("tg8 t1") && text.contains("pp32 t1"),
        "{text}"
    );

    // Through `pocket compare --baseline --current --fail-below`.
    let dir = tempfile::tempdir().unwrap();
    let save = |name: &str, r: &Receipt| {
        let p = dir.path().join(name);
        r.save(&p).unwrap();
        p
    };
    let (b, f, w) = (
        save("base.json", &base),
        save("fine.json", &fine),
        save("worse.json", &worse),
    );
    let gate_args = |current| CompareArgs {
        baseline: Some(b.clone()),
        current: Some(current),
        ..args()
    };
    compare_cmd::run(gate_args(f)).unwrap();
    let err = compare_cmd::run(gate_args(w)).unwrap_err();
    assert!(err.to_string().contains("2 speedup regression(s)"), "{err}");
}

#[test]
fn cli_parses_compare_modes() {
    use clap::Parser;
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: CompareArgs,
    }
    let t = T::try_parse_from([
        "t",
        "--baseline",
        "a.json",
        "--current",
        "b.json",
        "--fail-below",
        "0.9",
    ])
    .unwrap();
    assert_eq!(t.a.fail_below, 0.9);
    assert!(
        T::try_parse_from(["t", "--baseline", "a.json"]).is_err(),
        "needs --current"
    );
    // No mode: a live comparison (default models); its flags do not mix with the modes.
    assert!(T::try_parse_from(["t"]).is_ok());
    assert!(T::try_parse_from(["t", "-m", "a.gguf", "--report", "r.json"]).is_err());
    assert!(T::try_parse_from(["t", "-r", "3", "--history", "results"]).is_err());
    assert!(T::try_parse_from(["t", "--history", "results"]).is_ok());
}

#[test]
fn dates_and_machine_facts() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
    assert_eq!(
        meminfo_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"),
        Some(16 << 20)
    );
    let mut si = SysInfo::detect();
    assert!(si.logical_cores >= 1 && !si.os.is_empty() && !si.arch.is_empty());
    si.fill_from_cpuinfo("processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fma avx2 sse\nphysical id\t: 0\ncore id\t\t: 0\n\nprocessor\t: 1\nphysical id\t: 0\ncore id\t\t: 1\n");
    assert_eq!(si.physical_cores, Some(2));
    assert!(si.cpu_flags.contains(&"avx2".to_string()));
}

#[test]
fn bandwidth_probe_reports_gbs() {
    let bw = bandwidth::probe(16 << 20, 2);
    assert_eq!(bw.buffer_bytes, 16 << 20);
    assert!(bw.single_gbs > 0.1 && bw.multi_gbs > 0.1, "{bw:?}");
    assert_eq!(bw.for_threads(1), bw.single_gbs);
}

#[test]
fn default_bandwidth_probe_is_quick() {
    let start = std::time::Instant::now();
    let bw = bandwidth::probe_default();
    let secs = start.elapsed().as_secs_f64();
    eprintln!("{bw:?} in {secs:.2} s");
    assert_eq!(bw.buffer_bytes, 512 << 20);
    // < 2 s on an idle machine; slack for a shared one.
    assert!(secs < 6.0, "{secs} s");
    assert!(bw.multi_gbs > 0.5 && bw.single_gbs > 0.5, "{bw:?}");
}
