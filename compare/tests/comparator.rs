//! The comparator loop through the engine seam: scripted engines (exact numbers, pocket
//! and two references, their turns rotating), and llama.cpp against itself (the real
//! thing, one short repetition).
//!
//! `harness = false`: this binary is also the measuring wrapper (see `measured`).

mod common;
#[macro_use]
mod measured;

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

use pocket_compare::bench_row::BenchRow;
use pocket_compare::comparator::{self, Plan};
use pocket_compare::engine::{Engine, EngineInfo, EngineKind, LlamaCpp, Reference, Sample, Test};
use pocket_compare::llama_bench::PROVISION;
use pocket_compare::Result;

/// An engine that reports `ts`, counts its calls and writes its name into `log`.
struct Scripted<'a> {
    name: &'static str,
    kind: EngineKind,
    ts: f64,
    rss: u64,
    calls: Cell<u32>,
    log: &'a RefCell<Vec<&'static str>>,
}

impl<'a> Scripted<'a> {
    fn new(
        name: &'static str,
        kind: EngineKind,
        ts: f64,
        rss_mib: u64,
        log: &'a RefCell<Vec<&'static str>>,
    ) -> Scripted<'a> {
        Scripted {
            name,
            kind,
            ts,
            rss: rss_mib << 20,
            calls: Cell::new(0),
            log,
        }
    }
}

impl Engine for Scripted<'_> {
    fn name(&self) -> &str {
        self.name
    }
    fn bench(&self, _model: &Path, test: Test, threads: u32) -> Result<Sample> {
        self.calls.set(self.calls.get() + 1);
        self.log.borrow_mut().push(self.name);
        let mut row = BenchRow::cpu_defaults();
        row.n_prompt = test.n_prompt as i64;
        row.n_gen = test.n_gen as i64;
        row.n_threads = threads as i64;
        row.model_size = 100 << 20;
        Ok(Sample {
            ts: self.ts * threads as f64,
            peak_rss_bytes: self.rss,
            wall_ms: 500.0,
            setup_ms: 100.0,
            row,
        })
    }
}

impl Reference for Scripted<'_> {
    fn kind(&self) -> EngineKind {
        self.kind
    }
    fn info(&self) -> EngineInfo {
        EngineInfo {
            build: format!("{} scripted", self.name),
            options: vec!["-x".into()],
        }
    }
}

fn scripted_engines_fill_a_receipt() {
    let log = RefCell::new(Vec::new());
    // pocket's kind is not used: it is passed as the engine under test.
    let pocket = Scripted::new("pocket", EngineKind::LlamaCpp, 30.0, 90, &log);
    let llama = Scripted::new("llama.cpp", EngineKind::LlamaCpp, 20.0, 150, &log);
    let ik = Scripted::new("ik_llama.cpp", EngineKind::IkLlamaCpp, 40.0, 120, &log);
    let plan = Plan {
        models: vec![PathBuf::from("/models/a.gguf")],
        tests: vec![Test::tg(8), Test::pp(32)],
        threads: vec![1, 2],
        reps: 3,
        contention: None,
    };
    let mut lines = 0;
    let refs: [&dyn Reference; 2] = [&llama, &ik];
    let r = comparator::run(
        &plan,
        &pocket,
        &refs,
        comparator::new_receipt(None, Path::new(".")),
        |_| lines += 1,
    )
    .unwrap();
    assert_eq!(lines, 2 * 2 * 3 * 3);
    let calls = [&pocket, &llama, &ik].map(|e| e.calls.get());
    assert_eq!(calls, [12, 12, 12]);
    // Every repetition runs each engine once, the order rotating by one each time.
    assert_eq!(
        log.borrow()[..9],
        [
            "pocket",
            "llama.cpp",
            "ik_llama.cpp",
            "llama.cpp",
            "ik_llama.cpp",
            "pocket",
            "ik_llama.cpp",
            "pocket",
            "llama.cpp"
        ]
    );
    assert_eq!(r.results.len(), 4);
    assert_eq!(
        r.engines.keys().copied().collect::<Vec<_>>(),
        [EngineKind::LlamaCpp, EngineKind::IkLlamaCpp]
    );
    assert_eq!(
        r.engines[&EngineKind::IkLlamaCpp].build,
        "ik_llama.cpp scripted"
    );
    for c in &r.results {
        assert_eq!(c.model, "a.gguf");
        assert_eq!(c.pocket.ts.len(), 3);
        assert_eq!(c.engines[&EngineKind::IkLlamaCpp].ts.len(), 3);
        assert!((c.speedup(EngineKind::LlamaCpp).unwrap() - 1.5).abs() < 1e-12);
        assert!((c.speedup(EngineKind::IkLlamaCpp).unwrap() - 0.75).abs() < 1e-12);
        let vs = |k| c.derived.engines[&k].rss_delta_bytes;
        assert_eq!(vs(EngineKind::LlamaCpp), -(60 << 20));
        assert_eq!(vs(EngineKind::IkLlamaCpp), -(30 << 20));
        assert_eq!(c.model_bytes, Some(100 << 20));
    }
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(
        pocket_compare::receipt::Receipt::from_json(&text).unwrap(),
        r
    );
    let zero = Plan {
        reps: 0,
        contention: None,
        ..plan.clone()
    };
    let new = || comparator::new_receipt(None, Path::new("."));
    assert!(comparator::run(&zero, &pocket, &refs, new(), |_| {}).is_err());
    let none = comparator::run(&plan, &pocket, &[], new(), |_| {}).unwrap_err();
    assert!(none.to_string().contains("no engine"), "{none}");
}

/// A scripted reference that cannot run models whose path contains its `&str`, nor prompt
/// processing at a depth (ik_llama.cpp's refusal).
struct Picky<'a>(Scripted<'a>, &'static str);

impl Engine for Picky<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn bench(&self, model: &Path, test: Test, threads: u32) -> Result<Sample> {
        assert!(
            self.refuses(test).is_none(),
            "{test} ran on an engine refusing it"
        );
        self.0.bench(model, test, threads)
    }
}

impl Reference for Picky<'_> {
    fn kind(&self) -> EngineKind {
        self.0.kind()
    }
    fn info(&self) -> EngineInfo {
        self.0.info()
    }
    fn cannot_run(&self, model: &Path) -> Option<String> {
        model
            .to_string_lossy()
            .contains(self.1)
            .then(|| "not its shape".to_string())
    }
    fn refuses(&self, test: Test) -> Option<&'static str> {
        (test.n_depth > 0 && test.n_prompt > 0).then_some("no pp at depth")
    }
}

fn an_engine_sits_out_the_models_and_tests_it_cannot_run() {
    let log = RefCell::new(Vec::new());
    let pocket = Scripted::new("pocket", EngineKind::LlamaCpp, 30.0, 90, &log);
    let llama = Scripted::new("llama.cpp", EngineKind::LlamaCpp, 20.0, 150, &log);
    let mnn = Picky(
        Scripted::new("mnn", EngineKind::Mnn, 60.0, 300, &log),
        "smol",
    );
    let pp_deep = Test::pp(8).at_depth(16);
    let plan = Plan {
        models: vec![
            PathBuf::from("/m/smol.gguf"),
            PathBuf::from("/m/pocket.gguf"),
        ],
        tests: vec![Test::tg(8), pp_deep],
        threads: vec![2],
        reps: 2,
        contention: None,
    };
    let mut notes = Vec::new();
    let new = || comparator::new_receipt(None, Path::new("."));
    let refs: [&dyn Reference; 2] = [&llama, &mnn];
    let r = comparator::run(&plan, &pocket, &refs, new(), |l| notes.push(l.to_string())).unwrap();
    assert_eq!(mnn.0.calls.get(), 2, "tg8 on pocket.gguf only");
    assert_eq!(llama.calls.get(), 8);
    for note in [
        "smol.gguf: mnn skipped: not its shape",
        "pocket.gguf pp8 @ d16: mnn skipped: no pp at depth",
    ] {
        assert!(notes.iter().any(|n| n == note), "{note}: {notes:?}");
    }
    let cells: Vec<_> = r
        .results
        .iter()
        .map(|c| (c.model.as_str(), c.test))
        .collect();
    let tg = Test::tg(8);
    let want = [
        ("smol.gguf", tg),
        ("smol.gguf", pp_deep),
        ("pocket.gguf", tg),
        ("pocket.gguf", pp_deep),
    ];
    assert_eq!(cells, want);
    for (i, c) in r.results.iter().enumerate() {
        assert_eq!(c.engines.contains_key(&EngineKind::Mnn), i == 2, "{i}");
        assert!(c.engines.contains_key(&EngineKind::LlamaCpp));
    }
    assert!((r.results[2].speedup(EngineKind::Mnn).unwrap() - 0.5).abs() < 1e-12);
    let skipped: Vec<_> = r
        .skipped
        .iter()
        .map(|s| (s.model.as_str(), s.engine, s.test))
        .collect();
    let want = [
        ("smol.gguf", EngineKind::Mnn, None),
        ("pocket.gguf", EngineKind::Mnn, Some(pp_deep)),
    ];
    assert_eq!(skipped, want);
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(
        pocket_compare::receipt::Receipt::from_json(&text).unwrap(),
        r
    );
    let md = pocket_compare::report::report_md(&r, false);
    assert!(
        md.contains("- mnn not run on pocket.gguf pp8 @ d16: no pp at depth"),
        "{md}"
    );
    // With MNN alone, a model it cannot run has no cell at all, and a test it refuses fails
    // the plan before any run.
    let alone: [&dyn Reference; 1] = [&mnn];
    let tg_only = Plan {
        tests: vec![tg],
        ..plan.clone()
    };
    let r = comparator::run(&tg_only, &pocket, &alone, new(), |_| {}).unwrap();
    assert_eq!(r.results.len(), 1);
    assert_eq!(r.results[0].model, "pocket.gguf");
    let calls = mnn.0.calls.get();
    let e = comparator::run(&plan, &pocket, &alone, new(), |_| {}).unwrap_err();
    assert_eq!(e.to_string(), "mnn cannot run pp8 @ d16: no pp at depth");
    assert_eq!(mnn.0.calls.get(), calls, "refused before any run");
}

fn llama_cpp_against_itself() {
    let engine = LlamaCpp::locate().unwrap_or_else(|e| panic!("{e} ({PROVISION})"));
    let model = common::smollm2();
    let plan = Plan {
        models: vec![model],
        tests: vec![Test::tg(8)],
        threads: vec![1],
        reps: 1,
        contention: None,
    };
    let receipt = comparator::new_receipt(None, Path::new(env!("CARGO_MANIFEST_DIR")));
    assert_ne!(
        receipt.pocket_commit, "unknown",
        "git is available in the work tree"
    );
    let r = comparator::run(&plan, &engine, &[&engine], receipt, |l| eprintln!("{l}")).unwrap();
    let build = &r.engines[&EngineKind::LlamaCpp].build;
    assert!(build.contains("b11434"), "{build}");
    let c = &r.results[0];
    assert_eq!(c.model_bytes, Some(96_576_768));
    let theirs = &c.engines[&EngineKind::LlamaCpp];
    assert!(c.speedup(EngineKind::LlamaCpp).unwrap() > 0.0 && theirs.peak_rss_bytes[0] > 64 << 20);
    let text = serde_json::to_string(&r).unwrap();
    pocket_compare::receipt::Receipt::from_json(&text).unwrap();
}

fn main() -> std::process::ExitCode {
    measured::main(&tests![
        scripted_engines_fill_a_receipt,
        an_engine_sits_out_the_models_and_tests_it_cannot_run,
        llama_cpp_against_itself
    ])
}
