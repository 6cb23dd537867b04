//! llama-bench's formats: the stored outputs of the real tool (tests/data, captured from
//! llama-bench b11434 on SmolLM2-135M Q4_1) parse, and our writers print them back byte
//! for byte; our rows round-trip through every format; llama.cpp's
//! scripts/compare-llama-bench.py accepts our files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use pocket_compare::bench_format::{fmt_g6, parse, write, Format};
use pocket_compare::bench_row::BenchRow;

fn data_file(name: &str) -> String {
    let path = common::data(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn data(ext: &str) -> String {
    data_file(&format!("llama-bench-smollm2-q4_1.{ext}"))
}

const ALL: [(Format, &str); 5] = [
    (Format::Json, "json"),
    (Format::Jsonl, "jsonl"),
    (Format::Csv, "csv"),
    (Format::Md, "md"),
    (Format::Sql, "sql"),
];

#[test]
fn golden_outputs_parse() {
    for (format, ext) in [
        (Format::Json, "json"),
        (Format::Jsonl, "jsonl"),
        (Format::Csv, "csv"),
    ] {
        let rows = parse(&data(ext), format).unwrap();
        assert_eq!(rows.len(), 2, "{ext}");
        let (pp, tg) = (&rows[0], &rows[1]);
        assert_eq!(pp.test_name(), "pp32", "{ext}");
        assert_eq!(tg.test_name(), "tg8", "{ext}");
        assert_eq!(pp.model_type, "llama 256M Q4_1");
        assert_eq!(pp.model_size, 96_576_768);
        assert_eq!(pp.model_n_params, 134_515_008);
        assert_eq!(pp.n_threads, 2);
        assert_eq!((pp.n_batch, pp.n_ubatch), (2048, 512));
        assert_eq!((pp.type_k.as_str(), pp.type_v.as_str()), ("f16", "f16"));
        assert!(pp.repack && !pp.embeddings);
        assert!(pp.avg_ts > 0.0 && tg.avg_ts > 0.0);
        assert!(pp
            .model_filename
            .ends_with("SmolLM2-135M-Instruct.Q4_1.gguf"));
        if format != Format::Csv {
            assert_eq!(pp.samples_ns.len(), 1);
            assert_eq!(pp.samples_ns[0], pp.avg_ns);
        }
    }
    let md = parse(&data("md"), Format::Md).unwrap();
    assert_eq!(md.len(), 2);
    assert_eq!(md[0].model_type, "llama 256M Q4_1");
    assert_eq!(md[0].test_name(), "pp32");
    assert_eq!(md[1].test_name(), "tg8");
    assert_eq!(md[0].n_threads, 2);
    assert_eq!(md[0].backends, "CPU");
    assert_eq!(md[0].build_commit, "unknown");
    assert!((md[0].model_size as f64 - 96_576_768.0).abs() < 0.01 * 1048576.0);
    assert!(md[1].avg_ts > 0.0);
}

#[test]
fn golden_outputs_are_rewritten_byte_for_byte() {
    // json carries everything: it reprints as json, jsonl, csv and sql exactly.
    let json_rows = parse(&data("json"), Format::Json).unwrap();
    assert_eq!(write(&json_rows, Format::Json), data("json"));
    for (format, ext) in [
        (Format::Jsonl, "jsonl"),
        (Format::Csv, "csv"),
        (Format::Md, "md"),
    ] {
        let rows = parse(&data(ext), format).unwrap();
        assert_eq!(write(&rows, format), data(ext), "{ext}");
    }
    // The sql golden came from another run: its values are the csv's layout with other
    // times; compare the schema and the statement shape.
    let sql = write(&json_rows, Format::Sql);
    let golden = data("sql");
    let head = |s: &str| s.split("INSERT").next().unwrap().to_string();
    assert_eq!(head(&sql), head(&golden));
    assert_eq!(sql.lines().count(), golden.lines().count());
}

#[test]
fn md_written_from_json_rows_matches_the_same_runs_md() {
    // One llama-bench run printed json (stdout) and md (stderr): non-default n_batch and
    // type_k columns, two repetitions (t/s ± a non-zero sd from samples_ns).
    let rows = parse(
        &data_file("llama-bench-same-run-b512-ctkq8.json"),
        Format::Json,
    )
    .unwrap();
    let md = data_file("llama-bench-same-run-b512-ctkq8.md");
    assert_eq!(write(&rows, Format::Md), md);
    assert_eq!(
        write(&rows, Format::Json),
        data_file("llama-bench-same-run-b512-ctkq8.json")
    );
    let back = parse(&md, Format::Md).unwrap();
    assert_eq!((back[0].n_batch, back[0].type_k.as_str()), (512, "q8_0"));
    assert_eq!(write(&back, Format::Md), md);
}

#[test]
fn g6_matches_cpp_ostream() {
    for (v, s) in [
        (6.111627, "6.11163"),
        (1.1663, "1.1663"),
        (12.5, "12.5"),
        (1234567.0, "1.23457e+06"),
        (0.0001234, "0.0001234"),
        (0.00001234, "1.234e-05"),
        (100.0, "100"),
        (999999.5, "1e+06"),
        (0.0, "0"),
    ] {
        assert_eq!(fmt_g6(v), s, "{v}");
    }
}

/// Two of "our" rows (as `pocket bench` will print them): pocket's build against
/// llama.cpp's, same keys.
fn our_rows(build: &str, scale: f64) -> Vec<BenchRow> {
    let base = parse(&data("json"), Format::Json).unwrap();
    base.into_iter()
        .map(|mut r| {
            r.build_commit = build.into();
            r.build_number = 1;
            let ns: Vec<u64> = [1.0, 1.1, 0.9]
                .iter()
                .map(|f| (r.avg_ns as f64 * f / scale) as u64)
                .collect();
            r.set_samples_ns(ns);
            r
        })
        .collect()
}

#[test]
fn our_rows_round_trip_every_format() {
    let rows = our_rows("abc1234", 1.0);
    for (format, ext) in [(Format::Json, "json"), (Format::Jsonl, "jsonl")] {
        let back = parse(&write(&rows, format), format).unwrap();
        // json carries %g-rounded samples_ts; everything else is exact.
        assert_eq!(back.len(), rows.len(), "{ext}");
        for (a, b) in rows.iter().zip(&back) {
            let mut a = a.clone();
            a.samples_ts = b.samples_ts.clone();
            a.avg_ts = b.avg_ts;
            a.stddev_ts = b.stddev_ts;
            assert_eq!(&a, b, "{ext}");
            assert!((a.avg_ts - b.avg_ts).abs() < 1e-6);
        }
        assert_eq!(write(&back, format), write(&rows, format), "{ext}");
    }
    let csv = parse(&write(&rows, Format::Csv), Format::Csv).unwrap();
    for (a, b) in rows.iter().zip(&csv) {
        assert_eq!(a.values(), b.values(), "csv");
    }
    let md = parse(&write(&rows, Format::Md), Format::Md).unwrap();
    for (a, b) in rows.iter().zip(&md) {
        assert_eq!((a.test_name(), a.n_threads), (b.test_name(), b.n_threads));
        assert_eq!(&a.model_type, &b.model_type);
        assert!((a.avg_ts - b.avg_ts).abs() < 0.006);
        assert!(b.stddev_ts > 0.0);
    }
    assert_eq!(write(&md, Format::Md), write(&rows, Format::Md));
    // every format prints something for every row
    for (format, _) in ALL {
        assert!(write(&rows, format).lines().count() >= rows.len());
    }
}

fn python() -> PathBuf {
    common::cached(
        "venv/bin/python",
        "`bash tests/fixtures.sh` (or `bash compare/setup.sh`)",
    )
}

fn compare_script() -> PathBuf {
    common::cached(
        "llama.cpp/scripts/compare-llama-bench.py",
        "`bash tests/fixtures.sh`",
    )
}

/// Runs compare-llama-bench.py on `inputs`: baseline build `unknown` (what this sdist
/// build of llama.cpp reports), compare build `0a1b2c3` (pocket). The script cuts
/// build_commit to the shortest length present, so both are 7 characters.
fn run_compare_script(dir: &Path, inputs: &[&str]) -> String {
    let mut cmd = Command::new(python());
    cmd.arg(compare_script()).current_dir(dir);
    for i in inputs {
        cmd.args(["-i", i]);
    }
    // Without `-t` the script only recognises sqlite input.
    cmd.args(["-t", "llama-bench", "-b", "unknown", "-c", "0a1b2c3"]);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "compare-llama-bench.py {inputs:?} failed (needs GitPython and tabulate in the venv: \
         `bash tests/fixtures.sh` installs them):\n{stdout}\n{stderr}"
    );
    stdout
}

#[test]
fn compare_llama_bench_py_accepts_our_files() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = our_rows("unknown", 1.0);
    let pocket = our_rows("0a1b2c3", 2.0);
    let put = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
    put("base.csv", write(&baseline, Format::Csv));
    put("pocket.csv", write(&pocket, Format::Csv));
    put("base.json", write(&baseline, Format::Json));
    put("pocket.json", write(&pocket, Format::Json));
    // The script reads one jsonl file (several files must be json or csv).
    let mut both = baseline.clone();
    both.extend(pocket.iter().cloned());
    put("both.jsonl", write(&both, Format::Jsonl));

    for (a, b) in baseline.iter().zip(&pocket) {
        assert!(a.key_mismatches(b).is_empty());
    }
    let mut other = pocket[0].clone();
    other.n_threads = 4;
    other.model_type = "llama 135M Q4_1".into();
    assert_eq!(
        baseline[0].key_mismatches(&other),
        ["model_type", "n_threads"]
    );
    for inputs in [
        &["base.csv", "pocket.csv"][..],
        &["base.json", "pocket.json"][..],
        &["both.jsonl"][..],
    ] {
        let table = run_compare_script(dir.path(), inputs);
        println!("{inputs:?}:\n{table}");
        assert!(table.contains("Speedup"), "{inputs:?}:\n{table}");
        for test in ["pp32", "tg8"] {
            let line = table
                .lines()
                .find(|l| l.contains(&format!("| {test} ")) || l.contains(&format!("| {test}")))
                .unwrap_or_else(|| panic!("{inputs:?}: no {test} row:\n{table}"));
            // pocket's times are half of the baseline's: speedup 2.00
            assert!(line.contains("2.00"), "{inputs:?}: {line}");
        }
    }
}
