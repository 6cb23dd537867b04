//! `pocket synth` output runs in `pocket run`: a small qwen3 model per weight type is
//! written by the CLI, then generates tokens greedily, deterministically.

mod common;

use std::process::Command;

fn pocket(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(args)
        .output()
        .expect("run pocket")
}

#[test]
fn synthetic_models_generate_text() {
    common::fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    let dir = std::env::temp_dir().join(format!("pocket-synth-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for ty in ["q4_0", "q4_1", "q8_0", "q4_k_m", "f16"] {
        let path = dir.join(format!("tiny-{ty}.gguf"));
        let p = path.to_str().unwrap();
        let out = pocket(&[
            "synth", "--preset", "custom", "--type", ty, "-o", p, "--seed", "7", "-q",
        ]);
        common::assert_success(&out, &format!("pocket synth {ty}"));
        let run = |_: ()| {
            pocket(&[
                "run",
                "-m",
                p,
                "-p",
                "Hello, pocket",
                "-n",
                "12",
                "--temp",
                "0",
                "-t",
                "2",
            ])
        };
        let (a, b) = (run(()), run(()));
        assert!(
            a.status.success(),
            "run {ty}: {}",
            String::from_utf8_lossy(&a.stderr)
        );
        assert!(!a.stdout.is_empty(), "run {ty} printed nothing");
        assert_eq!(
            a.stdout, b.stdout,
            "greedy generation of {ty} is deterministic"
        );
        let err = String::from_utf8_lossy(&a.stderr);
        assert!(
            err.contains("t/s"),
            "timing summary on stderr for {ty}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
