//! LoRA adapters in the fast path's int8 form (`LoraAdapter::to_int8`, what `lora::attach`
//! runs): batches of 2-7 tokens (whose products split by output panels, the adapters'
//! tail with them) give each row the bits it gets alone, one token at a time, for the f32,
//! bf16 and int8 forms; two sequences with different adapters in one 2-token step each get
//! their own; and int8 storage costs about what bf16's does in perplexity (against f32).

use std::sync::Arc;

use pocket_model::gguf::Gguf;
use pocket_model::lora::load::Base;
use pocket_model::lora::synth::{write_adapter, AdapterSpec};
use pocket_model::lora::{self, LoraAdapter, LoraSet};
use pocket_model::{Batch, Model, Numerics, Session, SessionOptions};

mod common;
use common::{fixture, load_with_numerics, ShortPpl};

fn smollm2() -> Model {
    load_with_numerics(
        &fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        Numerics::Fast,
    )
}

/// A synthetic adapter `spec` for `model` (f32, as read), the model prepared for it.
fn adapter(model: &mut Model, spec: &AdapterSpec) -> LoraAdapter {
    let a = read(model, spec);
    lora::prepare::prepare(model, &[&a]).unwrap();
    a
}

/// The adapter `spec` for `model` as read (f32).
fn read(model: &Model, spec: &AdapterSpec) -> LoraAdapter {
    let mut v = Vec::new();
    write_adapter(model.gguf(), spec, &mut v).unwrap();
    let g = Gguf::parse(v).unwrap();
    let base = Base {
        gguf: model.gguf(),
        n_layer: model.config.n_layer,
    };
    LoraAdapter::from_gguf(&g, "mem".into(), &base).unwrap()
}

fn session(model: &Model, n_seq: usize) -> Session<'_> {
    Session::new(
        model,
        SessionOptions {
            n_ctx: 64,
            n_threads: 2,
            n_seq,
            ..Default::default()
        },
    )
}

const PROMPT: &str = "The capital of France is Paris, and the capital of Italy is";

#[test]
fn few_token_batches_equal_one_token_at_a_time() {
    let mut m = smollm2();
    let f32_form = adapter(&mut m, &AdapterSpec::default());
    let forms = [
        ("bf16", Arc::new(f32_form.to_bf16())),
        ("int8", Arc::new(f32_form.to_int8())),
        ("f32", Arc::new(f32_form)),
    ];
    let tokens = m.tokenizer.encode(PROMPT, true, false);
    let n_vocab = m.config.n_vocab;
    for (tag, a) in &forms {
        let set = LoraSet::new(vec![(a.clone(), 1.0)]);
        // One token at a time.
        let mut s = session(&m, 1);
        s.set_lora(set.clone()).unwrap();
        let alone: Vec<Vec<f32>> = tokens[..9]
            .iter()
            .map(|&t| s.prefill(&[t]).unwrap().to_vec())
            .collect();
        // A first token alone, then the next n (2-7) as one batch.
        for n in 2..=7 {
            let mut s = session(&m, 1);
            s.set_lora(set.clone()).unwrap();
            s.logits_all = true;
            s.prefill(&tokens[..1]).unwrap();
            let rows = s.prefill(&tokens[1..1 + n]).unwrap().to_vec();
            for (i, row) in rows.chunks_exact(n_vocab).enumerate() {
                assert!(
                    row == &alone[1 + i][..],
                    "{tag}: row {i} of a {n}-token batch differs from one token at a time"
                );
            }
        }
    }
    // The forms differ (the test compares real work) but only by their rounding.
    let last = |a: &Arc<LoraAdapter>| {
        let mut s = session(&m, 1);
        s.set_lora(LoraSet::new(vec![(a.clone(), 1.0)])).unwrap();
        s.prefill(&tokens).unwrap().to_vec()
    };
    let (f, i) = (last(&forms[2].1), last(&forms[1].1));
    assert!(f != i);
}

/// A decode step of two sequences (a 2-token batch, split by panels) with different
/// adapters: each row is what its sequence gives alone.
#[test]
fn two_sequences_with_different_adapters_in_a_two_token_step() {
    let mut m = smollm2();
    let a = Arc::new(adapter(&mut m, &AdapterSpec::default()).to_int8());
    let spec_b = AdapterSpec {
        seed: 9,
        rank: 4,
        ..Default::default()
    };
    let b = Arc::new(adapter(&mut m, &spec_b).to_int8());
    let sets = [
        LoraSet::new(vec![(a.clone(), 1.0)]),
        LoraSet::new(vec![(a, 0.5), (b, 1.0)]),
    ];
    let toks = [
        m.tokenizer.encode("Hello there, how", true, false),
        m.tokenizer.encode("Water boils at", true, false),
    ];
    let n_vocab = m.config.n_vocab;
    let alone: Vec<Vec<f32>> = (0..2)
        .map(|i| {
            let mut s = session(&m, 1);
            s.set_lora(sets[i].clone()).unwrap();
            s.prefill(&toks[i]).unwrap().to_vec()
        })
        .collect();
    let mut s = session(&m, 2);
    for (i, set) in sets.iter().enumerate() {
        s.set_seq_lora(i, set.clone()).unwrap();
    }
    let n = toks[0].len().min(toks[1].len());
    let mut batch = Batch::new();
    for (i, t) in toks.iter().enumerate() {
        for (p, &tok) in t[..n - 1].iter().enumerate() {
            batch.add(tok, p, i, false);
        }
    }
    s.forward_batch(&batch).unwrap();
    // The prompts' rest, one token of each sequence per step.
    let longest = toks[0].len().max(toks[1].len());
    let mut last = vec![Vec::new(); 2];
    for p in n - 1..longest {
        let mut batch = Batch::new();
        let seqs: Vec<usize> = (0..2).filter(|&i| p < toks[i].len()).collect();
        for &i in &seqs {
            batch.add(toks[i][p], p, i, true);
        }
        let out = s.forward_batch(&batch).unwrap().to_vec();
        for (&i, row) in seqs.iter().zip(out.chunks_exact(n_vocab)) {
            last[i] = row.to_vec();
        }
    }
    for (i, (l, a)) in last.iter().zip(&alone).enumerate() {
        assert!(l == a, "sequence {i} differs from itself alone");
    }
}

/// Perplexity (SmolLM2 Q4_1, `-c 128`, 12 chunks) with the adapter in f32, bf16 and int8:
/// int8 storage moves it by far less than the adapter itself does. This bound is loose on
/// purpose (int8 within 1 % of f32 here): on a few chunks any rounding moves PPL by tenths
/// of a percent (on 3 chunks: bf16 0.46 % from f32 on the rank-8 adapter, and int8 0.02 %
/// before the online-softmax attention changed the rounding, 1.03 % after); the parity bar
/// against `llama-perplexity --lora` (0.5 %, the whole file) is `tests/lora_cli.rs`'s.
#[test]
fn int8_storage_costs_little_perplexity() {
    const CHUNKS: usize = 12;
    let short = ShortPpl::new();
    for (tag, spec) in [
        ("rank-8", AdapterSpec::default()),
        (
            "rank-16 seed 1",
            AdapterSpec {
                rank: 16,
                seed: 1,
                ..Default::default()
            },
        ),
    ] {
        let mut m = smollm2();
        let base = short.of_chunks(&m, CHUNKS);
        let a = adapter(&mut m, &spec);
        let (h, q) = (a.to_bf16(), a.to_int8());
        let mut ppl = |form: LoraAdapter| {
            m.lora_default = LoraSet::new(vec![(Arc::new(form), 1.0)]);
            short.of_chunks(&m, CHUNKS)
        };
        let (f, h, q) = (ppl(a), ppl(h), ppl(q));
        let rel = |x: f64, y: f64| (x - y).abs() / y * 100.0;
        eprintln!(
            "{tag}: PPL base {base:.4}, f32 {f:.4}, bf16 {h:.4}, int8 {q:.4} \
             (int8 vs f32 {:.3} %, bf16 vs f32 {:.3} %; adapter moves it {:.1} %)",
            rel(q, f),
            rel(h, f),
            rel(h, base)
        );
        assert!(rel(h, base) > 2.0, "{tag}: the adapter barely moves PPL");
        // Measured on 12 chunks: int8 0.10 % and 0.29 % from f32, bf16 0.01 % and 0.18 %:
        // int8's rounding is of bf16's order.
        assert!(rel(q, f) < 1.0, "{tag}: int8 {q} vs f32 {f}");
    }
}
