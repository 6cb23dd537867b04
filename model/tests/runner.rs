//! The forward pass end to end: config and weight errors on synthetic files, and on the
//! real fixtures prefill/decode consistency and the context-overflow error.

use pocket_kernels::GgmlType;
use pocket_model::gguf::{Gguf, GgufWriter, MetaValue};
use pocket_model::{
    config::ConfigError, weights, Config, Model, ModelError, Session, SessionOptions,
};

mod common;
use common::fixture;

fn tiny(arch: &str, with_tensors: bool, bad_shape: bool) -> Gguf<Vec<u8>> {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", MetaValue::String(arch.into()));
    let k = |s: &str| format!("{arch}.{s}");
    w.kv(k("block_count"), MetaValue::U32(1));
    w.kv(k("embedding_length"), MetaValue::U32(32));
    w.kv(k("feed_forward_length"), MetaValue::U32(64));
    w.kv(k("attention.head_count"), MetaValue::U32(2));
    w.kv(k("attention.head_count_kv"), MetaValue::U32(1));
    w.kv(k("vocab_size"), MetaValue::U32(8));
    if with_tensors {
        let v = if bad_shape { 9 } else { 8 };
        w.tensor(
            "token_embd.weight",
            GgmlType::F32,
            &[32, v],
            vec![0; 32 * v as usize * 4],
        )
        .unwrap();
    }
    Gguf::parse(w.to_bytes().unwrap()).unwrap()
}

#[test]
fn unknown_architecture_is_named() {
    let g = tiny("mamba9", false, false);
    let e = Config::from_gguf(&g).unwrap_err();
    assert!(matches!(e, ConfigError::UnknownArch(ref a) if a == "mamba9"));
    let msg = e.to_string();
    assert!(msg.contains("mamba9") && msg.contains("llama"), "{msg}");
}

#[test]
fn config_of_a_tiny_llama() {
    let g = tiny("llama", false, false);
    let c = Config::from_gguf(&g).unwrap();
    assert_eq!((c.head_dim, c.kv_dim(), c.group()), (16, 16, 2));
    assert_eq!(c.rope_type, pocket_model::config::RopeType::Normal);
    let g = tiny("qwen3", false, false);
    let c = Config::from_gguf(&g).unwrap();
    assert!(c.qk_norm && c.rope_type == pocket_model::config::RopeType::Neox);
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let g = tiny("llama", false, false);
    let c = Config::from_gguf(&g).unwrap();
    let e = weights::validate(&g, &c).unwrap_err().to_string();
    assert!(
        e.contains("token_embd.weight") && e.contains("missing"),
        "{e}"
    );
    let g = tiny("llama", true, true);
    let e = weights::validate(&g, &c).unwrap_err().to_string();
    assert!(
        e.contains("token_embd.weight") && e.contains("[32, 9]"),
        "{e}"
    );
    let g = tiny("llama", true, false);
    let e = weights::validate(&g, &c).unwrap_err().to_string();
    assert!(e.contains("output_norm.weight"), "{e}");
}

#[test]
fn gemma3_config_from_the_fixture() {
    let m = Model::load(fixture("models/gemma-3-270m-q4_k_m.gguf")).unwrap();
    let c = &m.config;
    assert_eq!(
        (c.n_layer, c.head_dim, c.n_head, c.n_head_kv),
        (18, 256, 4, 1)
    );
    assert_eq!(c.n_swa, 512);
    let globals: Vec<usize> = (0..18).filter(|&l| !c.swa_layers[l]).collect();
    assert_eq!(globals, vec![5, 11, 17]);
    assert_eq!((c.rope_base, c.rope_base_swa), (1e6, 1e4));
    assert!((c.embd_scale - 640f32.sqrt()).abs() < 1e-6);
    assert!((c.attn_scale - 1.0 / 16.0).abs() < 1e-7);
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn prefill_equals_token_by_token_decode_and_overflow_is_an_error() {
    let m = Model::load(fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let toks = m
        .tokenizer
        .encode("The quick brown fox jumps over the lazy dog", true, false);
    let o = SessionOptions {
        n_ctx: 64,
        n_threads: 2,
        ..Default::default()
    };
    let mut s = Session::new(&m, o);
    s.logits_all = true;
    let all = s.prefill(&toks).unwrap().to_vec();
    let nv = m.config.n_vocab;
    assert_eq!(all.len(), toks.len() * nv);
    let mut s1 = Session::new(&m, SessionOptions { n_threads: 1, ..o });
    for (i, &t) in toks.iter().enumerate() {
        let l = s1.decode(t).unwrap();
        let d = max_rel_diff(&all[i * nv..(i + 1) * nv], l);
        // batch and single-token kernels tile differently; activations are quantized the same
        assert!(d < 2e-3, "row {i}: relative difference {d}");
    }
    // overflow: refused before any work, the session still usable
    let long = vec![toks[1]; 65];
    let mut s2 = Session::new(&m, o);
    match s2.prefill(&long) {
        Err(ModelError::ContextFull {
            need: 65,
            n_ctx: 64,
        }) => {}
        other => panic!("expected ContextFull, got {:?}", other.map(|l| l.len())),
    }
    assert_eq!(s2.pos(), 0);
    s2.prefill(&toks).unwrap();
    assert_eq!(s2.pos(), toks.len());
}
