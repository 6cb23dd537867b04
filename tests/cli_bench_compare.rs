//! `pocket bench` and `pocket compare` end to end: bench's rows parse as llama-bench rows
//! with sane fields, one short real comparison on SmolLM2 measures both engines, and bad
//! flags end in one clear `error:` line.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pocket_compare::bench_format::{self, Format};
use pocket_compare::bench_row::BenchRow;
use pocket_compare::engine::EngineKind;
use pocket_compare::receipt::Receipt;

fn pocket(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(args)
        .output()
        .expect("run pocket")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `pocket` with `args`, which must succeed, its output read as `format` rows.
fn bench_rows(args: &[&str], format: Format) -> Vec<BenchRow> {
    let out = pocket(args);
    assert!(out.status.success(), "{}", stderr(&out));
    bench_format::parse(&String::from_utf8_lossy(&out.stdout), format).unwrap()
}

fn smollm2() -> String {
    common::smollm2().display().to_string()
}

#[test]
fn bench_json_parses_as_llama_bench_rows() {
    let m = smollm2();
    let rows = bench_rows(
        &[
            "bench", "-m", &m, "-p", "16", "-n", "4", "-r", "1", "-t", "2", "-o", "json",
        ],
        Format::Json,
    );
    assert_eq!(rows.len(), 2);
    let file_size = std::fs::metadata(&m).unwrap().len();
    for (row, (p, n)) in rows.iter().zip([(16, 0), (0, 4)]) {
        assert_eq!((row.n_prompt, row.n_gen, row.n_depth), (p, n, 0));
        // llama.cpp's own description and sizes of this file.
        assert_eq!(row.model_type, "llama 256M Q4_1");
        assert_eq!(row.model_size, 96_576_768);
        assert_eq!(row.model_n_params, 134_515_008);
        assert_eq!(row.model_filename, m);
        assert_eq!(row.n_threads, 2);
        assert_eq!(row.backends, "CPU");
        assert!(row.build_commit.len() >= 7, "{}", row.build_commit);
        assert!(!row.cpu_info.is_empty());
        assert_eq!(row.samples_ns.len(), 1);
        assert!(row.avg_ts > 0.0 && row.avg_ts.is_finite());
        assert_eq!(row.stddev_ts, 0.0);
        let expect_ts = 1e9 * (p + n) as f64 / row.samples_ns[0] as f64;
        assert!((row.avg_ts - expect_ts).abs() < 1e-6 * expect_ts);
        assert!(row.test_time.ends_with('Z'));
        let load_ms = row.extra["load_ms"].as_f64().unwrap();
        assert!(load_ms > 0.0 && load_ms < 60_000.0);
        let rss = row.extra["peak_rss_bytes"].as_u64().unwrap();
        assert!(rss > 1 << 20 && rss < 8 * file_size + (1 << 30), "{rss}");
    }
}

#[test]
fn bench_csv_pg_and_comma_lists() {
    let m = smollm2();
    let rows = bench_rows(
        &[
            "bench", "-m", &m, "-p", "8,4", "-n", "0", "-pg", "4,2", "-r", "2", "-t", "2", "-o",
            "csv",
        ],
        Format::Csv,
    );
    let tests: Vec<String> = rows.iter().map(|r| r.test_name()).collect();
    assert_eq!(tests, ["pp8", "pp4", "pp4+tg2"]);
    assert!(rows.iter().all(|r| r.avg_ts > 0.0));
    // md: llama-bench's table on stdout.
    let out = pocket(&[
        "bench", "-m", &m, "-p", "4", "-n", "0", "-r", "1", "-t", "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| llama 256M Q4_1"), "{md}");
    assert!(md.contains("pp4"), "{md}");
}

/// `-d 0,24`: every test again at depth 24, `n_depth` in every format's rows and the md
/// label llama-bench's (`pp8 @ d24`).
#[test]
fn bench_depth_rows_in_every_format() {
    let m = smollm2();
    let base = [
        "bench", "-m", &m, "-p", "8", "-n", "2", "-d", "0,24", "-r", "1", "-t", "1",
    ];
    let want = [(8, 0, 0), (0, 2, 0), (8, 0, 24), (0, 2, 24)];
    for (flag, format) in [
        ("json", Format::Json),
        ("jsonl", Format::Jsonl),
        ("csv", Format::Csv),
        ("md", Format::Md),
    ] {
        let out = pocket(&[&base[..], &["-o", flag]].concat());
        assert!(out.status.success(), "{flag}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        let rows = bench_format::parse(&text, format).unwrap();
        let got: Vec<(i64, i64, i64)> = rows
            .iter()
            .map(|r| (r.n_prompt, r.n_gen, r.n_depth))
            .collect();
        assert_eq!(got, want, "{flag}:\n{text}");
        if format == Format::Md {
            assert!(text.contains(" pp8 @ d24 |"), "{text}");
            assert!(text.contains(" tg2 @ d24 |"), "{text}");
        }
    }
}

/// `--roof`: a probe before the first decode repetition and after each, every
/// repetition's decode set against the probes around it; prompt tests run as usual.
#[test]
fn bench_roof_probes_around_every_decode_repetition() {
    let m = smollm2();
    let out = pocket(&[
        "bench", "-m", &m, "-p", "8", "-n", "8", "-r", "3", "-t", "1", "--roof", "-o", "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("roof tg8 t1: decode ").count(), 1, "{err}");
    let rows = bench_format::parse(&String::from_utf8_lossy(&out.stdout), Format::Json).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(!rows[0].extra.contains_key("roof"), "pp8 has no roof");
    let roof = &rows[1].extra["roof"];
    let nums = |k: &str| -> Vec<f64> {
        roof[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (decode, probe, shares) = (nums("decode_gbs"), nums("probe_gbs"), nums("shares"));
    assert_eq!((decode.len(), probe.len(), shares.len()), (3, 4, 3));
    assert!(decode
        .iter()
        .chain(&probe)
        .all(|&v| v > 0.0 && v.is_finite()));
    // Each repetition's share: its decode GB/s (model bytes x its t/s) over the mean of
    // the probes on either side. `samples_ts` is printed as llama-bench prints it, to
    // six significant digits (%g), so the recomputed GB/s agrees to 5e-6 at worst.
    for (i, s) in rows[1].samples_ts.iter().enumerate() {
        let gbs = rows[1].model_size as f64 * s / 1e9;
        assert!(
            (gbs / decode[i] - 1.0).abs() < 1e-5,
            "rep {i}: {gbs} vs {}",
            decode[i]
        );
        let want = decode[i] / ((probe[i] + probe[i + 1]) / 2.0);
        assert!((shares[i] / want - 1.0).abs() < 1e-9);
    }
}

fn assert_clear_error(args: &[&str], needle: &str) {
    let out = pocket(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = stderr(&out);
    assert!(
        err.contains(needle),
        "{args:?}: expected `{needle}` in:\n{err}"
    );
}

#[test]
fn bad_flags_are_clear_errors() {
    let m = smollm2();
    // `pocket bench -m <SmolLM2>` with these flags, and what its error says.
    let bench_flags: [(&[&str], &str); 11] = [
        (&["-o", "xml"], "invalid value 'xml' for '--output"),
        (&["-p", "1,a"], "`a` is not a non-negative integer"),
        (
            &["-r", "0"],
            "'--repetitions <REPS>': values must be at least 1",
        ),
        (
            &["-t", "0"],
            "'--threads <THREADS>': values must be at least 1",
        ),
        (&["--cpu-strict", "2"], "expected 0 or 1"),
        (&["-C", "0xzz"], "bad CPU mask"),
        (&["-pg", "5"], "-pg takes two numbers"),
        (&["-p", "0", "-n", "0"], "no tests"),
        // SmolLM2's context is 8192 tokens.
        (
            &["-p", "16", "-n", "0", "-d", "8180"],
            "pp16 @ d8180 needs 8196 cache positions",
        ),
        (&["-d", "x"], "`x` is not a non-negative integer"),
        (
            &["--roof", "--interleave"],
            "'--roof' cannot be used with '--interleave'",
        ),
    ];
    for (flags, needle) in bench_flags {
        assert_clear_error(&[&["bench", "-m", &m], flags].concat(), needle);
    }
    let compare_too_deep = [
        "compare",
        "-m",
        &m,
        "-n",
        "16",
        "-p",
        "0",
        "-d",
        "8180",
        "--no-parity",
    ];
    let command_lines: [(&[&str], &str); 6] = [
        (&compare_too_deep, "context of 8192"),
        (&["bench", "-m", "/nonexistent.gguf"], "not found"),
        (&["bench", "-p", "1"], "--model"),
        (&["compare", "-m", "/nonexistent.gguf"], "not found"),
        (
            &["compare", "-m", &m, "-r", "0"],
            "'--repetitions <REPS>': values must be at least 1",
        ),
        (
            &["compare", "-m", &m, "--report", "x.json"],
            "cannot be used with",
        ),
    ];
    for (args, needle) in command_lines {
        assert_clear_error(args, needle);
    }
}

#[test]
fn compare_without_llama_cpp_names_the_provisioning_script() {
    let out = Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["compare", "-m", &smollm2(), "-r", "1"])
        .env("POCKET_CACHE", "/nonexistent-pocket-cache")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("bash compare/provision-llama.sh"),
        "{}",
        stderr(&out)
    );
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pocket-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn only_subdir(dir: &Path) -> PathBuf {
    let subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(subs.len(), 1, "{subs:?}");
    subs[0].clone()
}

/// A short real comparison (no assertion on speed: the machine may be shared).
#[test]
fn compare_smollm2_measures_both_engines() {
    common::fixture("llama.cpp-build/bin/llama-bench");
    let results = scratch("compare");
    let out = pocket(&[
        "compare",
        "-m",
        &smollm2(),
        "-r",
        "1",
        "-p",
        "32",
        "-n",
        "8",
        "-t",
        "2",
        "--no-bandwidth",
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("parity SmolLM2-135M-Instruct.Q4_1.gguf: ppl pocket"),
        "{stdout}"
    );
    let dir = only_subdir(&results);
    for f in ["receipt.json", "results.csv", "report.md", "speedup.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing in {}", dir.display());
    }
    let r = Receipt::load(&dir.join("receipt.json")).unwrap();
    let tests: Vec<String> = r.results.iter().map(|c| c.test.to_string()).collect();
    assert_eq!(tests, ["pp32", "tg8"]);
    for c in &r.results {
        assert_eq!(c.threads, 2);
        for s in [&c.pocket, &c.engines[&EngineKind::LlamaCpp]] {
            assert_eq!(s.ts.len(), 1);
            assert!(s.ts[0] > 0.0);
            // Real resident sets: more than a few MiB, less than a few GiB.
            assert!(s.peak_rss_bytes[0] > 16 << 20, "{:?}", s.peak_rss_bytes);
            assert!(s.peak_rss_bytes[0] < 4 << 30, "{:?}", s.peak_rss_bytes);
        }
        assert!(c.derived.engines[&EngineKind::LlamaCpp].speedup > 0.0);
    }
    let p = &r.parity[0];
    let (a, b) = (
        p.perplexity_pocket.unwrap(),
        p.perplexity_llama_cpp.unwrap(),
    );
    assert!((a - b).abs() / b < 0.05, "ppl {a} vs {b}");
    assert!(p.greedy_identical_share.is_some());
    // In llama.cpp's arithmetic the 2 x 16 greedy tokens are llama.cpp's, every one.
    assert_eq!(p.ggml_numerics_identical_share, Some(1.0), "{stdout}");
    // KL-divergence of the fast path from native llama.cpp: 4 chunks of 63 scored rows, a
    // small divergence (llama.cpp's own -fa on/off spread here is ~0.005) and mostly the
    // same top token.
    let k = p
        .kld
        .as_ref()
        .unwrap_or_else(|| panic!("no KLD in the receipt: {stdout}"));
    assert_eq!(k.rows, 4 * 63);
    assert!(k.mean_kld > 0.0 && k.mean_kld < 0.05, "{k:?}");
    assert!(k.same_top > 0.85, "{k:?}");
    assert!(stdout.contains("KLD from native llama.cpp 0."), "{stdout}");
    assert!(r
        .llama_cpp_reference_build
        .as_deref()
        .is_some_and(|b| b.contains("b11434")));
    let _ = std::fs::remove_dir_all(&results);
}

/// A small qwen3 model written by `pocket synth` (custom shape, q4_1) for the profiling tests.
fn tiny_qwen3(tag: &str) -> PathBuf {
    synth_qwen3(tag, &[])
}

/// `pocket synth --preset custom --arch qwen3 --type q4_1` with `shape` flags.
fn synth_qwen3(tag: &str, shape: &[&str]) -> PathBuf {
    common::fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    let dir = std::env::temp_dir().join(format!("pocket-profile-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-qwen3-q4_1.gguf");
    let mut args = vec![
        "synth",
        "--preset",
        "custom",
        "--arch",
        "qwen3",
        "--type",
        "q4_1",
        "--seed",
        "3",
        "-q",
        "-o",
        path.to_str().unwrap(),
    ];
    args.extend_from_slice(shape);
    let out = pocket(&args);
    assert!(out.status.success(), "synth: {}", stderr(&out));
    path
}

const BREAKDOWN_OPS: [&str; 9] = [
    "act_quant",
    "qkv",
    "attention",
    "out_proj",
    "gate_up",
    "down",
    "norm_rope",
    "head",
    "sampling",
];

/// `--breakdown` on a qwen3 model: every operation of the issue appears with time in both
/// phases, the shares add up to the measured time within a few percent, matrix operations
/// carry GB/s and GOP/s, and the md output shows the table.
#[test]
fn bench_breakdown_covers_every_operation_and_sums_to_the_total() {
    let m = tiny_qwen3("breakdown");
    let m = m.to_str().unwrap();
    let rows = bench_rows(
        &[
            "bench",
            "-m",
            m,
            "-p",
            "32",
            "-n",
            "16",
            "-r",
            "2",
            "-t",
            "2",
            "-o",
            "json",
            "--breakdown",
            "--poll",
            "0",
        ],
        Format::Json,
    );
    assert_eq!(rows.len(), 2);
    for (row, phase) in rows.iter().zip(["prefill", "decode"]) {
        assert_eq!(row.poll, 0);
        let b: pocket_compare::breakdown::Report =
            serde_json::from_value(row.extra["breakdown"].clone()).expect("breakdown field");
        let total_ms = row.samples_ns.iter().sum::<u64>() as f64 / 1e6;
        assert!((b.total_ms - total_ms).abs() < 1e-6 * total_ms);
        let shares: f64 = b.phases.iter().flat_map(|p| &p.ops).map(|o| o.share).sum();
        assert!(
            (shares - 1.0).abs() < 0.03,
            "{phase}: shares sum to {shares} of the measured time"
        );
        assert!((shares - b.accounted_share).abs() < 1e-9);
        assert_eq!(b.phases.len(), 1, "{phase}");
        assert_eq!(b.phases[0].phase, phase);
        for op in BREAKDOWN_OPS {
            let o = b
                .op(phase, op)
                .unwrap_or_else(|| panic!("{phase}: no {op}"));
            assert!(o.ms_per_token > 0.0, "{phase}: {op} took no time");
            if ["qkv", "out_proj", "gate_up", "down", "head"].contains(&op) {
                assert!(o.weight_gbs.unwrap() > 0.0 && o.gops.unwrap() > 0.0, "{op}");
            }
        }
        let bw = b.read_bandwidth_gbs.expect("bandwidth probed");
        assert!(bw > 0.0 && bw.is_finite());
    }
    // md: the llama-bench table, then a breakdown table per test.
    let out = pocket(&[
        "bench",
        "-m",
        m,
        "-p",
        "0",
        "-n",
        "4",
        "-r",
        "1",
        "-t",
        "1",
        "--breakdown",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for label in [
        "| QKV (fused) |",
        "| attention |",
        "| output head |",
        "of read bw",
    ] {
        assert!(text.contains(label), "{label} missing in:\n{text}");
    }
}

/// `--profile x.svg` writes a flamegraph naming pocket's kernels; `.pb` a non-empty
/// protobuf; another extension is refused before any work.
#[test]
fn bench_profile_writes_a_flamegraph_with_kernel_names() {
    // 17 M parameters: enough matmul time for a few hundred samples at 999 Hz.
    let m = synth_qwen3(
        "profile",
        &["--hidden", "512", "--ffn", "2048", "--layers", "4"],
    );
    let dir = m.parent().unwrap().to_path_buf();
    let svg = dir.join("flame.svg");
    let pb = dir.join("profile.pb");
    let m = m.to_str().unwrap();
    let out = pocket(&[
        "bench",
        "-m",
        m,
        "-p",
        "256",
        "-n",
        "256",
        "-r",
        "5",
        "-t",
        "2",
        "--profile",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).expect("flamegraph written");
    assert!(
        text.starts_with("<?xml") && text.contains("<svg"),
        "not an SVG"
    );
    for name in [
        "pocket_kernels::matmul",
        "pocket_model::forward::Session::forward",
    ] {
        assert!(text.contains(name), "{name} not in the flamegraph");
    }
    let out = pocket(&[
        "bench",
        "-m",
        m,
        "-p",
        "64",
        "-n",
        "32",
        "-r",
        "3",
        "--profile",
        pb.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::metadata(&pb).unwrap().len() > 100);
    let out = pocket(&["bench", "-m", m, "--profile", "x.txt"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(".svg"), "{}", stderr(&out));
    std::fs::remove_dir_all(dir).ok();
}

/// Placement flags land in the row as llama-bench records them.
#[test]
fn bench_records_cpu_mask_strict_and_poll() {
    let m = tiny_qwen3("placement");
    let rows = bench_rows(
        &[
            "bench",
            "-m",
            m.to_str().unwrap(),
            "-p",
            "8",
            "-n",
            "0",
            "-r",
            "1",
            "-t",
            "2",
            "-o",
            "json",
            "--cpu-mask",
            "0x1",
            "--cpu-strict",
            "1",
            "--poll",
            "100",
        ],
        Format::Json,
    );
    assert_eq!(
        (rows[0].cpu_mask.as_str(), rows[0].cpu_strict, rows[0].poll),
        ("0x1", true, 100)
    );
    let out = pocket(&["bench", "-m", m.to_str().unwrap(), "--cpu-mask", "0xzz"]);
    assert!(!out.status.success());
    let out = pocket(&["bench", "-m", m.to_str().unwrap(), "--poll", "101"]);
    assert!(!out.status.success());
    std::fs::remove_dir_all(m.parent().unwrap()).ok();
}
