//! The tokenizer against llama.cpp: its own test vectors (`models/ggml-vocab-*.gguf` with
//! `.inp`/`.out`, as `tests/test-tokenizer-0.cpp` runs them) and `llama-tokenize` on the
//! real fixture models.
//!
//! Fixtures come from `bash tests/fixtures.sh` (cache dir `$POCKET_CACHE`, default
//! `~/.cache/pocket`); a missing one fails the test with that instruction.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pocket_model::gguf::GgufFile;
use pocket_model::tokenizer::Tokenizer;

mod common;
use common::{cache_dir, fixture};

fn load(path: &Path) -> Tokenizer {
    let g = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `read_tests` of test-tokenizer-0.cpp.
fn read_tests(inp: &Path, out: &Path) -> Vec<(String, Vec<u32>)> {
    let raw = std::fs::read_to_string(inp).unwrap();
    let outs = std::fs::read_to_string(out).unwrap();
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(sep) {
            Some(rel) => {
                inputs.push(raw[pos..pos + rel].to_string());
                pos += rel + sep.len();
            }
            None => {
                inputs.push(raw[pos..].to_string());
                break;
            }
        }
    }
    let lines: Vec<&str> = outs.lines().collect();
    assert_eq!(
        inputs.len(),
        lines.len(),
        "{}: input and output files have different numbers of tests",
        inp.display()
    );
    inputs
        .into_iter()
        .zip(lines)
        .map(|(s, o)| {
            let ids = o
                .split_whitespace()
                .map(|t| t.parse().expect("token id"))
                .collect();
            (s, ids)
        })
        .collect()
}

fn show(tok: &Tokenizer, ids: &[u32]) -> String {
    ids.iter()
        .map(|&id| {
            format!(
                "{id} {:?}",
                String::from_utf8_lossy(&tok.token_to_piece(id))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where `got` is not `expected` for `input`: both, token by token, for a failure report.
fn mismatch(tok: &Tokenizer, input: &str, expected: &[u32], got: &[u32]) -> Option<String> {
    (got != expected).then(|| {
        format!(
            "  input    {input:?}\n  expected [{}]\n  got      [{}]",
            show(tok, expected),
            show(tok, got)
        )
    })
}

/// Runs every case of `ggml-vocab-{name}.gguf`; returns (passed, total).
fn check_vocab(name: &str, roundtrip: bool) -> (usize, usize) {
    let base = format!("llama.cpp/models/ggml-vocab-{name}.gguf");
    let gguf = fixture(&base);
    let inp = fixture(&format!("{base}.inp"));
    let out = fixture(&format!("{base}.out"));

    let t0 = Instant::now();
    let tok = load(&gguf);
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;

    let cases = read_tests(&inp, &out);
    let mut failures = Vec::new();
    let mut rt_failures = Vec::new();
    for (text, expected) in &cases {
        // test-tokenizer-0: common_tokenize(ctx, text, add_special = false, parse_special = false)
        let got = tok.encode(text, false, false);
        if &got != expected {
            failures.push(format!(
                "  input    {text:?}\n  expected [{}]\n  got      [{}]",
                show(&tok, expected),
                show(&tok, &got)
            ));
        }
        if roundtrip {
            let back = tok.decode(&got);
            if &back != text {
                rt_failures.push(format!("  {text:?} → {back:?}"));
            }
        }
    }
    let passed = cases.len() - failures.len();
    eprintln!(
        "ggml-vocab-{name}: {passed}/{} cases match (load {load_ms:.1} ms, {} tokens)",
        cases.len(),
        tok.n_vocab()
    );
    assert!(
        failures.is_empty(),
        "ggml-vocab-{name}: {} of {} cases differ from llama.cpp; first ones:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        rt_failures.is_empty(),
        "ggml-vocab-{name}: decode(encode(x)) != x for {} inputs:\n{}",
        rt_failures.len(),
        rt_failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    (passed, cases.len())
}

macro_rules! vocab_test {
    ($fn:ident, $name:expr, $roundtrip:expr) => {
        #[test]
        fn $fn() {
            check_vocab($name, $roundtrip);
        }
    };
}

// byte-level BPE: the pieces are the input bytes, so decoding gives the input back
vocab_test!(vocab_qwen2, "qwen2", true);
vocab_test!(vocab_qwen35, "qwen35", true);
vocab_test!(vocab_llama_bpe, "llama-bpe", true);
vocab_test!(vocab_gpt_2, "gpt-2", true);
vocab_test!(vocab_starcoder, "starcoder", true);
vocab_test!(vocab_refact, "refact", true);
vocab_test!(vocab_command_r, "command-r", true);
vocab_test!(vocab_mpt, "mpt", true);
vocab_test!(vocab_falcon, "falcon", true);
vocab_test!(vocab_deepseek_coder, "deepseek-coder", true);
vocab_test!(vocab_deepseek_llm, "deepseek-llm", true);
// SentencePiece: the space prefix makes decode differ from the input
vocab_test!(vocab_llama_spm, "llama-spm", false);
vocab_test!(vocab_phi_3, "phi-3", false);
// gemma4: BPE over raw UTF-8 with ▁ for spaces
vocab_test!(vocab_gemma_4, "gemma-4", true);

// ---------------------------------------------------------------------------------------------
// real models

const SMOLLM: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA: &str = "models/gemma-3-270m-q4_k_m.gguf";

/// Prompts for the real models (no backslashes: llama-tokenize processes escapes).
const PROMPTS: &[&str] = &[
    "Hello world",
    " Hello, world! How are you?",
    "The quick brown fox jumps over the lazy dog.\n\nIt's 2024-05-17 and 1234567 people said \"hi\".",
    "    indented code:\n\tfn main() { println!(\"{}\", 42); }\n",
    "Ünïcödé: naïve café, 你好世界, こんにちは, Привет мир, 🦙🚀✅ and ★",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><|endoftext|> raw specials and <unk> too",
    "multiple   spaces\t\ttabs\r\nand CRLF   ",
];

#[test]
fn smollm2_metadata() {
    let tok = load(&fixture(SMOLLM));
    assert_eq!(tok.model_name(), "gpt2");
    assert_eq!(tok.pre_name(), "smollm");
    assert_eq!(tok.n_vocab(), 49152);
    assert_eq!(tok.bos(), Some(1));
    assert_eq!(tok.eos(), Some(2));
    assert!(!tok.add_bos());
    assert!(tok.is_eog(2), "<|im_end|> ends generation");
    assert!(tok.is_eog(0), "<|endoftext|> ends generation");
    assert!(!tok.is_eog(1));
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false, true);
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
    // without parse_special the markers are plain text
    let plain = tok.encode("<|im_start|>", false, false);
    assert!(plain.len() > 1);
    assert_eq!(tok.decode(&plain), "<|im_start|>");
    for p in PROMPTS {
        assert_eq!(tok.decode(&tok.encode(p, false, true)), *p);
    }
}

#[test]
fn gemma3_metadata() {
    let tok = load(&fixture(GEMMA));
    assert_eq!(tok.model_name(), "llama");
    assert_eq!(tok.bos(), Some(2));
    assert_eq!(tok.eos(), Some(1));
    assert!(tok.add_bos());
    assert!(!tok.add_space_prefix());
    let eot = tok
        .token_id("<end_of_turn>")
        .expect("<end_of_turn> in vocab");
    assert!(tok.is_eog(eot));
    assert!(tok.is_eog(1));
    let ids = tok.encode("Hello world", true, true);
    assert_eq!(ids[0], 2);
    assert_eq!(tok.decode(&ids[1..]), "Hello world");
}

/// CPU time of this thread in ms (Linux; 10 ms ticks), so that the check holds on a busy
/// machine.
fn thread_cpu_ms() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 * 10.0)
}

#[test]
fn load_time_large_vocab() {
    // qwen2: 151,936 tokens and 151,387 merges
    let path = fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    let g = GgufFile::open(&path).unwrap();
    let n = 5;
    let (c0, t0) = (thread_cpu_ms(), Instant::now());
    for _ in 0..n {
        let tok = Tokenizer::from_gguf(&g).unwrap();
        assert_eq!(tok.n_vocab(), 151936);
    }
    let wall = t0.elapsed().as_secs_f64() * 1e3 / n as f64;
    let cpu = thread_cpu_ms().zip(c0).map(|(c1, c0)| (c1 - c0) / n as f64);
    eprintln!("qwen2 vocab load: {wall:.1} ms wall, {cpu:?} ms cpu");
    // the merge table is built on first encode; loading must stay well under 100 ms
    let ms = cpu.unwrap_or(wall);
    assert!(
        ms < 100.0,
        "loading the qwen2 vocabulary took {ms:.0} ms of CPU"
    );
}

#[test]
fn stream_decoding_matches_decode() {
    use pocket_model::tokenizer::StreamDecoder;
    let tok = load(&fixture(GEMMA));
    let text = "Ünïcödé 🦙🚀 你好 <0xFF> done";
    let ids = tok.encode(text, false, false);
    let mut d = StreamDecoder::new();
    let mut s = String::new();
    for &id in &ids {
        let part = d.push(&tok, id, true);
        s.push_str(&part);
    }
    s.push_str(&d.finish());
    assert_eq!(s, tok.decode(&ids));
}

fn llama_tokenize_bin() -> PathBuf {
    let p = cache_dir().join("llama.cpp-build/bin/llama-tokenize");
    assert!(
        p.exists(),
        "{} is missing: build llama.cpp's llama-tokenize (the provisioning script builds it into \
         $POCKET_CACHE/llama.cpp-build) to compare pocket's tokenizer with it",
        p.display()
    );
    p
}

/// Token ids from `llama-tokenize` (BOS as the model wants).
fn llama_tokenize(bin: &Path, model: &Path, text: &str, parse_special: bool) -> Vec<u32> {
    // one file per call: the tests run in parallel threads of one process
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pocket-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("prompt-{n}.txt"));
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(bin)
        .arg("-m")
        .arg(model)
        .arg("-f")
        .arg(&file)
        .args(["--ids", "--log-disable", "--no-escape"])
        .args((!parse_special).then_some("--no-parse-special"))
        .output()
        .expect("run llama-tokenize");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "llama-tokenize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .unwrap_or_else(|| panic!("no id list in llama-tokenize output:\n{stdout}"));
    line.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().expect("token id"))
        .collect()
}

fn compare_with_llama_tokenize(model_rel: &str, prompts: &[&str], parse_special: bool) {
    let bin = llama_tokenize_bin();
    let model = fixture(model_rel);
    let tok = load(&model);
    let mut failures = Vec::new();
    for p in prompts {
        let expected = llama_tokenize(&bin, &model, p, parse_special);
        // llama-tokenize: common_tokenize(vocab, prompt, add_special = add_bos, parse_special)
        let got = tok.encode(p, tok.add_bos(), parse_special);
        failures.extend(mismatch(&tok, p, &expected, &got));
    }
    assert!(
        failures.is_empty(),
        "{model_rel} (parse_special = {parse_special}): {} of {} prompts differ from \
         llama-tokenize:\n{}",
        failures.len(),
        prompts.len(),
        failures.join("\n")
    );
}

/// The inputs of llama.cpp's qwen2 test vectors (varied scripts, spacing, digits, code).
fn vector_inputs() -> Vec<String> {
    let base = "llama.cpp/models/ggml-vocab-qwen2.gguf";
    read_tests(
        &fixture(&format!("{base}.inp")),
        &fixture(&format!("{base}.out")),
    )
    .into_iter()
    .map(|(s, _)| s)
    .collect()
}

/// All vector inputs in one `llama-tokenize` run (loading a vocabulary takes a second):
/// joined by the EOS text and parsed with `parse_special`, each input is tokenized on its
/// own, so the ids split at EOS give the per-input results.
fn compare_vector_inputs(model_rel: &str) {
    let bin = llama_tokenize_bin();
    let model = fixture(model_rel);
    let tok = load(&model);
    let eos = tok.eos().expect("model has EOS");
    let sep = tok.token_text(eos).unwrap().to_string();
    let inputs = vector_inputs();
    assert!(inputs.iter().all(|s| !s.contains(&sep)));
    let joined = inputs.join(&sep);
    let expected = llama_tokenize(&bin, &model, &joined, true);
    let got = tok.encode(&joined, tok.add_bos(), true);
    if got == expected {
        return;
    }
    let split = |ids: &[u32]| -> Vec<Vec<u32>> {
        let body = if tok.add_bos() { &ids[1..] } else { ids };
        body.split(|&id| id == eos).map(<[u32]>::to_vec).collect()
    };
    let (e, g) = (split(&expected), split(&got));
    let mut failures = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let (ei, gi) = (
            e.get(i).cloned().unwrap_or_default(),
            g.get(i).cloned().unwrap_or_default(),
        );
        failures.extend(mismatch(&tok, input, &ei, &gi));
    }
    panic!(
        "{model_rel}: tokens differ from llama-tokenize on the vector inputs:\n{}",
        failures.join("\n")
    );
}

fn compare_all(model_rel: &str) {
    compare_with_llama_tokenize(model_rel, PROMPTS, true);
    compare_with_llama_tokenize(model_rel, PROMPTS, false);
    compare_vector_inputs(model_rel);
}

#[test]
fn smollm2_matches_llama_tokenize() {
    compare_all(SMOLLM);
}

#[test]
fn gemma3_matches_llama_tokenize() {
    compare_all(GEMMA);
}

/// Pieces that stress the pre-tokenizers: every script class, digits of other systems,
/// combining marks, odd whitespace, contractions, byte-token look-alikes, partial specials.
const FUZZ_PIECES: &[&str] = &[
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\n\n",
    "\r",
    "a",
    "Hello",
    "WORLD",
    "'s",
    "'LL",
    "'",
    "'ve",
    "123",
    "4567890",
    "½",
    "٣٤",
    "²",
    "Ⅻ",
    "é",
    "e\u{301}",
    "ß",
    "Ä",
    "ǅ",
    "你好",
    "こんにちは",
    "한국어",
    "Привет",
    "ελληνικά",
    "עברית",
    "हिन्दी",
    "ไทย",
    "🦙",
    "😶‍🌫️",
    "✅",
    "▁",
    "<0x41>",
    "<|im_",
    "im_end|>",
    "<s",
    "/s>",
    "...",
    "!?",
    "—",
    "«»",
    "\u{a0}",
    "\u{3000}",
    "\u{200b}",
    "\u{feff}",
    "\u{1}",
    "$",
    "+",
    "<=>",
    "^~|`",
    "\\",
    "{}",
    "()",
    "0x1F",
    "\u{E000}",
    "\u{10FFFD}",
    "µ",
    "ﬁ",
    "Ａ",
    "１２",
    "・",
    "、",
    "。",
];

fn fuzz_inputs(n: usize, seed: u64) -> Vec<String> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let k = 1 + next() as usize % 12;
            (0..k)
                .map(|_| FUZZ_PIECES[next() as usize % FUZZ_PIECES.len()])
                .collect::<String>()
        })
        .collect()
}

/// Random mixed-script strings through pocket and llama-tokenize, on every vocabulary:
/// all in one run per vocabulary, joined by a control token (see `compare_vector_inputs`).
#[test]
fn fuzz_matches_llama_tokenize() {
    let bin = llama_tokenize_bin();
    let inputs = fuzz_inputs(300, 0x9E37_79B9_7F4A_7C15);
    let mut models: Vec<String> = [
        "qwen2",
        "qwen35",
        "llama-bpe",
        "gpt-2",
        "starcoder",
        "refact",
        "command-r",
        "mpt",
        "falcon",
        "deepseek-coder",
        "deepseek-llm",
        "llama-spm",
        "phi-3",
        "gemma-4",
    ]
    .iter()
    .map(|n| format!("llama.cpp/models/ggml-vocab-{n}.gguf"))
    .collect();
    models.push(SMOLLM.to_string());
    models.push(GEMMA.to_string());

    let mut report = Vec::new();
    for rel in &models {
        let model = fixture(rel);
        let tok = load(&model);
        // a control token to join the inputs with
        let sep = tok
            .eos()
            .into_iter()
            .chain(0..tok.n_vocab() as u32)
            .find(|&id| {
                tok.token_attr(id).unwrap() & pocket_model::tokenizer::attr::CONTROL != 0
                    && tok.token_text(id).unwrap().len() > 2
                    && inputs
                        .iter()
                        .all(|s| !s.contains(tok.token_text(id).unwrap()))
            })
            .expect("a control token");
        let joined = inputs.join(tok.token_text(sep).unwrap());
        let expected = llama_tokenize(&bin, &model, &joined, true);
        let got = tok.encode(&joined, tok.add_bos(), true);
        eprintln!(
            "{rel}: {} ids from llama-tokenize, {} from pocket, separator {:?}",
            expected.len(),
            got.len(),
            tok.token_text(sep).unwrap()
        );
        if got == expected {
            continue;
        }
        let split = |ids: &[u32]| -> Vec<Vec<u32>> {
            ids.split(|&id| id == sep).map(<[u32]>::to_vec).collect()
        };
        let (e, g) = (split(&expected), split(&got));
        let mut n_bad = 0;
        for (i, input) in inputs.iter().enumerate() {
            let (ei, gi) = (
                e.get(i).cloned().unwrap_or_default(),
                g.get(i).cloned().unwrap_or_default(),
            );
            if ei != gi {
                n_bad += 1;
                if n_bad <= 3 {
                    report.push(format!(
                        "{rel}\n  input    {input:?}\n  expected [{}]\n  got      [{}]",
                        show(&tok, &ei),
                        show(&tok, &gi)
                    ));
                }
            }
        }
        report.push(format!("{rel}: {n_bad} of {} inputs differ", inputs.len()));
    }
    assert!(
        report.is_empty(),
        "pocket differs from llama-tokenize:\n{}",
        report.join("\n")
    );
}
