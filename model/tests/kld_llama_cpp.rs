//! KL-divergence parity with llama-perplexity (`--kl-divergence-base` / `--kl-divergence`),
//! against llama.cpp's reference (x86-64-v3) build, whose arithmetic `--numerics ggml`
//! reproduces, on SmolLM2 Q4_1 and gemma-3-270m Q4_K_M (`-c 128` on tests/data/ppl_text.txt):
//!
//! 1. The file format, writer side: pocket in ggml numerics writes llama.cpp's base file
//!    byte for byte (same tokens, same logits, same 16-bit log-probabilities; SmolLM2).
//! 2. The statistics, reader side: pocket reading a base llama.cpp wrote (with `-fa off`, so
//!    the divergence is not zero) prints llama.cpp's own `--kl-divergence` figures to
//!    every printed digit.
//! 3. The fast path: its KLD from llama.cpp's base stays within a small multiple of
//!    llama.cpp's own spread (the KLD of its `-fa on` run from its `-fa off` run), and the
//!    same top token on as many rows as llama.cpp's two runs share (within 5 points).
//!
//! Two chunks of 128 (126 rows: llama.cpp prints statistics from 100 rows up), since ggml
//! numerics run prompts at ~8 t/s.
//!
//! These need the x86 twins of `--numerics ggml`: on other architectures the test says so
//! and checks nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use pocket_model::kld::{KldSummary, LogitsReader};
use pocket_model::perplexity::{kl_divergence, perplexity_base};
use pocket_model::{Model, Numerics, SessionOptions};

mod common;
use common::{figure, fixture, load_with_numerics};

const N_CTX: usize = 128;

fn text_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/ppl_text.txt")
}

fn llama_perplexity(args: &[&str], model: &Path) -> String {
    let bin = fixture("llama.cpp-build/bin/llama-perplexity");
    let out = Command::new(bin)
        .arg("-m")
        .arg(model)
        .args(["-c", &N_CTX.to_string(), "-t", "2"])
        .args(args)
        .output()
        .expect("run llama-perplexity");
    let all =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "llama-perplexity {args:?} failed:\n{all}"
    );
    all
}

fn pocket_kld(model: &Model, base: &Path) -> KldSummary {
    let f = std::fs::File::open(base).unwrap();
    let len = f.metadata().unwrap().len();
    let mut r = LogitsReader::new(std::io::BufReader::new(f), "base", Some(len)).unwrap();
    let o = SessionOptions {
        n_ctx: r.n_ctx,
        n_threads: 2,
        ..Default::default()
    };
    kl_divergence(model, &mut r, o, |_, _| {})
        .unwrap()
        .summary()
}

/// The lines of a KL-divergence report that carry figures, keyed by their label.
fn figures(report: &str) -> Vec<String> {
    const KEYS: [&str; 9] = [
        "Mean PPL(Q)  ",
        "Mean PPL(base)",
        "Mean ln(PPL(Q)/PPL(base))",
        "Mean    KLD:",
        "Maximum KLD:",
        "Median  KLD:",
        "99.0%   KLD:",
        "RMS Δp",
        "Same top p:",
    ];
    KEYS.iter()
        .map(|k| {
            report
                .lines()
                .find(|l| l.starts_with(k))
                .unwrap_or_else(|| panic!("no `{k}` line in:\n{report}"))
                .trim()
                .to_string()
        })
        .collect()
}

/// `write_check`: also check the writer byte for byte (one more ggml-numerics pass, ~30 s
/// per chunk pair on SmolLM2; the writer does not depend on the model, so once is enough).
fn check(name: &str, chunks: usize, write_check: bool) {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("SKIPPED {name}: ggml numerics reproduce llama.cpp's x86-64 kernels only");
        return;
    }
    let m = fixture(&format!("models/{name}"));
    let dir = std::env::temp_dir().join(format!("pocket-kld-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (base_on, base_off, base_pocket) = (
        dir.join("on.kld"),
        dir.join("off.kld"),
        dir.join("pocket.kld"),
    );
    let chunks_arg = chunks.to_string();
    let text = text_path();
    let text_arg = text.to_str().unwrap();
    for (file, fa) in [(&base_on, "on"), (&base_off, "off")] {
        llama_perplexity(
            &[
                "-f",
                text_arg,
                "--chunks",
                &chunks_arg,
                "-fa",
                fa,
                "--kl-divergence-base",
                file.to_str().unwrap(),
            ],
            &m,
        );
    }
    // llama.cpp's own spread: its default run (-fa on) against its -fa off base.
    let theirs = llama_perplexity(
        &[
            "--kl-divergence-base",
            base_off.to_str().unwrap(),
            "--kl-divergence",
        ],
        &m,
    );

    // 1. pocket writes llama.cpp's file.
    let exact = load_with_numerics(&m, Numerics::Ggml);
    if write_check {
        let text_s = std::fs::read_to_string(&text).unwrap();
        let o = SessionOptions {
            n_ctx: N_CTX,
            n_threads: 2,
            ..Default::default()
        };
        let w = std::io::BufWriter::new(std::fs::File::create(&base_pocket).unwrap());
        perplexity_base(&exact, &text_s, o, Some(chunks), Some(w), |_, _| {}).unwrap();
        let (a, b) = (
            std::fs::read(&base_on).unwrap(),
            std::fs::read(&base_pocket).unwrap(),
        );
        assert_eq!(a.len(), b.len(), "{name}: base file sizes differ");
        let first = a.iter().zip(&b).position(|(x, y)| x != y);
        assert!(
            first.is_none(),
            "{name}: pocket's base differs from llama.cpp's at byte {first:?}"
        );
    }

    // 2. pocket's statistics equal llama.cpp's on the same logits.
    let ours = pocket_kld(&exact, &base_off).report();
    assert_eq!(
        figures(&ours),
        figures(&theirs),
        "{name}: KLD statistics differ"
    );

    // 3. The fast path, against llama.cpp's own spread.
    let spread = figure(&theirs, "Mean    KLD:");
    let spread_top = figure(&theirs, "Same top p:") / 100.0;
    let fast = pocket_kld(&load_with_numerics(&m, Numerics::Fast), &base_on);
    eprintln!(
        "{name}: fast path KLD {:.6} (same top {:.2} %), llama.cpp fa on vs off {spread:.6} \
         (same top {:.2} %), {} rows",
        fast.kld.0,
        100.0 * fast.same_top.0,
        100.0 * spread_top,
        fast.count
    );
    assert!(
        spread > 0.0,
        "{name}: llama.cpp's fa on/off spread is zero: the test has no yardstick"
    );
    assert!(
        fast.kld.0 <= 3.0 * spread,
        "{name}: fast path KLD {} is more than 3x llama.cpp's own spread {spread}",
        fast.kld.0
    );
    // The top token parts on near-ties; llama.cpp's own runs part on as many rows.
    assert!(
        fast.same_top.0 >= spread_top - 0.05,
        "{name}: same top token on {:.1} % of rows, llama.cpp's fa on/off on {:.1} %",
        100.0 * fast.same_top.0,
        100.0 * spread_top
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kl_divergence_smollm2_matches_llama_perplexity() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf", 2, true);
}

#[test]
fn kl_divergence_gemma3_matches_llama_perplexity() {
    check("gemma-3-270m-q4_k_m.gguf", 2, false);
}
