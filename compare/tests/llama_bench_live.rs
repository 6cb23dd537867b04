//! The real llama-bench on SmolLM2-135M Q4_1 (`-p 32 -n 8 -r 1`): its json and md output
//! parse, and each process is measured (peak RSS, wall time). Needs llama.cpp's tools in
//! the pocket cache: `bash compare/provision-llama.sh`.
//!
//! `harness = false`: this binary is also the wrapper that `measure::run_measured`
//! re-executes to read a child's peak RSS, so its `main` must look for that first.

mod common;
#[macro_use]
mod measured;

use common::smollm2;
use pocket_compare::bench_format::Format;
use pocket_compare::engine::{Engine, LlamaCpp, Test};
use pocket_compare::llama_bench::{self, BenchArgs, LlamaTools, Provisioned, PROVISION};

/// llama-bench on SmolLM2 with one thread: `-p n_prompt -n n_gen -r reps`, then `extra`.
fn on_smollm2(n_prompt: u32, n_gen: u32, reps: u32, format: Format, extra: &[&str]) -> BenchArgs {
    BenchArgs {
        model: smollm2(),
        threads: 1,
        n_prompt,
        n_gen,
        reps,
        format,
        extra: extra.iter().map(|s| s.to_string()).collect(),
    }
}

fn tools() -> LlamaTools {
    LlamaTools::locate().unwrap_or_else(|e| panic!("{e}\n(provision with `{PROVISION}`)"))
}

fn missing_tools_name_the_provisioning_command() {
    let err = LlamaTools::in_cache(std::path::Path::new("/nonexistent/pocket-cache")).unwrap_err();
    assert!(err.to_string().contains(PROVISION), "{err}");
}

fn real_llama_bench_json_and_md_parse() {
    let tools = tools();
    assert!(
        tools.build_info().is_some(),
        "BUILD_INFO missing: {PROVISION}"
    );
    for format in [Format::Json, Format::Md] {
        let args = on_smollm2(32, 8, 1, format, &[]);
        let run = llama_bench::run(&tools, &args).unwrap();
        let names: Vec<String> = run.rows.iter().map(|r| r.test_name()).collect();
        assert_eq!(names, ["pp32", "tg8"], "{format:?}");
        for r in &run.rows {
            assert_eq!(r.n_threads, 1);
            assert_eq!(r.model_type, "llama 256M Q4_1");
            assert!(r.avg_ts > 0.0, "{format:?}: {r:?}");
        }
        if format == Format::Json {
            assert_eq!(run.rows[0].model_size, 96_576_768);
            assert_eq!(run.rows[0].samples_ns.len(), 1);
        }
        // The model is ~92 MiB and mapped; llama-bench's peak RSS covers at least that.
        assert!(
            run.stats.peak_rss_bytes > 64 << 20,
            "peak RSS {} bytes",
            run.stats.peak_rss_bytes
        );
        assert!(run.stats.wall.as_secs_f64() > 0.0);
    }
}

fn llama_cpp_engine_measures_one_repetition() {
    let engine = LlamaCpp {
        tools: tools(),
        placement: None,
    };
    assert_eq!(engine.name(), "llama.cpp");
    let s = engine.bench(&smollm2(), Test::tg(8), 1).unwrap();
    assert_eq!(s.row.test_name(), "tg8");
    assert!(s.ts > 0.0 && s.peak_rss_bytes > 64 << 20);
    assert!(s.wall_ms >= s.setup_ms && s.setup_ms > 0.0);
}

fn our_md_matches_llama_bench_md_of_the_same_run() {
    // `-o json -oe md`: one run prints json to stdout and md to stderr.
    let tools = tools();
    let extra = ["-b", "256", "-ctv", "q8_0", "-oe", "md"];
    let args = on_smollm2(16, 4, 2, Format::Json, &extra);
    let run = llama_bench::run(&tools, &args).unwrap();
    let stderr = &run.stats.stderr;
    let start = stderr.find("| model").expect("md table on stderr");
    let end = stderr[start..].find("build: ").map(|i| start + i).unwrap();
    let line_end = stderr[end..]
        .find('\n')
        .map_or(stderr.len(), |i| end + i + 1);
    let theirs = &stderr[start..line_end];
    let ours = pocket_compare::bench_format::write(&run.rows, Format::Md);
    assert_eq!(ours, theirs);
}

fn our_sql_matches_llama_bench_sql_of_the_same_run() {
    let tools = tools();
    let args = on_smollm2(16, 0, 1, Format::Json, &["-oe", "sql"]);
    let run = llama_bench::run(&tools, &args).unwrap();
    let stderr = &run.stats.stderr;
    let start = stderr.find("CREATE TABLE").expect("sql on stderr");
    let ours = pocket_compare::bench_format::write(&run.rows, Format::Sql);
    assert_eq!(ours, &stderr[start..]);
}

fn main() -> std::process::ExitCode {
    measured::main(&tests![
        missing_tools_name_the_provisioning_command,
        real_llama_bench_json_and_md_parse,
        llama_cpp_engine_measures_one_repetition,
        our_md_matches_llama_bench_md_of_the_same_run,
        our_sql_matches_llama_bench_sql_of_the_same_run,
    ])
}
