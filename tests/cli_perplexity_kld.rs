//! `pocket perplexity --kl-divergence-base F` / `--kl-divergence` as a user runs them on
//! SmolLM2: the base written by one run, read by another (the same model: zero divergence;
//! a q8_0 KV cache: small but positive, same top token almost always), llama.cpp's table and
//! statistics on stdout, and clear errors for a missing, foreign or truncated base file.
//! (Agreement with llama.cpp itself, both directions: model/tests/kld_llama_cpp.rs.)

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::figure;

fn pocket(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .arg("perplexity")
        .args(args)
        .output()
        .expect("run pocket perplexity")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn kl_divergence_base_round_trip_and_errors() {
    let model = common::smollm2();
    let m = model.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("pocket-cli-kld-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("base.kld");
    let b = base.to_str().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ppl_text.txt");

    let out = pocket(&[
        "-m",
        m,
        "-f",
        data.to_str().unwrap(),
        "-c",
        "128",
        "--chunks",
        "3",
        "--kl-divergence-base",
        b,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Final estimate: PPL = "));
    // Header (20 bytes), 3·128 tokens, 3·63 rows of 49152 log-probabilities + 4.
    let len = std::fs::metadata(&base).unwrap().len();
    assert_eq!(len, 20 + 4 * 384 + 2 * 3 * 63 * (49152 + 4));

    let same = pocket(&["-m", m, "--kl-divergence-base", b, "--kl-divergence"]);
    let so = text(&same.stdout);
    assert!(same.status.success(), "{}", text(&same.stderr));
    assert!(so.contains("Same top p"), "{so}");
    assert_eq!(
        so.lines()
            .filter(|l| l
                .split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<usize>().is_ok()))
            .count(),
        3,
        "one line per chunk:\n{so}"
    );
    assert!(figure(&so, "Mean    KLD:").abs() < 1e-5, "{so}");
    assert_eq!(figure(&so, "Same top p:"), 100.0, "{so}");

    let q8 = pocket(&[
        "-m",
        m,
        "--kl-divergence-base",
        b,
        "--kl-divergence",
        "--cache-type-k",
        "q8_0",
        "--cache-type-v",
        "q8_0",
    ]);
    let qo = text(&q8.stdout);
    assert!(q8.status.success(), "{}", text(&q8.stderr));
    let kld = figure(&qo, "Mean    KLD:");
    assert!(kld > 0.0 && kld < 0.05, "q8_0 KV cache KLD {kld}:\n{qo}");
    assert!(figure(&qo, "Same top p:") > 90.0, "{qo}");

    // Errors: no base, a file that is not one, a truncated one, a base of another vocabulary.
    let none = pocket(&["-m", m, "--kl-divergence"]);
    assert!(!none.status.success());
    let junk = dir.join("junk.kld");
    std::fs::write(&junk, b"not a logits file at all").unwrap();
    let cut = dir.join("cut.kld");
    std::fs::write(&cut, &std::fs::read(&base).unwrap()[..100_000]).unwrap();
    let gemma = common::gemma3();
    for (model, file, says) in [
        (m, junk.to_str().unwrap(), "does not look like"),
        (m, cut.to_str().unwrap(), "implies"),
        (gemma.to_str().unwrap(), b, "vocabulary"),
    ] {
        let out = pocket(&["-m", model, "--kl-divergence-base", file, "--kl-divergence"]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{file} accepted");
        assert!(
            err.contains(says) && !err.contains("panicked"),
            "{file}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
