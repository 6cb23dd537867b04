//! KV cache reuse and q8_0 caches on the real fixtures:
//! - chat-style prefix reuse (`Session::reuse_prefix`: truncate to the common prefix, prefill
//!   only the new suffix) gives bit-identical logits to a fresh prefill of the whole prompt;
//! - perplexity with a q8_0 KV cache (`-ctk q8_0 -ctv q8_0`) within 1% of the f16 cache's
//!   (`tests/data/ppl_text.txt`, 4 chunks of 256). Over the whole file (7 chunks) this
//!   measured SmolLM2 f16 13.3611 / q8_0 13.3743 (+0.10%), gemma3 11.9356 / 11.9682 (+0.27%).

use std::path::PathBuf;

use pocket_model::chat::{ChatMessage, ChatTemplate};
use pocket_model::gguf::GgufFile;
use pocket_model::perplexity::perplexity_with;
use pocket_model::{KvType, Model, Session, SessionOptions};

mod common;
use common::fixture;

fn opts(ty: KvType) -> SessionOptions {
    SessionOptions {
        n_ctx: 256,
        n_threads: 2,
        type_k: ty,
        type_v: ty,
        ..Default::default()
    }
}

/// Two chat turns rendered with the model's template: the second rendering shares the
/// first's tokens up to the end of the first reply.
fn turns(file: &GgufFile, m: &Model) -> (Vec<u32>, Vec<u32>) {
    let t = ChatTemplate::from_gguf(file, &m.tokenizer, None).unwrap();
    let mut msgs = vec![ChatMessage::new("user", "What is the capital of France?")];
    let first = t.render(&msgs, true).unwrap();
    msgs.push(ChatMessage::new(
        "assistant",
        "The capital of France is Paris.",
    ));
    msgs.push(ChatMessage::new("user", "And of Italy?"));
    let second = t.render(&msgs, true).unwrap();
    let enc = |s: &str| m.tokenizer.encode(s, true, true);
    // The first turn's cache: its prompt plus the reply's tokens plus a stale generated tail
    // that the second rendering does not share.
    let one = enc(&(first + "The capital of France is Paris. Paris is"));
    (one, enc(&second))
}

fn check_reuse(name: &str, ty: KvType) {
    let m = Model::load(fixture(&format!("models/{name}"))).unwrap();
    let (one, two) = turns(m.gguf(), &m);

    let mut s = Session::new(&m, opts(ty));
    s.prefill(&one).unwrap();
    assert_eq!(s.tokens(), &one[..]);
    let kept = s.reuse_prefix(&two);
    let common = one.iter().zip(&two).take_while(|(a, b)| a == b).count();
    assert_eq!(kept, common, "{name}: keeps the whole common prefix");
    assert!(
        kept > two.len() / 2 && kept < one.len(),
        "{name} {ty}: the turns share {kept} of {} tokens",
        two.len()
    );
    assert_eq!((s.pos(), s.tokens()), (kept, &two[..kept]));
    s.logits_all = true;
    let reused = s.prefill(&two[kept..]).unwrap().to_vec();

    let mut fresh = Session::new(&m, opts(ty));
    fresh.logits_all = true;
    let all = fresh.prefill(&two).unwrap().to_vec();
    let nv = m.config.n_vocab;
    let tail = &all[kept * nv..];
    assert_eq!(reused.len(), tail.len());
    let same = reused
        .iter()
        .zip(tail)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "{name} {ty}: logits after prefix reuse differ from a fresh prefill"
    );
    assert_eq!(s.tokens(), fresh.tokens());

    // Last row only (what `pocket chat` asks for; the last layer then runs that row alone),
    // from the same truncated cache, against a fresh prefill that does the same.
    s.logits_all = false;
    assert_eq!(s.reuse_prefix(&two), two.len() - 1);
    s.truncate(kept);
    let last = s.prefill(&two[kept..]).unwrap().to_vec();
    let mut fresh = Session::new(&m, opts(ty));
    let want = fresh.prefill(&two).unwrap();
    assert!(
        last.iter()
            .zip(want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{name} {ty}: last-row logits after reuse differ from a fresh prefill"
    );

    // Nothing in common: nothing is kept; the same prompt again: all but its last token
    // (whose logits are needed).
    assert_eq!(s.reuse_prefix(&[two[0] + 1]), 0);
    s.prefill(&two).unwrap();
    assert_eq!(s.reuse_prefix(&two), two.len() - 1);
    s.clear();
    assert!(s.tokens().is_empty() && s.pos() == 0);
}

#[test]
fn prefix_reuse_is_bit_identical_to_a_fresh_prefill_smollm2() {
    for ty in [KvType::F16, KvType::Q8_0] {
        check_reuse("SmolLM2-135M-Instruct.Q4_1.gguf", ty);
    }
}

#[test]
fn prefix_reuse_is_bit_identical_to_a_fresh_prefill_gemma3() {
    check_reuse("gemma-3-270m-q4_k_m.gguf", KvType::Q8_0);
}

fn text() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/ppl_text.txt");
    std::fs::read_to_string(p).unwrap()
}

fn check_ppl(name: &str) {
    let m = Model::load(fixture(&format!("models/{name}"))).unwrap();
    let text = text();
    let ppl = |k: KvType, v: KvType| {
        let o = SessionOptions {
            n_ctx: 256,
            type_k: k,
            type_v: v,
            ..opts(k)
        };
        perplexity_with(&m, &text, o, Some(4), |_, _| {})
            .unwrap()
            .ppl
    };
    let f16 = ppl(KvType::F16, KvType::F16);
    let q8 = ppl(KvType::Q8_0, KvType::Q8_0);
    let rel = (q8 - f16).abs() / f16;
    eprintln!(
        "{name}: PPL f16 KV {f16:.4}, q8_0 KV {q8:.4} ({:+.3}%)",
        (q8 - f16) / f16 * 100.0
    );
    assert!(
        rel < 0.01,
        "{name}: q8_0 KV cache PPL {q8:.4} vs f16 {f16:.4} ({:.2}%)",
        rel * 100.0
    );
}

#[test]
fn q8_0_cache_perplexity_within_1pct_of_f16_smollm2() {
    check_ppl("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn q8_0_cache_perplexity_within_1pct_of_f16_gemma3() {
    check_ppl("gemma-3-270m-q4_k_m.gguf");
}
