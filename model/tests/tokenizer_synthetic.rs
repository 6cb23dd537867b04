//! The tokenizer on small GGUFs written here: error messages, special-token handling, and
//! decoding, without any fixture.

use pocket_model::gguf::Gguf;
use pocket_model::tokenizer::{attr, StreamDecoder, Tokenizer, TokenizerError};

enum V<'a> {
    Str(&'a str),
    Bool(bool),
    U32(u32),
    Strs(&'a [&'a str]),
    I32s(&'a [i32]),
    F32s(&'a [f32]),
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// An array value's type (9), then its element type `elem` and length `len`.
fn put_array_header(b: &mut Vec<u8>, elem: u32, len: usize) {
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&elem.to_le_bytes());
    b.extend_from_slice(&(len as u64).to_le_bytes());
}

/// A metadata-only GGUF v3.
fn gguf(kvs: &[(&str, V)]) -> Gguf<Vec<u8>> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut b, k);
        match v {
            V::Str(s) => {
                b.extend_from_slice(&8u32.to_le_bytes());
                put_str(&mut b, s);
            }
            V::Bool(x) => {
                b.extend_from_slice(&7u32.to_le_bytes());
                b.push(*x as u8);
            }
            V::U32(x) => {
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&x.to_le_bytes());
            }
            V::Strs(a) => {
                put_array_header(&mut b, 8, a.len());
                for s in *a {
                    put_str(&mut b, s);
                }
            }
            V::I32s(a) => {
                put_array_header(&mut b, 5, a.len());
                b.extend(a.iter().flat_map(|x| x.to_le_bytes()));
            }
            V::F32s(a) => {
                put_array_header(&mut b, 6, a.len());
                b.extend(a.iter().flat_map(|x| x.to_le_bytes()));
            }
        }
    }
    Gguf::parse(b).expect("valid GGUF")
}

fn err(kvs: &[(&str, V)]) -> String {
    match Tokenizer::from_gguf(&gguf(kvs)) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn errors_name_the_problem() {
    let e = err(&[]);
    assert!(e.contains("tokenizer.ggml.model"), "{e}");

    let e = err(&[("tokenizer.ggml.model", V::Str("rwkv"))]);
    assert!(e.contains("'rwkv'"), "{e}");

    let e = err(&[
        ("tokenizer.ggml.model", V::Str("gpt2")),
        ("tokenizer.ggml.pre", V::Str("tekken")),
    ]);
    assert!(e.contains("pre-tokenizer 'tekken'"), "{e}");

    let e = err(&[
        ("tokenizer.ggml.model", V::Str("gpt2")),
        ("tokenizer.ggml.pre", V::Str("gpt-2")),
        ("tokenizer.ggml.tokens", V::Strs(&["a", "b", "ab"])),
    ]);
    assert!(e.contains("tokenizer.ggml.merges"), "{e}");

    let e = err(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Str("oops")),
    ]);
    assert!(
        e.contains("tokenizer.ggml.tokens") && e.contains("array of strings"),
        "{e}"
    );

    let e = err(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(&["a", "b"])),
        ("tokenizer.ggml.scores", V::F32s(&[0.0])),
    ]);
    assert!(e.contains("tokenizer.ggml.scores"), "{e}");

    assert!(matches!(
        Tokenizer::from_gguf(&gguf(&[("tokenizer.ggml.model", V::Str("bert"))])),
        Err(TokenizerError::UnknownModel(m)) if m == "bert"
    ));
}

/// A small SPM vocabulary: <unk> <s> </s>, a control and a user-defined token, bytes,
/// pieces with scores.
fn tiny_spm(extra: &[(&str, V)]) -> Tokenizer {
    let mut tokens = vec!["<unk>", "<s>", "</s>", "<|ctl|>", "<user>"];
    let mut types = vec![2, 3, 3, 3, 4];
    let hex: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
    for h in &hex {
        tokens.push(h);
        types.push(6);
    }
    for t in [
        "▁", "h", "e", "l", "o", "he", "ll", "llo", "▁hello", "hello", "▁h", "▁he", "w",
    ] {
        tokens.push(t);
        types.push(1);
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32) / 10.0).collect();
    let mut kvs = vec![
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(&tokens)),
        ("tokenizer.ggml.token_type", V::I32s(&types)),
        ("tokenizer.ggml.scores", V::F32s(&scores)),
        ("tokenizer.ggml.bos_token_id", V::U32(1)),
        ("tokenizer.ggml.eos_token_id", V::U32(2)),
    ];
    kvs.extend(extra.iter().map(|(k, v)| {
        (
            *k,
            match v {
                V::Bool(b) => V::Bool(*b),
                V::Str(s) => V::Str(s),
                V::U32(x) => V::U32(*x),
                _ => unreachable!(),
            },
        )
    }));
    Tokenizer::from_gguf(&gguf(&kvs)).unwrap()
}

#[test]
fn spm_special_tokens_and_bytes() {
    let tok = tiny_spm(&[]);
    let id = |t: &str| tok.token_id(t).unwrap();
    assert!(tok.add_bos() && tok.add_space_prefix());
    assert_eq!(tok.encode("", true, false), [1]);
    assert_eq!(tok.encode("hello", false, false), [id("▁hello")]);
    assert_eq!(tok.encode("hello", true, false), [1, id("▁hello")]);

    // control tokens only with parse_special; user-defined ones always
    let ctl = tok.encode("hello<|ctl|>hello", false, true);
    assert_eq!(ctl, [id("▁hello"), 3, id("▁hello")]);
    let plain = tok.encode("<user>hello", false, false);
    assert_eq!(plain, [4, id("▁hello")]);
    let no_parse = tok.encode("<|ctl|>", false, false);
    assert!(!no_parse.contains(&3));

    // unknown characters fall back to bytes
    let ids = tok.encode("hé", false, false);
    assert_eq!(ids, [id("▁h"), id("<0xC3>"), id("<0xA9>")]);
    assert_eq!(tok.decode(&ids), " hé");
    assert_eq!(tok.detokenize(&ids, false, false), "hé".as_bytes());

    // pieces: control text only with special
    let mut v = Vec::new();
    tok.piece_into(3, false, &mut v);
    assert!(v.is_empty());
    assert_eq!(tok.token_to_piece(3), b"<|ctl|>");
    assert_eq!(tok.token_to_piece(id("<0x41>")), b"A");
    assert_eq!(tok.token_attr(id("<0x41>")), Some(attr::BYTE));

    // EOS ends generation; BOS does not
    assert!(tok.is_eog(2) && !tok.is_eog(1));

    // streaming holds the half of é
    let mut d = StreamDecoder::new();
    let parts: Vec<String> = ids.iter().map(|&i| d.push(&tok, i, true)).collect();
    assert_eq!(parts, [" h", "", "é"]);
}

#[test]
fn spm_metadata_flags() {
    let tok = tiny_spm(&[
        ("tokenizer.ggml.add_space_prefix", V::Bool(false)),
        ("tokenizer.ggml.add_bos_token", V::Bool(false)),
        ("tokenizer.ggml.add_eos_token", V::Bool(true)),
    ]);
    let id = |t: &str| tok.token_id(t).unwrap();
    assert_eq!(tok.encode("hello", true, false), [id("hello"), 2]);
    assert_eq!(
        tok.detokenize(&tok.encode("hello", true, false), true, false),
        b"hello"
    );
}

#[test]
fn bpe_byte_level_merges() {
    // GPT-2 byte characters: ' ' is 'Ġ'
    let tokens = [
        "<|endoftext|>",
        "h",
        "i",
        "Ġ",
        "hi",
        "Ġhi",
        "!",
        "<|im_end|>",
    ];
    let merges = ["h i", "Ġ hi"];
    let tok = Tokenizer::from_gguf(&gguf(&[
        ("tokenizer.ggml.model", V::Str("gpt2")),
        ("tokenizer.ggml.pre", V::Str("gpt-2")),
        ("tokenizer.ggml.tokens", V::Strs(&tokens)),
        ("tokenizer.ggml.merges", V::Strs(&merges)),
        (
            "tokenizer.ggml.token_type",
            V::I32s(&[3, 1, 1, 1, 1, 1, 1, 3]),
        ),
    ]))
    .unwrap();
    assert_eq!(tok.encode("hi hi!", false, false), [4, 5, 6]);
    assert_eq!(tok.decode(&[4, 5, 6]), "hi hi!");
    assert_eq!(tok.encode("hi<|im_end|>", false, true), [4, 7]);
    // both are recognised end-of-generation tokens
    assert!(tok.is_eog(0) && tok.is_eog(7));
    assert_eq!(tok.eot(), Some(7), "<|im_end|> is preferred as end of turn");
}
