//! LoRA adapters on SmolLM2 (model/src/lora): a synthetic adapter loads and fits; every
//! way an adapter can be wrong is its own error; scale 0 is the base model bit for bit;
//! rows of different sequences in one batch each apply their own sequence's adapters (bit
//! for bit what they give alone); `--lora-merge` agrees with run-time application within
//! 2 % of perplexity. Parity with llama.cpp's `--lora`: tests/lora_cli.rs.

use std::sync::Arc;

use pocket_kernels::GgmlType;
use pocket_model::gguf::{Gguf, GgufWriter, MetaValue};
use pocket_model::lora::load::Base;
use pocket_model::lora::synth::{write_adapter, AdapterSpec};
use pocket_model::lora::{self, LoraAdapter, LoraError, LoraSet, Proj};
use pocket_model::{Batch, Model, Numerics, Session, SessionOptions};

mod common;
use common::{fixture, load_with_numerics, ShortPpl};

fn smollm2() -> std::path::PathBuf {
    fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn adapter_bytes(model: &Model, spec: &AdapterSpec) -> Vec<u8> {
    let mut v = Vec::new();
    write_adapter(model.gguf(), spec, &mut v).unwrap();
    v
}

fn read(model: &Model, bytes: Vec<u8>) -> Result<LoraAdapter, LoraError> {
    let g = Gguf::parse(bytes).map_err(|source| LoraError::Gguf {
        path: "mem".into(),
        source,
    })?;
    let base = Base {
        gguf: model.gguf(),
        n_layer: model.config.n_layer,
    };
    LoraAdapter::from_gguf(&g, "mem".into(), &base)
}

/// An adapter file by hand: metadata (general.type, architecture, adapter.type) and
/// f32 tensors of the given dims.
fn hand_made(kind: &str, arch: &str, adapter: &str, tensors: &[(&str, [u64; 2])]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.kv("general.type", MetaValue::String(kind.into()));
    w.kv("general.architecture", MetaValue::String(arch.into()));
    w.kv("adapter.type", MetaValue::String(adapter.into()));
    w.kv("adapter.lora.alpha", MetaValue::F32(8.0));
    for (name, dims) in tensors {
        let n = (dims[0] * dims[1]) as usize;
        let data: Vec<u8> = bytemuck::cast_slice(&vec![0.01f32; n]).to_vec();
        w.tensor(*name, GgmlType::F32, dims, data).unwrap();
    }
    w.to_bytes().unwrap()
}

#[test]
fn synthetic_adapter_loads_with_llama_cpp_scale() {
    let model = load_with_numerics(&smollm2(), Numerics::Fast);
    let spec = AdapterSpec {
        rank: 8,
        alpha: 16.0,
        ..Default::default()
    };
    let a = read(&model, adapter_bytes(&model, &spec)).unwrap();
    assert_eq!(a.n_pairs(), 7 * model.config.n_layer);
    assert_eq!(a.alpha, 16.0);
    let q = a.pair(0, Proj::Q).unwrap();
    assert_eq!((q.rank, q.n_in, q.n_out), (8, 576, 576));
    let down = a.pair(3, Proj::Down).unwrap();
    assert_eq!((down.n_in, down.n_out), (model.config.n_ff, 576));
    // llama.cpp: adapter_scale * alpha / rank.
    assert_eq!(a.scale_of(q, 0.5), 0.5 * 16.0 / 8.0);
}

#[test]
fn bad_adapters_are_typed_errors() {
    let model = load_with_numerics(&smollm2(), Numerics::Fast);
    let pair = [
        ("blk.0.attn_q.weight.lora_a", [576, 4]),
        ("blk.0.attn_q.weight.lora_b", [4, 576]),
    ];
    assert!(read(&model, hand_made("adapter", "llama", "lora", &pair)).is_ok());

    let e = read(&model, hand_made("model", "llama", "lora", &pair)).unwrap_err();
    assert!(
        matches!(e, LoraError::NotAdapter { ref got, .. } if got == "model"),
        "{e}"
    );
    let e = read(&model, hand_made("adapter", "qwen3", "lora", &pair)).unwrap_err();
    assert!(
        matches!(e, LoraError::Arch { ref adapter, ref model, .. } if adapter == "qwen3" && model == "llama"),
        "{e}"
    );
    let e = read(
        &model,
        hand_made("adapter", "llama", "control_vector", &pair),
    )
    .unwrap_err();
    assert!(matches!(e, LoraError::NotLora { .. }), "{e}");

    // (the adapter's tensors as (name, shape), which error it must give)
    type Case<'a> = (&'a [(&'a str, [u64; 2])], fn(&LoraError) -> bool);
    let cases: [Case; 6] = [
        // lora_a for a 100-wide input: another model.
        (
            &[
                ("blk.0.attn_q.weight.lora_a", [100, 4]),
                ("blk.0.attn_q.weight.lora_b", [4, 576]),
            ],
            |e| matches!(e, LoraError::Shape { .. }),
        ),
        // ranks that differ between A and B.
        (
            &[
                ("blk.0.attn_q.weight.lora_a", [576, 4]),
                ("blk.0.attn_q.weight.lora_b", [8, 576]),
            ],
            |e| matches!(e, LoraError::Shape { .. }),
        ),
        (&[("blk.0.attn_q.weight.lora_a", [576, 4])], |e| {
            matches!(
                e,
                LoraError::HalfPair {
                    missing: "lora_b",
                    ..
                }
            )
        }),
        (&[("blk.0.attn_q.weight", [576, 4])], |e| {
            matches!(e, LoraError::UnexpectedTensor { .. })
        }),
        (
            &[
                ("blk.99.attn_q.weight.lora_a", [576, 4]),
                ("blk.99.attn_q.weight.lora_b", [4, 576]),
            ],
            |e| matches!(e, LoraError::NotInBase { .. }),
        ),
        (
            &[
                ("token_embd.weight.lora_a", [576, 4]),
                ("token_embd.weight.lora_b", [4, 49152]),
            ],
            |e| matches!(e, LoraError::Unsupported { .. }),
        ),
    ];
    for (tensors, is) in cases {
        let e = read(&model, hand_made("adapter", "llama", "lora", tensors)).unwrap_err();
        assert!(is(&e), "{tensors:?}: {e}");
        eprintln!("{e}");
    }

    // A truncated file: the reader's bounds checks, through the file path.
    let dir = std::env::temp_dir().join(format!("pocket-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let full = adapter_bytes(&model, &AdapterSpec::default());
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let e = LoraAdapter::open_for(&cut, &model, lora::LoraForm::Int8).unwrap_err();
    assert!(matches!(e, LoraError::Gguf { .. }), "{e}");
    eprintln!("{e}");
    std::fs::remove_dir_all(&dir).ok();
}

fn logits(model: &Model, set: Option<LoraSet>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(
        model,
        SessionOptions {
            n_ctx: 64,
            n_threads: 2,
            ..Default::default()
        },
    );
    if let Some(set) = set {
        s.set_lora(set).unwrap();
    }
    s.logits_all = true;
    s.prefill(tokens).unwrap().to_vec()
}

fn adapter_for(model: &mut Model, spec: &AdapterSpec) -> Arc<LoraAdapter> {
    let a = Arc::new(read(model, adapter_bytes(model, spec)).unwrap());
    lora::prepare::prepare(model, &[&*a]).unwrap();
    a
}

const PROMPT: &str = "The capital of France is Paris, and the capital of Italy is";

fn mean_abs_diff(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).map(|(a, b)| (a - b).abs()).sum::<f32>() / x.len() as f32
}

/// Scale 0 is the base model bit for bit, in both numerics, and so is a model prepared for
/// an adapter (`lora::prepare`: the layers whose gate/up it adapts get a stacked gate/up
/// instead of the fused SwiGLU matrix) running without one: the element-wise SwiGLU after
/// a stacked gate/up is the fused kernel's own `silu·mul` (`matmul::swiglu_rows`). It once
/// was another `exp` polynomial, so `pocket serve --lora A` answered a request without
/// adapters with other bits than `pocket run` without `--lora` (tests/serve_lora.rs, a
/// near-tie that flipped once attention changed its rounding).
#[test]
fn scale_zero_is_the_base_model_exactly() {
    for numerics in [Numerics::Ggml, Numerics::Fast] {
        let base = load_with_numerics(&smollm2(), numerics);
        let tokens = base.tokenizer.encode(PROMPT, true, false);
        let want = logits(&base, None, &tokens);
        let mut m = load_with_numerics(&smollm2(), numerics);
        let a = adapter_for(&mut m, &AdapterSpec::default());
        let prepared = logits(&m, None, &tokens);
        let zero = logits(&m, Some(LoraSet::new(vec![(a.clone(), 0.0)])), &tokens);
        let one = logits(&m, Some(LoraSet::new(vec![(a, 1.0)])), &tokens);
        let (d0, d1) = (mean_abs_diff(&prepared, &want), mean_abs_diff(&one, &want));
        eprintln!("{numerics:?}: prepared vs base mean |Δ| {d0}, scale 1 vs base {d1}");
        assert!(
            zero == prepared,
            "{numerics:?}: scale 0 differs from no adapter"
        );
        assert!(
            d1 > 0.05,
            "{numerics:?}: the adapter at scale 1 barely moves the logits"
        );
        assert!(
            prepared == want,
            "{numerics:?}: preparing for an adapter changed the base model (mean |Δ| {d0})"
        );
    }
}

/// A server's view: a model prepared for two adapters, one sequence per adapter set (A
/// alone, B alone, none, A at 0 beside B) in one batch, then decode steps of all of them
/// together; every row's logits are those of a session of the unprepared model (no
/// adapter) or of a model prepared for that adapter alone (`pocket run --lora X`).
#[test]
fn a_server_batch_gives_each_sequence_the_bits_of_a_run_with_its_adapter() {
    let base = load_with_numerics(&smollm2(), Numerics::Fast);
    let spec_a = AdapterSpec::default();
    let spec_b = AdapterSpec {
        seed: 7,
        ..Default::default()
    };
    // `pocket run --lora A`, `--lora B`, and no adapter: each its own model.
    let mut run_a = load_with_numerics(&smollm2(), Numerics::Fast);
    let a1 = adapter_for(&mut run_a, &spec_a);
    let mut run_b = load_with_numerics(&smollm2(), Numerics::Fast);
    let b1 = adapter_for(&mut run_b, &spec_b);
    // `pocket serve --lora A --lora-scaled B:0`.
    let mut served = load_with_numerics(&smollm2(), Numerics::Fast);
    let (a, b) = (
        Arc::new(read(&served, adapter_bytes(&served, &spec_a)).unwrap()),
        Arc::new(read(&served, adapter_bytes(&served, &spec_b)).unwrap()),
    );
    lora::prepare::prepare(&mut served, &[&*a, &*b]).unwrap();
    let sets = [
        LoraSet::new(vec![(a.clone(), 1.0), (b.clone(), 0.0)]),
        LoraSet::new(vec![(a.clone(), 0.0), (b.clone(), 1.0)]),
        LoraSet::new(vec![(a.clone(), 0.0), (b.clone(), 0.0)]),
        LoraSet::default(),
    ];
    let alone: [(&Model, Option<LoraSet>); 4] = [
        (&run_a, Some(LoraSet::new(vec![(a1, 1.0)]))),
        (&run_b, Some(LoraSet::new(vec![(b1, 1.0)]))),
        (&base, None),
        (&base, None),
    ];
    let prompt = base.tokenizer.encode(PROMPT, true, false);
    let steps = [17u32, 260, 4209];
    let n = base.config.n_vocab;
    // Alone: the prompt, then one token a step.
    let want: Vec<Vec<f32>> = alone
        .iter()
        .map(|(m, set)| {
            let mut s = Session::new(
                m,
                SessionOptions {
                    n_ctx: 64,
                    n_threads: 2,
                    ..Default::default()
                },
            );
            if let Some(set) = set {
                s.set_lora(set.clone()).unwrap();
            }
            let mut v = s.prefill(&prompt).unwrap().to_vec();
            for &t in &steps {
                v.extend_from_slice(s.decode(t).unwrap());
            }
            v
        })
        .collect();
    let mut s = Session::new(
        &served,
        SessionOptions {
            n_ctx: 64,
            n_threads: 2,
            n_seq: sets.len(),
            ..Default::default()
        },
    );
    for (i, set) in sets.iter().enumerate() {
        s.set_seq_lora(i, set.clone()).unwrap();
    }
    let mut got = vec![Vec::new(); sets.len()];
    let mut batch = Batch::new();
    for i in 0..sets.len() {
        for (p, &tok) in prompt.iter().enumerate() {
            batch.add(tok, p, i, p + 1 == prompt.len());
        }
    }
    let out = s.forward_batch(&batch).unwrap().to_vec();
    for (i, row) in out.chunks_exact(n).enumerate() {
        got[i].extend_from_slice(row);
    }
    for (k, &t) in steps.iter().enumerate() {
        let mut batch = Batch::new();
        for i in 0..sets.len() {
            batch.add(t, prompt.len() + k, i, true);
        }
        let out = s.forward_batch(&batch).unwrap().to_vec();
        for (i, row) in out.chunks_exact(n).enumerate() {
            got[i].extend_from_slice(row);
        }
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len());
        for (step, (g, w)) in g.chunks_exact(n).zip(w.chunks_exact(n)).enumerate() {
            assert!(
                g == w,
                "sequence {i} (set {i}), step {step}: the served logits differ from alone \
                 (mean |Δ| {})",
                mean_abs_diff(g, w)
            );
        }
    }
}

#[test]
fn unprepared_fused_gate_up_is_refused() {
    let m = load_with_numerics(&smollm2(), Numerics::Fast);
    let a = Arc::new(read(&m, adapter_bytes(&m, &AdapterSpec::default())).unwrap());
    let mut s = Session::new(&m, SessionOptions::default());
    let e = s.set_lora(LoraSet::new(vec![(a, 1.0)])).unwrap_err();
    assert!(matches!(e, LoraError::Prepare { .. }), "{e}");
    // Attention-only adapters need nothing of the FFN.
    let attn = AdapterSpec {
        targets: vec![Proj::Q, Proj::K, Proj::V, Proj::Out],
        ..Default::default()
    };
    let a = Arc::new(read(&m, adapter_bytes(&m, &attn)).unwrap());
    s.set_lora(LoraSet::new(vec![(a, 1.0)])).unwrap();
}

#[test]
fn batched_sequences_apply_their_own_adapters() {
    let mut m = load_with_numerics(&smollm2(), Numerics::Fast);
    let a = adapter_for(&mut m, &AdapterSpec::default());
    let b = adapter_for(
        &mut m,
        &AdapterSpec {
            seed: 9,
            rank: 4,
            ..Default::default()
        },
    );
    let sets = [
        LoraSet::new(vec![(a.clone(), 1.0)]),
        LoraSet::default(),
        LoraSet::new(vec![(a, 0.5), (b, 1.0)]),
    ];
    let prompts = [
        "Hello there, how are",
        "Water boils at",
        "def fibonacci(n):",
    ];
    let toks: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| m.tokenizer.encode(p, true, false))
        .collect();
    let alone: Vec<Vec<f32>> = toks
        .iter()
        .zip(&sets)
        .map(|(t, s)| {
            let l = logits(&m, Some(s.clone()), t);
            l[l.len() - m.config.n_vocab..].to_vec()
        })
        .collect();
    let mut s = Session::new(
        &m,
        SessionOptions {
            n_ctx: 64,
            n_threads: 2,
            n_seq: 3,
            ..Default::default()
        },
    );
    for (i, set) in sets.iter().enumerate() {
        s.set_seq_lora(i, set.clone()).unwrap();
    }
    let mut batch = Batch::new();
    for (i, t) in toks.iter().enumerate() {
        for (p, &tok) in t.iter().enumerate() {
            batch.add(tok, p, i, p + 1 == t.len());
        }
    }
    let out = s.forward_batch(&batch).unwrap().to_vec();
    for (i, row) in out.chunks_exact(m.config.n_vocab).enumerate() {
        assert!(
            row == &alone[i][..],
            "sequence {i} differs from itself alone"
        );
    }
    assert!(alone[0] != alone[1] && alone[0] != alone[2]);
}

/// SmolLM2's perplexity (`-c 128`, 3 chunks) without the adapter `spec`, with it at run
/// time, and merged into the weights: the adapter moves it, and merged agrees with run time.
fn check_merge_agrees(spec: &AdapterSpec, tag: &str) {
    let ppl = ShortPpl::new();
    let dir = std::env::temp_dir().join(format!("pocket-lora-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a.gguf");
    let base = load_with_numerics(&smollm2(), Numerics::Fast);
    std::fs::write(&file, adapter_bytes(&base, spec)).unwrap();
    let ppl_base = ppl.of(&base);
    drop(base);
    let ppl_of = |merge: bool| {
        let mut m = load_with_numerics(&smollm2(), Numerics::Fast);
        lora::attach(&mut m, &[(file.clone(), 1.0)], merge).unwrap();
        assert_eq!(m.lora_default.is_empty(), merge);
        ppl.of(&m)
    };
    let (run_time, merged) = (ppl_of(false), ppl_of(true));
    std::fs::remove_dir_all(&dir).ok();
    let rel = (merged - run_time).abs() / run_time;
    eprintln!(
        "SmolLM2 Q4_1 + {tag} adapter: PPL base {ppl_base:.4}, run-time {run_time:.4}, merged {merged:.4} ({:.3}%)",
        rel * 100.0
    );
    assert!(
        (run_time - ppl_base).abs() / ppl_base > 0.02,
        "{tag}: the adapter barely moves perplexity"
    );
    assert!(
        (merged - ppl_base).abs() / ppl_base > 0.01,
        "{tag}: the merge barely moves perplexity"
    );
    // The merged matrices are Q8_0 (`lora::prepare::merged_type`): their rounding is far
    // below the Q4_1 base's, so merged and run-time application (bf16 A and B) agree to
    // within 2 %: measured 68.35 merged against 68.91 at run time (0.82 %) for the default
    // adapter. A Q4_1 requantization was 12.7 % off (77.6), a merge that dropped the update
    // would be 27 % off (base 50.6), one that scaled it by 0.9 was 6.1 % off (64.74:
    // checked by breaking the merge once).
    assert!(
        rel < 0.02,
        "{tag}: merged PPL {merged} vs run-time {run_time}"
    );
}

#[test]
fn merged_agrees_with_run_time_application() {
    check_merge_agrees(&AdapterSpec::default(), "rank-8");
}

// An adapter of Q and up only: K/V (fused with Q) and gate (packed with up) are converted to
// Q8_0 with them, unchanged otherwise (one packed matrix has one type; a mixed one would be
// refused); the other projections keep Q4_1.
#[test]
fn a_merge_of_some_projections_converts_their_packed_neighbours() {
    let spec = AdapterSpec {
        targets: vec![Proj::Q, Proj::Up],
        strength: 0.15,
        ..AdapterSpec::default()
    };
    check_merge_agrees(&spec, "Q-and-up");
}
