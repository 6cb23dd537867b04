//! Parity with llama.cpp (b11434 binaries built by tests/fixtures.sh) on the real fixtures:
//! perplexity on `tests/data/ppl_text.txt` with `-c 128` within 1% of `llama-perplexity`,
//! greedy 32-token continuations of 5 prompts identical to `llama-completion --temp 0
//! -no-cnv` (in `Numerics::Ggml`, llama.cpp's arithmetic), the fast path's teacher-forced
//! logits within llama.cpp's own spread (`dump_logits`, tests/oracle); and the synthetic
//! MNN-Pocket-shape model (written by `synth` into a temporary directory) by the same
//! perplexity bound.

use std::path::PathBuf;
use std::process::Command;

use pocket_model::logit_dump::{max_abs_diff, LogitDump};
use pocket_model::sample_basic::argmax;
use pocket_model::tokenizer::StreamDecoder;
use pocket_model::{perplexity::perplexity, Model, Numerics, Session, SessionOptions};

mod common;
use common::{fixture, load_with_numerics};

fn model(name: &str) -> PathBuf {
    fixture(&format!("models/{name}"))
}

fn bin(name: &str) -> PathBuf {
    fixture(&format!("llama.cpp-build/bin/{name}"))
}

fn text_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/ppl_text.txt")
}

const N_CTX: usize = 128;

fn llama_ppl(m: &PathBuf, chunks: usize) -> f64 {
    let out = Command::new(bin("llama-perplexity"))
        .arg("-m")
        .arg(m)
        .arg("-f")
        .arg(text_path())
        .args([
            "-c",
            &N_CTX.to_string(),
            "-t",
            "2",
            "--chunks",
            &chunks.to_string(),
        ])
        .output()
        .expect("run llama-perplexity");
    let all =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line = all
        .lines()
        .find(|l| l.contains("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no Final estimate in llama-perplexity output:\n{all}"));
    let v = line.split("PPL = ").nth(1).unwrap();
    v.split_whitespace().next().unwrap().parse().unwrap()
}

fn check_ppl(name: &str, chunks: usize) {
    check_ppl_at(&model(name), chunks);
}

fn check_ppl_at(m: &PathBuf, chunks: usize) {
    let name = m.file_name().unwrap().to_string_lossy();
    let text = std::fs::read_to_string(text_path()).unwrap();
    let ours = {
        let mdl = Model::load(m).unwrap();
        perplexity(&mdl, &text, N_CTX, Some(2), Some(chunks), |_, _| {}).unwrap()
    };
    let theirs = llama_ppl(m, chunks);
    let rel = (ours.ppl - theirs).abs() / theirs;
    eprintln!(
        "{name}: pocket PPL {:.4}, llama.cpp PPL {theirs:.4} ({:.3}%)",
        ours.ppl,
        rel * 100.0
    );
    assert!(
        rel < 0.01,
        "{name}: pocket {} vs llama.cpp {theirs}",
        ours.ppl
    );
}

// In llama.cpp's arithmetic the perplexity is llama-perplexity's to every printed digit:
// 128-token ubatches take ggml's tiled flash attention and (gemma3's Q6_K) tiled K-quant
// matmul, so this covers the prompt-batch twins the greedy test does not reach.
#[test]
fn perplexity_in_ggml_numerics_equals_llama_perplexity() {
    let text = std::fs::read_to_string(text_path()).unwrap();
    for (name, chunks) in [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", 3),
        ("gemma-3-270m-q4_k_m.gguf", 2),
    ] {
        let m = model(name);
        let ours = perplexity(
            &load_with_numerics(&m, Numerics::Ggml),
            &text,
            N_CTX,
            Some(2),
            Some(chunks),
            |_, _| {},
        )
        .unwrap()
        .ppl;
        let theirs = llama_ppl(&m, chunks);
        eprintln!("{name}: pocket (ggml numerics) PPL {ours:.4}, llama.cpp {theirs:.4}");
        assert!(
            format!("{ours:.4}") == format!("{theirs:.4}"),
            "{name}: pocket {ours} vs llama.cpp {theirs}"
        );
    }
}

#[test]
fn perplexity_smollm2_within_1_percent_of_llama_cpp() {
    check_ppl("SmolLM2-135M-Instruct.Q4_1.gguf", 27);
}

#[test]
fn perplexity_gemma3_within_1_percent_of_llama_cpp() {
    // 8 of the 25 chunks: the generic (scalar) K-quant path is slow in the test profile.
    check_ppl("gemma-3-270m-q4_k_m.gguf", 8);
}

/// The MNN-Pocket-shape synthetic model (qwen3, 28 layers, real Qwen-derived vocabulary,
/// random weights, Q4_1 with shared 64-group scales as in the release): both engines must
/// compute the same distribution. Random weights give a flat-ish next-token distribution,
/// so the PPL is large; a wrong norm, RoPE or head would still move it by far more than 1%.
#[test]
fn perplexity_synthetic_mnn_pocket_within_1_percent_of_llama_cpp() {
    use pocket_model::gguf::GgufFile;
    use pocket_model::synth::{self, BaseVocab, SynthType};
    let base = fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    let base = BaseVocab::from_gguf(&GgufFile::open(&base).unwrap()).unwrap();
    let dir = std::env::temp_dir().join(format!("pocket-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mnn-pocket-0.3b-synth-q4_1.gguf");
    let preset = synth::preset("mnn-pocket-0.3b").unwrap();
    let ty = SynthType::parse("q4_1").unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    synth::synthesize(&preset, ty, 7, &base, &mut out, &mut |_, _| {}).unwrap();
    drop(out);
    check_ppl_at(&path, 6);
    std::fs::remove_dir_all(&dir).ok();
}

const PROMPTS: [&str; 5] = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
];

/// Sessions of 256 positions on two threads.
fn session_options() -> SessionOptions {
    SessionOptions {
        n_ctx: 256,
        n_threads: 2,
        ..Default::default()
    }
}

fn ours_greedy(mdl: &Model, prompt: &str, n: usize) -> String {
    let tok = &mdl.tokenizer;
    let ids = tok.encode(prompt, true, true);
    let mut s = Session::new(mdl, session_options());
    let mut next = argmax(s.prefill(&ids).unwrap());
    let mut dec = StreamDecoder::new();
    let mut text = prompt.to_string();
    for i in 0..n {
        if tok.is_eog(next) {
            break;
        }
        text += &dec.push(tok, next, false);
        if i + 1 < n {
            next = argmax(s.decode(next).unwrap());
        }
    }
    text + &dec.finish()
}

fn theirs_greedy(m: &PathBuf, prompt: &str, n: usize) -> String {
    let out = Command::new(bin("llama-completion"))
        .arg("-m")
        .arg(m)
        .args([
            "-p",
            prompt,
            "-n",
            &n.to_string(),
            "--temp",
            "0",
            "-no-cnv",
            "-t",
            "2",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run llama-completion");
    String::from_utf8_lossy(&out.stdout).to_string()
}

// The criterion of the runner issue: 32-token greedy continuations identical to
// `llama-completion --temp 0` for at least 4 of 5 prompts. Greedy text is chaotic in the
// arithmetic (any difference, even RoPE angles 1e-5 rad apart, flips int8 activation codes
// and moves the logits by the whole quantization noise: llama.cpp's own `-fa off` differs
// from its `-fa on` as much), so it is met by `Numerics::Ggml`, which computes llama.cpp's
// logits bit for bit; the fast path is held to llama.cpp's own spread below.
#[test]
fn greedy_32_tokens_identical_with_ggml_numerics() {
    // The issue asks for 4 of 5; llama.cpp's own arithmetic gives all 5.
    for (name, need) in [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", 5),
        ("gemma-3-270m-q4_k_m.gguf", 5),
    ] {
        let m = model(name);
        let mdl = load_with_numerics(&m, Numerics::Ggml);
        let mut same = 0;
        for p in PROMPTS {
            let (a, b) = (ours_greedy(&mdl, p, 32), theirs_greedy(&m, p, 32));
            let eq = a.trim_end() == b.trim_end();
            same += eq as usize;
            eprintln!(
                "{name} {p:?}: {}\n  pocket:    {a:?}\n  llama.cpp: {b:?}",
                if eq { "same" } else { "DIFFERENT" }
            );
        }
        eprintln!("{name}: {same}/5 identical over 32 tokens");
        assert!(
            same >= need,
            "{name}: only {same}/5 greedy continuations identical"
        );
    }
}

/// llama.cpp's greedy run of `prompt` with every step's logits (`dump_logits`), optionally
/// with `-fa off` and teacher-forced on the tokens of `force`.
fn llama_dump(m: &PathBuf, prompt: &str, n: usize, fa_off_forced_by: Option<&PathBuf>) -> PathBuf {
    // Its own directory: the synthetic-model test removes `pocket-parity-<pid>` when done.
    let dir = std::env::temp_dir().join(format!("pocket-dumps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tag = if fa_off_forced_by.is_some() {
        "nofa"
    } else {
        "fa"
    };
    let name = m.file_stem().unwrap().to_string_lossy();
    let out = dir.join(format!("{name}-{}-{tag}.bin", prompt.len()));
    let mut cmd = Command::new(bin("dump_logits"));
    cmd.arg(m).arg(prompt).arg(n.to_string()).arg(&out).arg("2");
    if let Some(f) = fa_off_forced_by {
        cmd.env("DUMP_FA", "off").env("DUMP_FORCE", f);
    }
    let o = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run dump_logits");
    assert!(
        o.status.success(),
        "dump_logits failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Teacher-forced on `theirs`' tokens: pocket's per-step max |Δlogit| against it.
fn ours_forced(mdl: &Model, theirs: &LogitDump) -> Vec<f32> {
    let mut s = Session::new(mdl, session_options());
    let mut logits = s.prefill(&theirs.prompt).unwrap().to_vec();
    let mut d = Vec::new();
    for (i, (tok, tl)) in theirs.steps.iter().enumerate() {
        d.push(max_abs_diff(&logits, tl));
        if i + 1 < theirs.steps.len() {
            logits = s.decode(*tok).unwrap().to_vec();
        }
    }
    d
}

fn mean(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64
}

// The fast path, teacher-forced on llama.cpp's own greedy tokens over 32 steps of the 5
// prompts: its logits must stay within llama.cpp's own spread (llama.cpp with `-fa off`
// against `-fa on`, same tokens), and `Numerics::Ggml` must give llama.cpp's logits to the
// bit on SmolLM2. A wrong kernel moves logits by whole units and fails the first check.
#[test]
fn teacher_forced_logits_within_llama_cpp_own_spread() {
    for name in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma-3-270m-q4_k_m.gguf",
    ] {
        let m = model(name);
        let fast = load_with_numerics(&m, Numerics::Fast);
        let exact = name
            .starts_with("SmolLM2")
            .then(|| load_with_numerics(&m, Numerics::Ggml));
        let (mut ours, mut self_spread) = (Vec::new(), Vec::new());
        for p in PROMPTS {
            let fa = llama_dump(&m, p, 32, None);
            let nofa = LogitDump::read(llama_dump(&m, p, 32, Some(&fa))).unwrap();
            let fa = LogitDump::read(&fa).unwrap();
            for ((_, a), (_, b)) in fa.steps.iter().zip(&nofa.steps) {
                self_spread.push(max_abs_diff(a, b));
            }
            ours.extend(ours_forced(&fast, &fa));
            if let Some(ex) = &exact {
                let d = ours_forced(ex, &fa);
                assert!(
                    d.iter().all(|&x| x == 0.0),
                    "{name} {p:?}: ggml numerics differ from llama.cpp: {d:?}"
                );
            }
        }
        let (o, s) = (mean(&ours), mean(&self_spread));
        eprintln!("{name}: mean max|dlogit| pocket {o:.4}, llama.cpp fa on/off {s:.4}");
        assert!(
            o <= 1.25 * s,
            "{name}: pocket's logits ({o:.4}) stray beyond llama.cpp's own spread ({s:.4})"
        );
    }
}
