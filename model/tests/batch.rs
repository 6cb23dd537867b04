//! The batch API on the real models: a sequence's logits are bit for bit the same whether it
//! runs alone or batched with others (prompts of different lengths in one batch, then
//! decode steps of all sequences in one batch, then prompt rows of one sequence beside
//! decode rows of the others, as continuous batching does); `fork_seq` + `truncate_seq`
//! give the logits of a fresh prefill; bad rows are errors before any work. The batching
//! checks run in both numerics (pocket's kernels and the ggml twins).

use pocket_model::{Batch, LoadOptions, Model, ModelError, Numerics, Session, SessionOptions};

mod common;
use common::fixture;
use pocket_model::sample_basic::argmax;

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time, in a small village at the edge of a dark forest, there lived",
    "def fibonacci(n):",
    "Q: What is 2 + 2?\nA:",
];
const STEPS: usize = 4;

fn opts(n_seq: usize) -> SessionOptions {
    SessionOptions {
        n_ctx: 128,
        n_threads: 2,
        n_seq,
        ..Default::default()
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// One sequence alone: every prompt row's logits, then `STEPS` greedy decode steps'.
fn alone(m: &Model, prompt: &[u32]) -> (Vec<Vec<u32>>, Vec<u32>) {
    let mut s = Session::new(m, opts(1));
    s.logits_all = true;
    let v = m.config.n_vocab;
    let all = s.prefill(prompt).unwrap().to_vec();
    let mut rows: Vec<Vec<u32>> = all.chunks_exact(v).map(bits).collect();
    let mut next = argmax(&all[all.len() - v..]);
    let mut gen = Vec::new();
    for _ in 0..STEPS {
        gen.push(next);
        let l = s.decode(next).unwrap();
        rows.push(bits(l));
        next = argmax(l);
    }
    (rows, gen)
}

fn load(name: &str, numerics: Numerics) -> Model {
    let o = LoadOptions {
        numerics,
        ..Default::default()
    };
    Model::load_with(fixture(&format!("models/{name}")), o).unwrap()
}

fn check_model(name: &str) {
    let m = load(name, Numerics::Fast);
    check_batching(&m, name);
    check_fork_truncate(&m, name);
}

/// Prompts of different lengths in one batch, decode steps of all sequences in one batch,
/// and continuous batching: every row bit-identical to its sequence alone.
fn check_batching(m: &Model, name: &str) {
    let v = m.config.n_vocab;
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| m.tokenizer.encode(p, true, false))
        .collect();
    let runs: Vec<_> = prompts.iter().map(|p| alone(m, p)).collect();

    // All four prompts in one batch, every row's logits; then the decode steps of all four
    // in one batch per step.
    let mut s = Session::new(m, opts(4));
    let mut b = Batch::new();
    for (seq, p) in prompts.iter().enumerate() {
        for (i, &t) in p.iter().enumerate() {
            b.add(t, i, seq, true);
        }
    }
    let out = s.forward_batch(&b).unwrap().to_vec();
    let mut got: Vec<Vec<Vec<u32>>> = vec![Vec::new(); 4];
    for (row, l) in b.rows.iter().zip(out.chunks_exact(v)) {
        got[row.seq].push(bits(l));
    }
    for step in 0..STEPS {
        b.clear();
        for (seq, p) in prompts.iter().enumerate() {
            b.add(runs[seq].1[step], p.len() + step, seq, true);
        }
        let out = s.forward_batch(&b).unwrap();
        for (seq, l) in out.chunks_exact(v).enumerate() {
            got[seq].push(bits(l));
        }
    }
    for seq in 0..4 {
        assert_eq!(got[seq].len(), runs[seq].0.len());
        for (i, (a, b)) in got[seq].iter().zip(&runs[seq].0).enumerate() {
            assert!(
                a == b,
                "{name}: sequence {seq} row {i} differs batched from alone"
            );
        }
    }

    // Continuous batching: sequence 3's prompt arrives while 0..3 decode; logits only for
    // the last prompt row and the decode rows.
    let mut s = Session::new(m, opts(4));
    for (seq, prompt) in prompts.iter().enumerate().take(3) {
        let b = Batch::sequence(prompt, 0, seq, 0..0);
        s.forward_batch(&b).unwrap();
    }
    let mut b = Batch::new();
    b.add(runs[0].1[0], prompts[0].len(), 0, true);
    let p3 = &prompts[3];
    for (i, &t) in p3.iter().enumerate() {
        b.add(t, i, 3, i + 1 == p3.len());
    }
    b.add(runs[1].1[0], prompts[1].len(), 1, true);
    b.add(runs[2].1[0], prompts[2].len(), 2, true);
    let out = s.forward_batch(&b).unwrap();
    let expect = [
        &runs[0].0[prompts[0].len()],
        &runs[3].0[p3.len() - 1],
        &runs[1].0[prompts[1].len()],
        &runs[2].0[prompts[2].len()],
    ];
    for (j, (l, e)) in out.chunks_exact(v).zip(expect).enumerate() {
        assert!(
            bits(l) == *e,
            "{name}: continuous batch logit row {j} differs from alone"
        );
    }
}

/// fork + truncate: sequence 1 takes the first k tokens of sequence 0, then goes on with
/// other tokens; the logits equal a fresh prefill of the same tokens. (Fast numerics only:
/// ggml's arithmetic for a row depends on the ubatch it came in, as in llama.cpp, so a
/// prefix evaluated in another ubatch is not bit-identical there by design.)
fn check_fork_truncate(m: &Model, name: &str) {
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| m.tokenizer.encode(p, true, false))
        .collect();
    let long = &prompts[1];
    let k = 6;
    let tail = &prompts[2][1..];
    let mut s = Session::new(m, opts(2));
    s.forward_batch(&Batch::sequence(long, 0, 0, 0..0)).unwrap();
    s.fork_seq(0, 1, k).unwrap();
    assert_eq!(s.seq_tokens(1), &long[..k]);
    let forked = bits(
        s.forward_batch(&Batch::sequence(tail, k, 1, tail.len() - 1..tail.len()))
            .unwrap(),
    );
    s.truncate_seq(0, k);
    let truncated = bits(
        s.forward_batch(&Batch::sequence(tail, k, 0, tail.len() - 1..tail.len()))
            .unwrap(),
    );
    let mut fresh = Session::new(m, opts(1));
    let whole: Vec<u32> = long[..k].iter().chain(tail).copied().collect();
    let fresh = bits(fresh.prefill(&whole).unwrap());
    assert!(
        forked == fresh,
        "{name}: fork + continue differs from a fresh prefill"
    );
    assert!(
        truncated == fresh,
        "{name}: truncate + continue differs from a fresh prefill"
    );
}

#[test]
fn batched_sequences_are_bit_identical_to_alone_smollm2() {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn batched_sequences_are_bit_identical_to_alone_gemma3() {
    check_model("gemma-3-270m-q4_k_m.gguf");
}

/// Past 512 cached keys a one-token step splits each KV head's keys between the threads
/// at segment boundaries and merges them in order (prefill does not split): decode rows
/// of a long cache equal the same tokens' prompt rows bit for bit (SmolLM2: 3 KV heads;
/// gemma3: one, and sliding windows of 512 that start inside a segment).
fn check_long_cache_decode(name: &str) {
    let m = load(name, Numerics::Fast);
    let v = m.config.n_vocab;
    let text = PROMPTS.join(" ").repeat(40);
    let mut toks = m.tokenizer.encode(&text, true, false);
    toks.truncate(1100);
    assert_eq!(toks.len(), 1100, "{name}: the text is long enough");
    let o = SessionOptions {
        n_ctx: 1152,
        ..opts(1)
    };
    let mut whole = Session::new(&m, o);
    whole.logits_all = true;
    let want: Vec<Vec<u32>> = whole
        .prefill(&toks)
        .unwrap()
        .chunks_exact(v)
        .map(bits)
        .collect();
    let mut s = Session::new(&m, o);
    s.prefill(&toks[..1090]).unwrap();
    for (i, &t) in toks.iter().enumerate().skip(1090) {
        let got = bits(s.decode(t).unwrap());
        assert!(
            got == want[i],
            "{name}: decode of position {i} differs from its prompt row"
        );
    }
}

#[test]
fn long_cache_decode_equals_prompt_rows_smollm2() {
    check_long_cache_decode("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn long_cache_decode_equals_prompt_rows_gemma3() {
    check_long_cache_decode("gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn bad_rows_are_errors_before_any_work() {
    let m = Model::load(fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let mut s = Session::new(&m, opts(2));
    let mut b = Batch::new();
    b.add(1, 0, 0, true).add(2, 0, 2, true);
    assert!(matches!(
        s.forward_batch(&b),
        Err(ModelError::BadSeq { row: 1, seq: 2, .. })
    ));
    b.clear();
    b.add(1, 0, 0, false).add(2, 2, 0, true);
    let e = s.forward_batch(&b).unwrap_err();
    assert!(
        matches!(
            e,
            ModelError::BadPos {
                row: 1,
                pos: 2,
                next: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("truncate"), "{e}");
    b.clear();
    b.add(u32::MAX, 0, 1, true);
    assert!(matches!(s.forward_batch(&b), Err(ModelError::BadToken(..))));
    b.clear();
    for i in 0..129 {
        b.add(1, i, 1, false);
    }
    assert!(matches!(
        s.forward_batch(&b),
        Err(ModelError::ContextFull { need: 129, .. })
    ));
    assert!(matches!(
        s.forward_batch(&Batch::new()),
        Err(ModelError::Empty)
    ));
    assert_eq!((s.seq_len(0), s.seq_len(1)), (0, 0), "nothing evaluated");
    assert!(s.fork_seq(0, 5, 1).is_err());
}

/// The twins of llama.cpp's kernels: a batch of four sequences gives each sequence's
/// logits bit for bit as alone (each sequence's rows run as their own ubatch).
#[test]
fn ggml_numerics_batched_sequences_are_bit_identical_to_alone() {
    let name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    check_batching(
        &load(name, Numerics::Ggml),
        &format!("{name} (ggml numerics)"),
    );
}
