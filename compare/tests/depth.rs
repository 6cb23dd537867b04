//! llama-bench's depth (`-d`): test names carry it as llama-bench's md table spells it,
//! each engine gets it on its command line, pocket bench really runs each test with the
//! depth's tokens in its cache, a test beyond the model's context is refused, and
//! receipts store it as `n_depth` (receipts without it mean depth 0).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{data, load_err, machine, smollm2};
use pocket_compare::engine::{
    parse_ik_json, Engine, EngineKind, IkLlamaCpp, Pocket, Reference, Test,
};
use pocket_compare::pocket_bench::{self, BenchOptions};
use pocket_compare::receipt::{Comparison, EngineSamples, Receipt};
use pocket_compare::{report, Error};

#[test]
fn test_names_carry_the_depth_as_llama_bench_does() {
    let t = Test::pp(512).at_depth(4096);
    assert_eq!(t.to_string(), "pp512 @ d4096");
    assert_eq!(Test::tg(128).at_depth(4096).to_string(), "tg128 @ d4096");
    assert_eq!(Test::pg(16, 4).at_depth(8).to_string(), "pp16+tg4 @ d8");
    assert_eq!(Test::pp(512).to_string(), "pp512");
    assert_eq!("pp512 @ d4096".parse::<Test>().unwrap(), t);
    assert_eq!("pp512".parse::<Test>().unwrap().n_depth, 0);
    assert_eq!(t.positions(), 4608);
    for bad in ["pp512 @ 4096", "pp512 @ dx", "pp512 @ d-1", "@ d4"] {
        assert!(bad.parse::<Test>().is_err(), "{bad}");
    }
    // Weights alone bound decode only from an empty cache.
    assert!(Test::tg(128).is_decode() && !Test::tg(128).at_depth(64).is_decode());
}

#[test]
fn every_engine_gets_the_depth() {
    let m = Path::new("m.gguf");
    let args = Pocket::args(m, Test::tg(128).at_depth(4096), 2).join(" ");
    assert!(args.contains("-p 0 -n 128 -d 4096 -t 2"), "{args}");
    assert!(!Pocket::args(m, Test::tg(128), 2).contains(&"-d".to_string()));
    // ik_llama.cpp's llama-bench has no -d: its -gp is mainline's tg at depth.
    let ik = IkLlamaCpp::args(m, Test::tg(128).at_depth(4096), 2).join(" ");
    assert!(
        ik.contains("-p 0 -n 0 -r 1 -o json -gp 4096,128 -rtr 1 -fa 1"),
        "{ik}"
    );
    let ik = IkLlamaCpp {
        dir: "/nonexistent".into(),
    };
    assert!(ik.refuses(Test::tg(128).at_depth(4096)).is_none());
    assert!(ik.refuses(Test::pp(512)).is_none());
    let why = ik.refuses(Test::pp(512).at_depth(4096)).unwrap();
    assert!(why.contains("no -d"), "{why}");
    let e = ik
        .bench(m, Test::pp(512).at_depth(4096), 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ik_llama.cpp cannot run pp512 @ d4096"), "{e}");
}

/// A `-gp 32,8` row of ik_llama.cpp: the stored real tg8 row with the two fields `-gp`
/// changes (`n_prompt` and the `test` label, ik_llama.cpp's `tg%d@pp%d`).
#[test]
fn ik_gen_after_prompt_rows_read_as_tg_at_depth() {
    let text = std::fs::read_to_string(data("ik-llama-bench-smollm2-q4_1.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tg = v[1].as_object_mut().unwrap();
    assert_eq!(tg["test"], "tg8");
    tg.insert("n_prompt".into(), 32.into());
    tg.insert("test".into(), "tg8@pp32".into());
    let rows = parse_ik_json(&v.to_string()).unwrap();
    assert_eq!(
        (rows[1].n_prompt, rows[1].n_gen, rows[1].n_depth),
        (0, 8, 32)
    );
    assert_eq!(rows[1].test_name(), "tg8 @ d32");
    // The pp32 row is untouched.
    assert_eq!((rows[0].n_prompt, rows[0].n_depth), (32, 0));
}

/// Real llama-bench output at depth (`-d 0,32`), json on stdout and md on stderr of one
/// run: the rows carry `n_depth`, the md labels read back, and pocket's md writer prints
/// the same table from the json rows.
#[test]
fn real_llama_bench_rows_at_depth_parse_and_print_the_same() {
    use pocket_compare::bench_format::{parse, write, Format};
    let json = std::fs::read_to_string(data("llama-bench-depth-d32.json")).unwrap();
    let md = std::fs::read_to_string(data("llama-bench-depth-d32.md")).unwrap();
    let rows = parse(&json, Format::Json).unwrap();
    let shape: Vec<(i64, i64, i64)> = rows
        .iter()
        .map(|r| (r.n_prompt, r.n_gen, r.n_depth))
        .collect();
    assert_eq!(shape, [(16, 0, 0), (0, 4, 0), (16, 0, 32), (0, 4, 32)]);
    let md_rows = parse(&md, Format::Md).unwrap();
    let names: Vec<String> = md_rows.iter().map(|r| r.test_name()).collect();
    assert_eq!(names, ["pp16", "tg4", "pp16 @ d32", "tg4 @ d32"]);
    assert_eq!(write(&rows, Format::Md), md);
    // Every machine format keeps n_depth.
    for f in [Format::Json, Format::Jsonl, Format::Csv] {
        let again = parse(&write(&rows, f), f).unwrap();
        let depths: Vec<i64> = again.iter().map(|r| r.n_depth).collect();
        assert_eq!(depths, [0, 0, 32, 32], "{f:?}");
    }
}

#[test]
fn pocket_bench_runs_each_test_with_the_depth_in_its_cache() {
    let m = pocket_bench::load(&smollm2()).unwrap();
    let o = BenchOptions::default();
    for (test, positions) in [
        (Test::pp(16), 16),
        (Test::pp(16).at_depth(40), 56),
        (Test::tg(4).at_depth(40), 44),
        // More than one ubatch of depth.
        (Test::tg(2).at_depth(600), 602),
    ] {
        let r = pocket_bench::measure(&m, test, 1, 2, &o).unwrap();
        assert_eq!(r.positions, positions, "{test}");
        assert_eq!(r.row.n_depth, i64::from(test.n_depth), "{test}");
        assert_eq!(r.row.test_name(), test.to_string());
        // t/s counts the test's tokens, not the depth's.
        let tokens = f64::from(test.n_prompt + test.n_gen);
        let want = 1e9 * tokens / r.row.samples_ns[0] as f64;
        assert!((r.row.samples_ts[0] - want).abs() < 1e-9 * want);
    }
}

#[test]
fn a_depth_beyond_the_context_is_refused() {
    let m = pocket_bench::load(&smollm2()).unwrap();
    let n_ctx = m.model.config.n_ctx_train as u32;
    let o = BenchOptions::default();
    let at_edge = Test::tg(1).at_depth(n_ctx - 1);
    assert!(pocket_bench::check_fits(&m, at_edge).is_ok());
    let over = Test::pp(16).at_depth(n_ctx - 8);
    let e = pocket_bench::measure(&m, over, 1, 1, &o).unwrap_err();
    assert!(matches!(e, Error::BeyondContext { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains(&format!(
            "pp16 @ d{} needs {} cache positions",
            n_ctx - 8,
            n_ctx + 8
        )) && e.contains(&format!("context of {n_ctx}")),
        "{e}"
    );
    let e = pocket_bench::check_file_fits(&smollm2(), &[Test::pp(16), over]).unwrap_err();
    assert!(matches!(e, Error::BeyondContext { .. }), "{e}");
}

fn receipt_with_depths() -> Receipt {
    let mut r = Receipt::new(machine("box", None), "0a1b2c3d4e5f");
    r.engines.insert(EngineKind::LlamaCpp, Default::default());
    let samples = |ts: f64| EngineSamples {
        ts: vec![ts, ts * 1.25],
        peak_rss_bytes: vec![100 << 20, 100 << 20],
        setup_ms: vec![150.0, 150.0],
    };
    for (test, ts) in [
        (Test::pp(32), 500.0),
        (Test::pp(32).at_depth(64), 400.0),
        (Test::tg(8).at_depth(64), 90.0),
    ] {
        let engines = BTreeMap::from([(EngineKind::LlamaCpp, samples(ts / 2.0))]);
        r.results.push(Comparison::new(
            "m.gguf",
            Some(96 << 20),
            test,
            2,
            samples(ts),
            engines,
            None,
        ));
    }
    r
}

#[test]
fn receipts_store_the_depth_as_n_depth_and_round_trip() {
    let r = receipt_with_depths();
    let text = serde_json::to_string_pretty(&r).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let res = v["results"].as_array().unwrap();
    // Depth 0 writes no n_depth: such a comparison is stored as before -d.
    assert!(res[0].get("n_depth").is_none());
    assert_eq!(
        (&res[1]["test"], &res[1]["n_depth"]),
        (&"pp32".into(), &64.into())
    );
    assert_eq!(
        (&res[2]["test"], &res[2]["n_depth"]),
        (&"tg8".into(), &64.into())
    );
    let back = Receipt::from_json(&text).unwrap();
    assert_eq!(back, r);
    // The depth is part of a comparison's key: the two pp32 are different cells.
    assert_ne!(back.results[0].key(), back.results[1].key());

    // A test name with its depth reads too; one that disagrees with n_depth does not.
    let mut edited = v.clone();
    edited["results"][1]["test"] = "pp32 @ d64".into();
    assert_eq!(Receipt::from_json(&edited.to_string()).unwrap(), r);
    edited["results"][1]["n_depth"] = 32.into();
    let e = load_err(&edited.to_string());
    assert!(e.contains("at depth 64 but n_depth is 32"), "{e}");
}

#[test]
fn reports_label_depth_cells() {
    let r = receipt_with_depths();
    let md = report::report_md(&r, false);
    assert!(md.contains("| m | pp32 @ d64 | 2 |"), "{md}");
    assert!(md.contains("| m | tg8 @ d64 | 2 |"), "{md}");
    let csv = report::results_csv(&r);
    assert!(
        csv.contains("\"m.gguf\",100663296,tg8 @ d64,2,pocket,1,"),
        "{csv}"
    );
    let root = tempfile::tempdir().unwrap();
    let dir = report::write_results_dir(&r, root.path()).unwrap();
    let svg = std::fs::read_to_string(dir.join("speedup.svg")).unwrap();
    assert!(svg.contains("pp32 @ d64"), "{svg}");
}

/// An engine that must not run: a plan with a test no engine runs is refused first.
struct NeverRuns(EngineKind);

impl Engine for NeverRuns {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn bench(
        &self,
        _: &Path,
        test: Test,
        _: u32,
    ) -> pocket_compare::Result<pocket_compare::engine::Sample> {
        panic!("{test} ran although the plan has a test an engine refuses");
    }
}

impl Reference for NeverRuns {
    fn kind(&self) -> EngineKind {
        self.0
    }
    fn info(&self) -> pocket_compare::engine::EngineInfo {
        Default::default()
    }
    fn refuses(&self, test: Test) -> Option<&'static str> {
        (test.n_depth > 0).then_some("no depth here")
    }
}

#[test]
fn a_plan_with_a_test_no_engine_runs_fails_before_any_run() {
    let plan = pocket_compare::comparator::Plan {
        models: vec!["m.gguf".into()],
        tests: vec![Test::pp(32), Test::pp(32).at_depth(64)],
        threads: vec![1],
        reps: 1,
        contention: None,
    };
    let engine = NeverRuns(EngineKind::IkLlamaCpp);
    let receipt = receipt_with_depths();
    let e = pocket_compare::comparator::run(&plan, &engine, &[&engine], receipt, |_| {})
        .unwrap_err()
        .to_string();
    assert_eq!(e, "ik_llama.cpp cannot run pp32 @ d64: no depth here");
}
