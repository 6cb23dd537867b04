//! `pocket run --n-probs N` on SmolLM2: one line per generated token whose candidates are
//! sorted by probability, the greedy token first (and equal to the token generated, at
//! --temp 0), probabilities in (0, 1] that sum to at most 1; the text is the one plain
//! `pocket run` generates; bad combinations are errors.

mod common;

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["run", "-m"])
        .arg(common::smollm2())
        .args(["-t", "2", "--no-echo"])
        .args(args)
        .output()
        .unwrap()
}

/// A `'piece' p` field: (piece as printed, probability).
fn field(f: &str) -> (String, f64) {
    let (piece, p) = f.trim().rsplit_once(' ').unwrap();
    (
        piece.trim_end().to_string(),
        p.trim_start_matches("p=").parse().unwrap(),
    )
}

#[test]
fn n_probs_are_sorted_and_the_greedy_token_comes_first() {
    let prompt = "The capital of France is";
    let out = run(&["-p", prompt, "-n", "12", "--n-probs", "5"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    common::assert_success(&out, "pocket run");
    let (generated, table) = text.split_once("\nn_probs: ").unwrap();
    let lines: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(lines.len(), 12, "{table}");
    for l in &lines {
        let mut parts = l.split(" | ");
        // "   3  ' Paris'      p=0.91234"
        let head = parts.next().unwrap().trim_start();
        let (_, chosen) = head.split_once("  ").unwrap();
        let chosen = field(chosen);
        let top: Vec<(String, f64)> = parts.map(field).collect();
        assert_eq!(top.len(), 5, "{l}");
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "not sorted: {l}");
        assert_eq!(top[0], chosen, "the greedy token is not first: {l}");
        assert!(top.iter().all(|t| t.1 > 0.0 && t.1 <= 1.0), "{l}");
        assert!(top.iter().map(|t| t.1).sum::<f64>() <= 1.0 + 1e-4, "{l}");
    }
    // The same greedy text as without --n-probs.
    let plain = run(&["-p", prompt, "-n", "12"]);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).trim_end(),
        generated.trim_end()
    );
}

#[test]
fn n_probs_with_speculation_is_an_error() {
    let m = common::smollm2();
    let out = run(&[
        "-p",
        "Hi",
        "--n-probs",
        "3",
        "--spec-draft-model",
        m.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--n-probs"), "{err}");
}
