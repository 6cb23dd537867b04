//! The comparator loop through the engine seam: a scripted engine (exact numbers), and
//! llama.cpp against itself (the real thing, one short repetition).
//!
//! `harness = false`: this binary is also the measuring wrapper (see `measured`).

#[macro_use]
mod measured;

use std::cell::Cell;
use std::path::{Path, PathBuf};

use pocket_compare::bench_row::BenchRow;
use pocket_compare::comparator::{self, Plan};
use pocket_compare::engine::{Engine, LlamaCpp, Sample, Test};
use pocket_compare::llama_bench::{cache_dir, PROVISION};
use pocket_compare::Result;

/// An engine that reports `ts` and counts its calls.
struct Scripted {
    name: &'static str,
    ts: f64,
    rss: u64,
    calls: Cell<u32>,
}

impl Engine for Scripted {
    fn name(&self) -> &str {
        self.name
    }
    fn bench(&self, _model: &Path, test: Test, threads: u32) -> Result<Sample> {
        self.calls.set(self.calls.get() + 1);
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

fn scripted_engines_fill_a_receipt() {
    let pocket = Scripted {
        name: "pocket",
        ts: 30.0,
        rss: 90 << 20,
        calls: Cell::new(0),
    };
    let llama = Scripted {
        name: "llama.cpp",
        ts: 20.0,
        rss: 150 << 20,
        calls: Cell::new(0),
    };
    let plan = Plan {
        models: vec![PathBuf::from("/models/a.gguf")],
        tests: vec![Test::tg(8), Test::pp(32)],
        threads: vec![1, 2],
        reps: 3,
    };
    let mut lines = 0;
    let r = comparator::run(
        &plan,
        &pocket,
        &llama,
        comparator::new_receipt(None, Path::new(".")),
        |_| lines += 1,
    )
    .unwrap();
    assert_eq!(lines, 2 * 2 * 3 * 2);
    assert_eq!((pocket.calls.get(), llama.calls.get()), (12, 12));
    assert_eq!(r.results.len(), 4);
    for c in &r.results {
        assert_eq!(c.model, "a.gguf");
        assert_eq!(c.pocket.ts.len(), 3);
        assert!((c.derived.speedup - 1.5).abs() < 1e-12);
        assert_eq!(c.derived.rss_delta_bytes, -(60 << 20));
        assert_eq!(c.model_bytes, Some(100 << 20));
    }
    let zero = Plan { reps: 0, ..plan };
    assert!(comparator::run(
        &zero,
        &pocket,
        &llama,
        comparator::new_receipt(None, Path::new(".")),
        |_| {}
    )
    .is_err());
}

fn llama_cpp_against_itself() {
    let engine = LlamaCpp::locate().unwrap_or_else(|e| panic!("{e} ({PROVISION})"));
    let model = cache_dir().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.is_file(),
        "{} missing: bash tests/fixtures.sh",
        model.display()
    );
    let plan = Plan {
        models: vec![model],
        tests: vec![Test::tg(8)],
        threads: vec![1],
        reps: 1,
    };
    let receipt = comparator::new_receipt(None, Path::new(env!("CARGO_MANIFEST_DIR")));
    assert_ne!(
        receipt.pocket_commit, "unknown",
        "git is available in the work tree"
    );
    assert!(
        receipt.llama_cpp_build.contains("b11434"),
        "{}",
        receipt.llama_cpp_build
    );
    let r = comparator::run(&plan, &engine, &engine, receipt, |l| eprintln!("{l}")).unwrap();
    let c = &r.results[0];
    assert_eq!(c.model_bytes, Some(96_576_768));
    assert!(c.derived.speedup > 0.0 && c.llama_cpp.peak_rss_bytes[0] > 64 << 20);
    let text = serde_json::to_string(&r).unwrap();
    pocket_compare::receipt::Receipt::from_json(&text).unwrap();
}

fn main() -> std::process::ExitCode {
    measured::main(&tests![
        scripted_engines_fill_a_receipt,
        llama_cpp_against_itself
    ])
}
