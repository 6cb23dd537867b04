//! pocket against N reference engines: receipts with llama.cpp and ik_llama.cpp round-trip,
//! version 1 receipts (llama.cpp alone) still load, the report, CSV, history page and gate
//! carry one column/series/check per engine, `--engines` parses, and ik_llama.cpp's
//! llama-bench output is read from stored real output of the ik build.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{bandwidth, data, load_err, machine};
use pocket_compare::engine::{parse_ik_json, EngineInfo, EngineKind, IkLlamaCpp, Test};
use pocket_compare::llama_bench::Provisioned;
use pocket_compare::receipt::{Comparison, EngineSamples, Receipt};
use pocket_compare::{gate, history, report};

const LLAMA: EngineKind = EngineKind::LlamaCpp;
const IK: EngineKind = EngineKind::IkLlamaCpp;

fn samples(ts: &[f64], rss_mib: u64) -> EngineSamples {
    EngineSamples {
        ts: ts.to_vec(),
        peak_rss_bytes: ts.iter().map(|_| rss_mib << 20).collect(),
        setup_ms: ts.iter().map(|_| 150.0).collect(),
    }
}

/// pocket at 100 t/s (tg8) and 500 t/s (pp32) on two threads; llama.cpp at 100 /
/// `llama_x` and ik_llama.cpp at 100 / `ik_x` of that (`ik_x` None: ik_llama.cpp not run).
fn receipt(created: &str, llama_x: [f64; 2], ik_x: Option<[f64; 2]>) -> Receipt {
    let bw = bandwidth();
    let mut r = Receipt::new(machine("box", Some(bw.clone())), "0a1b2c3d4e5f");
    r.created = created.into();
    let info = |build: &str, options: &[&str]| EngineInfo {
        build: build.into(),
        options: options.iter().map(|s| s.to_string()).collect(),
    };
    r.engines.insert(LLAMA, info("b11434 test", &[]));
    if ik_x.is_some() {
        r.engines
            .insert(IK, info("ik 0.1.5 test", &["-rtr", "1", "-fa", "1"]));
    }
    for (i, (test, ts)) in [(Test::tg(8), 100.0), (Test::pp(32), 500.0)]
        .into_iter()
        .enumerate()
    {
        let mut engines = BTreeMap::from([(LLAMA, samples(&[ts / llama_x[i]; 2], 180))]);
        if let Some(x) = ik_x {
            engines.insert(IK, samples(&[ts / x[i] - 5.0, ts / x[i] + 5.0], 200));
        }
        r.results.push(Comparison::new(
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            Some(96_576_768),
            test,
            2,
            samples(&[ts; 2], 100),
            engines,
            Some(&bw),
        ));
    }
    r
}

#[test]
fn receipt_with_two_engines_round_trips() {
    let r = receipt("2026-12-01T23:00:00Z", [1.5, 2.0], Some([1.25, 0.8]));
    let text = serde_json::to_string_pretty(&r).unwrap();
    assert_eq!(Receipt::from_json(&text).unwrap(), r);
    assert!(text.contains("\"version\": 2") && text.contains("\"ik_llama.cpp\""));
    let c = &r.results[1];
    // pocket 500 t/s against ik_llama.cpp's 625 mean (620 and 630).
    assert!((c.speedup(IK).unwrap() - 0.8).abs() < 1e-9);
    assert!((c.speedup(LLAMA).unwrap() - 2.0).abs() < 1e-9);
    assert_eq!(c.derived.engines[&IK].rss_delta_bytes, -(100 << 20));
    assert_eq!(r.measured_engines(), [LLAMA, IK]);

    let value: serde_json::Value = serde_json::to_value(&r).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = value.clone();
        f(&mut v);
        load_err(&v.to_string())
    };
    let e =
        edit(&|v| v["results"][0]["derived"]["engines"]["ik_llama.cpp"]["ts_mean"] = 1.0.into());
    assert!(e.contains("derived.engines.ik_llama.cpp.ts_mean"), "{e}");
    let e = edit(&|v| {
        v["results"][0]["derived"]["engines"]
            .as_object_mut()
            .unwrap()
            .remove("ik_llama.cpp");
    });
    assert!(e.contains("not the engines of the samples"), "{e}");
    let e = edit(&|v| {
        v["engines"].as_object_mut().unwrap().remove("ik_llama.cpp");
    });
    assert!(e.contains("ik_llama.cpp has samples but is not in"), "{e}");
    let e = edit(&|v| v["results"][1]["engines"]["ik_llama.cpp"]["ts"] = serde_json::json!([]));
    assert!(
        e.contains("results[1]") && e.contains("ik_llama.cpp: no samples"),
        "{e}"
    );
    let e = edit(&|v| v["results"][0]["engines"] = serde_json::json!({}));
    assert!(e.contains("no reference engine"), "{e}");
    let e = edit(&|v| v["results"][0]["engines"]["mnn-llm"] = v["results"][0]["pocket"].clone());
    assert!(e.contains("mnn-llm"), "{e}");
}

#[test]
fn version_1_receipts_still_load() {
    let text = std::fs::read_to_string(data("receipt-v1-2026-12-01-vm.json")).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(raw["version"], 1);
    let r = Receipt::from_json(&text).unwrap();
    assert_eq!(r.engines.keys().copied().collect::<Vec<_>>(), [LLAMA]);
    assert_eq!(
        r.engines[&LLAMA].build,
        raw["llama_cpp_build"].as_str().unwrap()
    );
    // A version 1 llama.cpp ran with the receipt's placement flags.
    let p = &raw["placement"];
    let strict = if p["cpu_strict"].as_bool().unwrap() {
        "1"
    } else {
        "0"
    };
    let poll = p["poll"].to_string();
    let mask = p["cpu_mask"].as_str().unwrap();
    assert_eq!(
        r.engines[&LLAMA].options,
        ["--cpu-mask", mask, "--cpu-strict", strict, "--poll", &poll]
    );
    assert_eq!(r.results.len(), raw["results"].as_array().unwrap().len());
    for (c, old) in r.results.iter().zip(raw["results"].as_array().unwrap()) {
        let stored = old["derived"]["speedup"].as_f64().unwrap();
        assert!((c.speedup(LLAMA).unwrap() - stored).abs() < 1e-9 * stored);
        assert_eq!(
            c.engines[&LLAMA].ts,
            serde_json::from_value::<Vec<f64>>(old["llama_cpp"]["ts"].clone()).unwrap()
        );
    }
    // Saved again, it is a version 2 receipt with the same content.
    let again = Receipt::from_json(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(again, r);
    // A hand edit of a version 1 receipt's derived values is still caught.
    let mut edited = raw.clone();
    edited["results"][0]["derived"]["llama_cpp_ts_mean"] = 1.0.into();
    let e = load_err(&edited.to_string());
    assert!(e.contains("derived.engines.llama.cpp.ts_mean"), "{e}");
}

#[test]
fn every_stored_receipt_in_the_tree_loads() {
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results");
    let (receipts, skipped) = history::load_all(&results).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert!(receipts.len() >= 4, "{} receipts", receipts.len());
    // The serving benchmark's receipts, left out of that history, load as what they are.
    let mut serve = 0;
    for path in history::find_receipts(&results).unwrap() {
        if history::is_other_kind(&path) {
            use pocket_compare::serve_bench::{receipt, spec_receipt};
            let text = std::fs::read_to_string(&path).unwrap();
            let kind: serde_json::Value = serde_json::from_str(&text).unwrap();
            let fail = |e: serde_json::Error| -> ! { panic!("{}: {e}", path.display()) };
            if kind["kind"] == spec_receipt::KIND {
                let r: spec_receipt::SpecReceipt =
                    serde_json::from_str(&text).unwrap_or_else(|e| fail(e));
                assert_eq!(r.run.kind, spec_receipt::KIND);
            } else {
                let r: receipt::ServeReceipt =
                    serde_json::from_str(&text).unwrap_or_else(|e| fail(e));
                assert_eq!(r.run.kind, receipt::KIND);
            }
            serve += 1;
        }
    }
    assert!(
        serve >= 1,
        "no serving-benchmark receipt found under results/"
    );
}

#[test]
fn report_and_csv_have_a_column_per_engine() {
    let r = receipt("2026-12-01T23:00:00Z", [1.5, 2.0], Some([1.25, 0.8]));
    let csv = report::results_csv(&r);
    // 2 comparisons × 3 engines × 2 repetitions.
    assert_eq!(csv.lines().count(), 1 + 2 * 3 * 2);
    assert_eq!(csv.matches(",ik_llama.cpp,").count(), 4);
    let md = report::report_md(&r, false);
    for needle in [
        "# pocket vs llama.cpp, ik_llama.cpp",
        "| model | test | threads | pocket t/s | llama.cpp t/s | ik_llama.cpp t/s | × llama.cpp | × ik_llama.cpp |",
        "| SmolLM2-135M-Instruct.Q4_1 | pp32 | 2 | 500.00 ± 0.00 | 250.00 ± 0.00 | 625.00 ± 7.07 | 2.000 | 0.800 |",
        "ik_llama.cpp: ik 0.1.5 test; every run with `-rtr 1 -fa 1`",
        "ik_llama.cpp RSS MiB",
        "200.0 (-100.0)",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle}:\n{md}");
    }
    let root = tempfile::tempdir().unwrap();
    let dir = report::write_results_dir(&r, root.path()).unwrap();
    let svg = std::fs::read_to_string(dir.join("speedup.svg")).unwrap();
    assert!(
        svg.contains("over ik_llama.cpp") && svg.contains("0.80"),
        "{svg}"
    );
    let roof = std::fs::read_to_string(dir.join("roofline.svg")).unwrap();
    assert!(roof.contains("ik_llama.cpp"));
}

#[test]
fn gate_checks_each_engine_on_its_own() {
    let base = receipt("2026-12-01T20:00:00Z", [1.5, 2.0], Some([1.25, 0.8]));
    let same = receipt("2026-12-01T23:00:00Z", [1.5, 2.0], Some([1.25, 0.8]));
    let ok = gate::check(&base, &same, 0.95);
    assert!(ok.passed() && ok.checked == 4, "{ok}");
    // pocket slower against ik_llama.cpp on pp32 only: one regression, named by engine.
    let worse = receipt("2026-12-01T23:00:00Z", [1.5, 2.0], Some([1.25, 0.7]));
    let bad = gate::check(&base, &worse, 0.95);
    assert_eq!(bad.regressions.len(), 1, "{bad}");
    assert_eq!(bad.regressions[0].engine, IK);
    assert_eq!(bad.regressions[0].test, Test::pp(32));
    assert!(
        bad.to_string()
            .contains("pp32 t2: speedup over ik_llama.cpp 0.700"),
        "{bad}"
    );
    // ik_llama.cpp not measured now: reported, not failed; llama.cpp still checked.
    let without = receipt("2026-12-01T23:00:00Z", [1.4, 2.0], None);
    let partial = gate::check(&base, &without, 0.95);
    assert_eq!(partial.checked, 2);
    assert_eq!(partial.missing_engines.len(), 2);
    assert_eq!(partial.regressions.len(), 1);
    assert_eq!(partial.regressions[0].engine, LLAMA);
    assert!(partial
        .to_string()
        .contains("not measured now: ik_llama.cpp on"));
}

#[test]
fn history_mixes_one_and_two_engine_receipts() {
    let old = Receipt::from_json(
        &std::fs::read_to_string(data("receipt-v1-2026-12-01-vm.json")).unwrap(),
    )
    .unwrap();
    let newer = receipt("2026-12-02T01:00:00Z", [1.5, 2.0], Some([1.25, 0.8]));
    let html = history::history_html(&[old.clone(), newer], &[]).unwrap();
    assert!(html.contains("<h2>Speedup (pocket / llama.cpp)</h2>"));
    assert!(html.contains("<h2>Speedup (pocket / ik_llama.cpp)</h2>"));
    let keys = old.results.len() + 2;
    // Two speedup charts (one per engine) and a t/s chart per (model, test, threads).
    assert_eq!(html.matches("<svg").count(), 2 + keys);
    assert!(html.contains("ik_llama.cpp: ik 0.1.5 test"));
}

#[test]
fn engines_flag_parses() {
    use clap::Parser;
    use pocket_compare::cli::compare_cmd::CompareArgs;
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: CompareArgs,
    }
    let t = T::try_parse_from(["t", "--engines", "llama.cpp,ik_llama.cpp"]).unwrap();
    assert_eq!(t.a.engines, [LLAMA, IK]);
    assert!(T::try_parse_from(["t"]).unwrap().a.engines.is_empty());
    let e = T::try_parse_from(["t", "--engines", "vllm"])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("ik_llama.cpp"), "names the engines: {e}");
    assert!(T::try_parse_from(["t", "--engines", "llama.cpp", "--history", "r"]).is_err());
}

#[test]
fn ik_llama_bench_json_is_read() {
    let text = std::fs::read_to_string(data("ik-llama-bench-smollm2-q4_1.json")).unwrap();
    let rows = parse_ik_json(&text).unwrap();
    assert_eq!(rows.len(), 2);
    let (pp, tg) = (&rows[0], &rows[1]);
    assert_eq!((pp.n_prompt, pp.n_gen), (32, 0));
    assert_eq!((tg.n_prompt, tg.n_gen), (0, 8));
    for r in &rows {
        assert_eq!(
            r.model_filename.rsplit('/').next(),
            Some("SmolLM2-135M-Instruct.Q4_1.gguf")
        );
        // ik_llama.cpp's own count, larger than mainline's 96_576_768 for the same file.
        assert_eq!(r.model_size, 126_657_792);
        assert_eq!(r.n_threads, 2);
        assert_eq!(r.flash_attn, 1);
        assert!(r.repack, "-rtr 1");
        assert_eq!(r.samples_ns.len(), 1);
        let ts = r.samples_ts[0];
        assert!((ts - r.avg_ts).abs() < 1e-3 * ts, "{ts} vs {}", r.avg_ts);
        // ik's own fields survive in `extra`.
        assert!(r.extra.contains_key("mla_attn") && r.extra.contains_key("test"));
    }
    assert_eq!(pp.extra["test"], "pp32");
    assert!(pp.avg_ts > tg.avg_ts, "prefill is faster per token");

    let bad = |t: &str| parse_ik_json(t).unwrap_err().to_string();
    assert!(bad("[]").contains("empty"));
    assert!(bad("{}").contains("array"));
    assert!(bad("[1]").contains("row 1: not an object"));
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[1].as_object_mut().unwrap().remove("avg_ts");
    assert!(bad(&v.to_string()).contains("row 2: missing llama-bench field(s): avg_ts"));
    let e = bad(&text[..text.len() / 2]);
    assert!(e.contains("ik_llama.cpp llama-bench json"), "{e}");
}

#[test]
fn ik_command_line_repacks_and_uses_flash_attention() {
    let args = IkLlamaCpp::args(Path::new("m.gguf"), Test::pp(512), 2);
    assert_eq!(
        args.join(" "),
        "-m m.gguf -t 2 -p 512 -n 0 -r 1 -o json -rtr 1 -fa 1"
    );
    let pg = IkLlamaCpp::args(Path::new("m.gguf"), "pp16+tg4".parse().unwrap(), 1);
    assert!(pg
        .join(" ")
        .contains("-p 0 -n 0 -r 1 -o json -pg 16,4 -rtr 1 -fa 1"));
    let missing = IkLlamaCpp::in_cache(Path::new("/nonexistent"))
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("bash compare/provision-ik-llama.sh"),
        "{missing}"
    );
}

#[test]
fn the_native_ik_build_wins_once_complete() {
    let cache = tempfile::tempdir().unwrap();
    let install = |dir: &str, info: bool| {
        let bin = cache.path().join(dir).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("llama-bench"), "").unwrap();
        if info {
            std::fs::write(cache.path().join(dir).join("BUILD_INFO"), dir).unwrap();
        }
    };
    install("ik_llama.cpp-prebuilt", true);
    // A native build under way (no BUILD_INFO yet) is not used.
    install("ik_llama.cpp", false);
    let ik = IkLlamaCpp::in_cache(cache.path()).unwrap();
    assert!(
        ik.dir.ends_with("ik_llama.cpp-prebuilt"),
        "{}",
        ik.dir.display()
    );
    install("ik_llama.cpp", true);
    let ik = IkLlamaCpp::in_cache(cache.path()).unwrap();
    assert!(ik.dir.ends_with("ik_llama.cpp"), "{}", ik.dir.display());
}
