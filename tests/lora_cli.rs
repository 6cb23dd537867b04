//! LoRA parity with llama.cpp, as a user runs it: `pocket synth --lora-for` writes a
//! random rank-8 adapter in llama.cpp's format; `pocket perplexity --lora` /
//! `--lora-scaled` agree with `llama-perplexity` given the same flags and files within
//! 0.5 % (`-c 128`, all of tests/data/ppl_text.txt: 27 chunks), with the adapter in the
//! fast path's int8 form (the default) and in bf16 (`POCKET_LORA_FORM=bf16`), on SmolLM2
//! Q4_1 and on a synthetic MNN-Pocket-shape Q4_1 model; greedy text in ggml numerics equals
//! llama-completion's with an adapter, on both. Each adapter moves perplexity by more than the
//! bound, so a run that ignored it would fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pocket_compare::parity::parse_final_estimate;

fn pocket(args: &[&str]) -> Output {
    pocket_form(args, "int8")
}

/// `pocket` with its adapters held in `form` (`POCKET_LORA_FORM`).
fn pocket_form(args: &[&str], form: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .env("POCKET_LORA_FORM", form)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run pocket")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
}

fn ok(o: Output, what: &str) -> Output {
    assert!(o.status.success(), "{what} failed:\n{}", text(&o));
    o
}

/// `pocket run`: 24 greedy tokens of `prompt` in llama.cpp's arithmetic, plus `extra`.
fn greedy_ggml(model: &Path, prompt: &str, extra: &[&str]) -> Output {
    let m = model.to_str().unwrap();
    let mut args = vec![
        "run", "-m", m, "-p", prompt, "-n", "24", "--temp", "0", "-t", "2",
    ];
    args.extend(["--numerics", "ggml"]);
    args.extend(extra);
    pocket(&args)
}

fn bin(name: &str) -> PathBuf {
    common::fixture(&format!("llama.cpp-build/bin/{name}"))
}

fn ppl_text() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ppl_text.txt")
}

/// The comparator's own reading of the `Final estimate: PPL = ` line (pocket perplexity
/// prints llama-perplexity's).
fn final_ppl(out: &str) -> f64 {
    parse_final_estimate(out).unwrap_or_else(|| panic!("no Final estimate in:\n{out}"))
}

// The whole file: on 3 chunks (192 scored tokens) the rounding of any form moved PPL by up
// to 0.9 % against llama.cpp (the exact f32 adapter by 0.87 %, bf16 by 0.19 %, int8 by
// 0.84 % on SmolLM2 `--lora`), so that bound tested luck more than arithmetic.
const PPL_ARGS: [&str; 4] = ["-c", "128", "-t", "2"];

fn pocket_ppl(model: &Path, extra: &[&str]) -> f64 {
    pocket_ppl_form(model, extra, "int8")
}

fn pocket_ppl_form(model: &Path, extra: &[&str], form: &str) -> f64 {
    let data = ppl_text();
    let mut a = vec!["perplexity", "-m", model.to_str().unwrap()];
    a.extend(["-f", data.to_str().unwrap()]);
    a.extend(PPL_ARGS);
    a.extend(extra);
    let o = ok(pocket_form(&a, form), "pocket perplexity");
    final_ppl(&text(&o))
}

fn llama_ppl(model: &Path, extra: &[&str]) -> f64 {
    let o = Command::new(bin("llama-perplexity"))
        .arg("-m")
        .arg(model)
        .arg("-f")
        .arg(ppl_text())
        .args(PPL_ARGS)
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run llama-perplexity");
    let o = ok(o, "llama-perplexity");
    final_ppl(&text(&o))
}

fn synth_adapter(model: &Path, out: &Path, seed: &str) {
    ok(
        pocket(&[
            "synth",
            "--lora-for",
            model.to_str().unwrap(),
            "--lora-rank",
            "8",
            "--seed",
            seed,
            "-o",
            out.to_str().unwrap(),
        ]),
        "pocket synth --lora-for",
    );
}

/// pocket's (int8 and bf16 adapters) and llama.cpp's perplexity with `flags` (the same
/// for both), their base perplexity, and the checks: each within 0.5 % of llama.cpp's,
/// and the adapter moving perplexity by more than `min_move`.
fn check_ppl(name: &str, model: &Path, flags: &[&str], min_move: f64) {
    let base = pocket_ppl(model, &[]);
    let theirs = llama_ppl(model, flags);
    for form in ["int8", "bf16"] {
        let ours = pocket_ppl_form(model, flags, form);
        let rel = (ours - theirs).abs() / theirs;
        eprintln!(
            "{name} {flags:?} {form}: pocket PPL {ours:.4}, llama.cpp {theirs:.4} ({:.3} %), \
             base {base:.4}",
            rel * 100.0
        );
        assert!(
            rel < 0.005,
            "{name} {form}: PPL {ours} vs llama.cpp's {theirs}"
        );
        assert!(
            (ours - base).abs() / base > min_move,
            "{name}: the adapter moves PPL only from {base} to {ours}"
        );
    }
}

/// The SmolLM2 fixture, a fresh directory for `tag` and a rank-8 adapter in it.
fn smollm2_with_adapter(tag: &str, seed: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (model, dir) = (common::smollm2(), tmp(tag));
    let a = dir.join("a.gguf");
    synth_adapter(&model, &a, seed);
    (model, dir, a)
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pocket-lora-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn smollm2_lora_perplexity_matches_llama_cpp() {
    let model = common::smollm2();
    let dir = tmp("smol");
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    synth_adapter(&model, &a, "1");
    synth_adapter(&model, &b, "2");
    let (sa, sb) = (a.to_str().unwrap(), b.to_str().unwrap());
    check_ppl("SmolLM2", &model, &["--lora", sa], 0.05);
    let scaled = format!("{sa}:0.5,{sb}:0.75");
    check_ppl("SmolLM2", &model, &["--lora-scaled", &scaled], 0.05);
    std::fs::remove_dir_all(&dir).ok();
}

/// Greedy text of `prompt` with `adapter` in ggml numerics against `llama-completion
/// --lora` on the same files: equal, and different from the text without the adapter.
/// Both outputs are read as UTF-8 the same lossy way (a byte token alone prints raw from
/// llama.cpp and as U+FFFD from pocket).
fn check_greedy(name: &str, model: &Path, adapter: &Path, prompt: &str) {
    let sa = adapter.to_str().unwrap();
    let ours = ok(
        greedy_ggml(model, prompt, &["--lora", sa]),
        "pocket run --lora",
    );
    let theirs = Command::new(bin("llama-completion"))
        .arg("-m")
        .arg(model)
        .args([
            "-p", prompt, "-n", "24", "--temp", "0", "-no-cnv", "-t", "2", "--lora", sa,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run llama-completion");
    let theirs = ok(theirs, "llama-completion --lora");
    let plain = ok(greedy_ggml(model, prompt, &[]), "pocket run");
    let out = |o: &Output| String::from_utf8_lossy(&o.stdout).trim_end().to_string();
    let (o, t, p) = (out(&ours), out(&theirs), out(&plain));
    eprintln!("{name}\npocket:    {o:?}\nllama.cpp: {t:?}\nno LoRA:   {p:?}");
    assert_eq!(o, t, "{name}: greedy text with the adapter");
    assert_ne!(o, p, "{name}: the adapter changes nothing");
}

// Greedy text in ggml numerics equals llama-completion's: the adapter products are summed
// as b11434's x86-64-v3 build sums them (`lora/apply.rs`: llamafile's sgemm for batches,
// `ggml_vec_dot_f32` for single tokens; `kernels/src/ggml_exact/vec.rs`). With a plain
// 16-lane sum pocket stopped after "Paris." where llama.cpp goes on (a near-tie).
#[test]
fn smollm2_lora_greedy_text_matches_llama_completion() {
    let (model, dir, a) = smollm2_with_adapter("greedy", "1");
    check_greedy("SmolLM2", &model, &a, "The capital of France is");
    std::fs::remove_dir_all(&dir).ok();
}

/// A new temporary directory with the synthetic MNN-Pocket-shape Q4_1 model (`pocket
/// synth`, seed 7) and a rank-8 adapter for it (seed 3): (dir, model, adapter).
fn mnn_pocket_with_adapter(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    common::fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    let dir = tmp(tag);
    let model = dir.join("mnn-pocket-q4_1.gguf");
    ok(
        pocket(&[
            "synth",
            "--preset",
            "mnn-pocket-0.3b",
            "--type",
            "q4_1",
            "--seed",
            "7",
            "-q",
            "-o",
            model.to_str().unwrap(),
        ]),
        "pocket synth",
    );
    let a = dir.join("a.gguf");
    synth_adapter(&model, &a, "3");
    (dir, model, a)
}

// The same on the MNN-Pocket shape (qwen3: Q/K norms, 28 layers, rank-8 adapter on all 7
// projections; output widths 896, 128, 2560, 1024 take the sgemm twin for the prompt and
// `ggml_vec_dot_f32`'s for each decoded token). Random weights give arbitrary tokens, so
// near-ties are common: any difference in the adapter's sums would show.
#[test]
fn mnn_pocket_shape_lora_greedy_text_matches_llama_completion() {
    let (dir, model, a) = mnn_pocket_with_adapter("mnn-greedy");
    check_greedy("MNN-Pocket shape", &model, &a, "The capital of France is");
    check_greedy("MNN-Pocket shape", &model, &a, "def fibonacci(n):");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn mnn_pocket_shape_lora_perplexity_matches_llama_cpp() {
    let (dir, model, a) = mnn_pocket_with_adapter("mnn");
    // A random model's PPL (~81k on the whole file) moves less with the same relative
    // adapter: 0.92 % (80737 -> 81480), still more than the 0.5 % bound, so a run that
    // ignored the adapter would fail it.
    check_ppl(
        "MNN-Pocket shape",
        &model,
        &["--lora", a.to_str().unwrap()],
        0.006,
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_foreign_or_broken_adapter_is_a_clear_error() {
    let model = common::smollm2();
    let m = model.to_str().unwrap();
    let dir = tmp("bad");
    let run = |lora: &str| pocket(&["run", "-m", m, "-p", "Hi", "-n", "1", "--lora", lora]);
    // The model itself is no adapter.
    let o = run(m);
    assert!(!o.status.success());
    assert!(text(&o).contains("is not an adapter"), "{}", text(&o));
    // Truncated.
    let a = dir.join("a.gguf");
    synth_adapter(&model, &a, "1");
    let bytes = std::fs::read(&a).unwrap();
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    let o = run(cut.to_str().unwrap());
    assert!(!o.status.success());
    assert!(text(&o).contains("lies outside the file"), "{}", text(&o));
    // --lora-scaled without a scale.
    let o = pocket(&[
        "run",
        "-m",
        m,
        "-p",
        "Hi",
        "--lora-scaled",
        a.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("FILE:SCALE"), "{}", text(&o));
    std::fs::remove_dir_all(&dir).ok();
}

/// `pocket bench --interleave --lora`: the base and the adapted model in one process, each
/// with its own row (the adapted one named so), every repetition timed, and the adapter's
/// cost printed; `--breakdown` with it is refused (its accounting would time both).
#[test]
fn bench_interleave_times_base_and_adapter_side_by_side() {
    let (model, dir, a) = smollm2_with_adapter("interleave", "3");
    let (m, sa) = (model.to_str().unwrap(), a.to_str().unwrap());
    let args = [
        "bench",
        "-m",
        m,
        "--lora",
        sa,
        "--interleave",
        "-p",
        "8",
        "-n",
        "4",
    ];
    let o = ok(
        pocket(&[&args[..], &["-r", "3", "-t", "2", "-o", "json"]].concat()),
        "bench",
    );
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json rows");
    let rows = rows.as_array().expect("an array of rows");
    // pp8 (base, adapted), then tg4 (base, adapted).
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (i, row) in rows.iter().enumerate() {
        let ty = row["model_type"].as_str().unwrap();
        assert_eq!(ty.ends_with(" + LoRA"), i % 2 == 1, "row {i}: {ty}");
        assert_eq!(row["samples_ts"].as_array().unwrap().len(), 3, "row {i}");
        assert!(row["avg_ts"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows[0]["n_prompt"], 8);
    assert_eq!(rows[3]["n_gen"], 4);
    let err = String::from_utf8_lossy(&o.stderr);
    for test in ["pp8", "tg4"] {
        assert!(err.contains(&format!("lora cost {test} t2: ")), "{err}");
    }
    let refused = pocket(&[&args[..], &["-r", "1", "--breakdown"]].concat());
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("--interleave"),
        "{}",
        text(&refused)
    );
    std::fs::remove_dir_all(&dir).ok();
}
