//! Speculative decoding on the real models: greedy text with n-gram drafts and with a
//! layer-truncated draft model is token for token the text of plain greedy decoding, over
//! prompts whose answers copy the input (drafts mostly kept) and prose (drafts mostly
//! rejected); sampling with a seed gives the same tokens as without speculation for every
//! seed (so the same distribution); the KV cache afterwards is the one plain decoding
//! builds (same tokens, bit-identical logits of the next step).

use std::path::PathBuf;

use pocket_model::generate::{generate, generate_with, GenParams, Generation};
use pocket_model::sampler::{Sampler, SamplerParams};
use pocket_model::speculative::{DraftModel, NgramDrafter, NgramSimple, SpecParams, Speculator};
use pocket_model::synth::truncate::truncate_layers;
use pocket_model::{Model, Session, SessionOptions};

mod common;
use common::fixture;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// Copy-heavy prompts first, then prose.
const PROMPTS: [&str; 3] = [
    "Repeat this list exactly.\nList: apples, pears, plums, cherries, grapes, lemons.\nRepeated list: apples, pears, plums, cherries, grapes, lemons.\nList: red, green, blue, yellow, black, white.\nRepeated list:",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The three most important inventions of the twentieth century are",
];
const N_PREDICT: usize = 32;

fn opts() -> SessionOptions {
    SessionOptions {
        n_ctx: 512,
        n_threads: 2,
        ..Default::default()
    }
}

fn greedy() -> Sampler {
    Sampler::new(SamplerParams {
        seed: Some(0),
        ..SamplerParams::greedy()
    })
}

fn params() -> GenParams {
    GenParams {
        n_predict: N_PREDICT,
        stop: Vec::new(),
        ..Default::default()
    }
}

/// Plain generation, then the session's logits for one more token (the cache's content).
fn plain(m: &Model, prompt: &[u32], sampler: &mut Sampler) -> (Generation, Vec<u32>) {
    let mut s = Session::new(m, opts());
    let g = generate(&mut s, sampler, prompt, &params(), |_| true).unwrap();
    (g, next_logits(&mut s))
}

fn next_logits(s: &mut Session) -> Vec<u32> {
    s.decode(0).unwrap().iter().map(|x| x.to_bits()).collect()
}

fn speculative(
    m: &Model,
    prompt: &[u32],
    sampler: &mut Sampler,
    spec: &mut Speculator,
) -> (Generation, Vec<u32>) {
    let mut s = Session::new(m, opts());
    let g = generate_with(&mut s, sampler, Some(spec), prompt, &params(), |_| true).unwrap();
    (g, next_logits(&mut s))
}

/// An n-gram speculator with keys from `size_n` tokens down to `min_n`, copying up to 16.
fn ngram_keys(size_n: usize, min_n: usize) -> Speculator<'static> {
    let ng = NgramSimple {
        size_n,
        size_m: 16,
        min_n,
        resync: 8,
    };
    Speculator::new(Box::new(NgramDrafter::new(ng)), SpecParams::default())
}

fn ngram() -> Speculator<'static> {
    ngram_keys(3, 3)
}

/// Keys from 8 tokens down to 1 (pocket's shorter-key fallback at its most eager): drafts
/// on nearly every step, many of them rejected.
fn ngram_down_to_one() -> Speculator<'static> {
    ngram_keys(8, 1)
}

/// `name` cut to its first `keep` layers, written once per test binary.
fn truncated(name: &str, keep: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pocket-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.first{keep}.gguf"));
    if !path.exists() {
        let src = pocket_model::gguf::GgufFile::open(fixture(&format!("models/{name}"))).unwrap();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        truncate_layers(&src, keep, &mut f).unwrap();
    }
    path
}

fn check_greedy(name: &str, draft_layers: usize) {
    let m = Model::load(fixture(&format!("models/{name}"))).unwrap();
    let draft = Model::load(truncated(name, draft_layers)).unwrap();
    assert_eq!(draft.config.n_layer, draft_layers);
    let mut by_kind = [(0, 0); 3]; // (drafted, accepted) of ngram, ngram 8..1, draft model
    for (i, text) in PROMPTS.iter().enumerate() {
        let prompt = m.tokenizer.encode(text, true, false);
        let (want, want_cache) = plain(&m, &prompt, &mut greedy());
        assert!(!want.tokens.is_empty());
        let mut ng = ngram();
        let mut ng_short = ngram_down_to_one();
        let ds = Session::new(&draft, opts());
        let mut dm = Speculator::new(
            Box::new(DraftModel::new(ds, &m).unwrap()),
            SpecParams::default(),
        );
        for (k, spec) in [&mut ng, &mut ng_short, &mut dm].into_iter().enumerate() {
            let (got, got_cache) = speculative(&m, &prompt, &mut greedy(), spec);
            assert_eq!(
                got.tokens, want.tokens,
                "{name} prompt {i} kind {k}: speculative greedy differs from plain"
            );
            assert_eq!(got.text, want.text);
            assert!(
                got_cache == want_cache,
                "{name} prompt {i} kind {k}: the KV cache differs from plain decoding's"
            );
            by_kind[k].0 += got.spec.drafted;
            by_kind[k].1 += got.spec.accepted;
            eprintln!(
                "{name} prompt {i} kind {k}: drafted {} accepted {} in {} verify steps",
                got.spec.drafted, got.spec.accepted, got.spec.verify_steps
            );
        }
    }
    // Both paths of verification ran: drafts kept and drafts rejected.
    for (k, (drafted, accepted)) in by_kind.into_iter().enumerate() {
        assert!(
            accepted > 0 && accepted < drafted,
            "{name} kind {k}: {accepted} of {drafted} drafts kept; the test must see both"
        );
    }
}

#[test]
fn speculative_greedy_equals_plain_greedy_smollm2() {
    check_greedy(SMOLLM2, 24); // of 30
}

#[test]
fn speculative_greedy_equals_plain_greedy_gemma3() {
    check_greedy(GEMMA3, 14); // of 18
}

/// With a temperature, every seed gives the same tokens with and without speculation: the
/// kept tokens are the target's own samples, one draw each, so the distribution of the
/// output is exactly the target's.
#[test]
fn sampling_with_speculation_matches_plain_for_every_seed() {
    let m = Model::load(fixture(&format!("models/{SMOLLM2}"))).unwrap();
    let prompt = m.tokenizer.encode(PROMPTS[0], true, false);
    let mut diverse = std::collections::HashSet::new();
    let mut drafted = 0;
    for seed in 0..16 {
        let sampler = || {
            Sampler::new(SamplerParams {
                temp: 1.0,
                seed: Some(seed),
                ..Default::default()
            })
        };
        let (want, _) = plain(&m, &prompt, &mut sampler());
        let mut ng = ngram();
        let (got, _) = speculative(&m, &prompt, &mut sampler(), &mut ng);
        assert_eq!(got.tokens, want.tokens, "seed {seed}");
        drafted += got.spec.drafted;
        diverse.insert(want.tokens);
    }
    assert!(drafted > 0, "no drafts were verified");
    assert!(diverse.len() > 4, "the seeds must sample different texts");
}
