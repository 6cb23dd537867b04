//! Grammar-constrained generation on SmolLM2, checked by paths that are not the
//! constraint's own: every grammar of llama.cpp's `grammars/` compiles and what SmolLM2
//! generates under it is accepted by llama.cpp's own GBNF parser (its
//! `tests/test-gbnf-validator.cpp`, built here against the reference build's libraries)
//! and, for the JSON grammars, parses with serde_json; JSON-schema output for
//! review-extraction prompts validates with the `jsonschema` crate; a choice grammar
//! restricts the output to its choices; with speculative decoding the constrained text is
//! the same as without.

use std::path::{Path, PathBuf};
use std::process::Command;

use pocket_model::chat::{ChatMessage, ChatTemplate};
use pocket_model::generate::{generate, generate_with, GenParams, Generation, StopReason};
use pocket_model::grammar::{GrammarSpec, GrammarVocab};
use pocket_model::sampler::{Sampler, SamplerParams};
use pocket_model::speculative::{NgramDrafter, NgramSimple, SpecParams, Speculator};
use pocket_model::{Model, Session, SessionOptions};

mod common;
use common::{cache_dir, files_with_ext, fixture};

fn smollm2() -> Model {
    Model::load_with(
        fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        Default::default(),
    )
    .unwrap()
}

fn session(m: &Model) -> Session<'_> {
    Session::new(
        m,
        SessionOptions {
            n_ctx: 1024,
            n_threads: 2,
            ..Default::default()
        },
    )
}

/// The chat-formatted prompt of one user message.
fn chat_prompt(m: &Model, user: &str) -> Vec<u32> {
    let tmpl = ChatTemplate::from_gguf(m.gguf(), &m.tokenizer, None).unwrap();
    let text = tmpl
        .render(&[ChatMessage::new("user", user)], true)
        .unwrap();
    m.tokenizer.encode(&text, true, true)
}

/// Greedy generation of at most `n` tokens under `spec`.
fn constrained(
    m: &Model,
    vocab: &GrammarVocab,
    spec: &GrammarSpec,
    prompt: &[u32],
    n: usize,
) -> Generation {
    let grammar = vocab.compile(spec).unwrap_or_else(|e| panic!("{e}"));
    let mut sampler = Sampler::new(SamplerParams::greedy());
    sampler.set_constraint(Some(grammar.constraint()));
    let p = GenParams {
        n_predict: n,
        stop: Vec::new(),
        ..Default::default()
    };
    generate(&mut session(m), &mut sampler, prompt, &p, |_| true).unwrap()
}

/// llama.cpp's `test-gbnf-validator`, compiled once from the b11434 source against the
/// reference build's static libraries.
fn gbnf_validator() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-gbnf-validator");
    if out.exists() {
        return out;
    }
    let src = fixture("llama.cpp");
    let build = fixture("llama.cpp-build");
    let status = Command::new("c++")
        .args(["-O1", "-std=c++17"])
        .arg("-I")
        .arg(src.join("include"))
        .arg("-I")
        .arg(src.join("ggml/include"))
        .arg("-I")
        .arg(src.join("src"))
        .arg(src.join("tests/test-gbnf-validator.cpp"))
        .arg(build.join("src/libllama.a"))
        .arg(build.join("ggml/src/libggml.a"))
        .arg(build.join("ggml/src/libggml-cpu.a"))
        .arg(build.join("ggml/src/libggml-base.a"))
        .args(["-fopenmp", "-lpthread", "-o"])
        .arg(&out)
        .status()
        .expect("c++ (llama.cpp's build needs it too)");
    assert!(status.success(), "building test-gbnf-validator failed");
    out
}

/// llama.cpp's verdict on `text` under the grammar file: `Ok` when it is a sentence of
/// the grammar, else its message.
fn llama_cpp_validates(grammar: &Path, text: &str) -> Result<(), String> {
    let input = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "gbnf-input-{}-{}.txt",
        std::process::id(),
        grammar.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::write(&input, text).unwrap();
    let out = Command::new(gbnf_validator())
        .arg(grammar)
        .arg(&input)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if stdout.contains("Input string is valid") {
        Ok(())
    } else {
        Err(stdout)
    }
}

/// A prompt that asks for what each grammar of llama.cpp's `grammars/` describes.
fn prompt_for(name: &str) -> &'static str {
    match name {
        "arithmetic" => "Write three equations like x = 2 + 3, one per line.",
        "c" => "Write a C function that adds two integers.",
        "chess" => "Write the first moves of a chess game in algebraic notation.",
        "english" => "Say hello in one short sentence.",
        "japanese" => "Say hello in Japanese.",
        "json" => "Reply with exactly this JSON and nothing else: {\"name\": \"Ann\", \"age\": 7}",
        "json_arr" => "Reply with exactly this JSON and nothing else: [1, 2, 3]",
        "list" => "List three fruits.",
        _ => "Write something.",
    }
}

#[test]
fn every_llama_cpp_grammar_compiles_and_its_output_parses_under_it() {
    let m = smollm2();
    let vocab = GrammarVocab::new(&m.tokenizer).unwrap();
    let dir = fixture("llama.cpp/grammars");
    let files = files_with_ext(&dir, "gbnf");
    assert!(files.len() >= 8, "llama.cpp's grammars: {files:?}");
    let mut complete = Vec::new();
    for file in &files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(file).unwrap();
        let spec = GrammarSpec::Gbnf(text);
        let prompt = chat_prompt(&m, prompt_for(&name));
        let g = constrained(&m, &vocab, &spec, &prompt, 128);
        assert!(!g.text.is_empty(), "{name}: nothing generated");
        match g.stop {
            StopReason::Eog(_) => {
                llama_cpp_validates(file, &g.text)
                    .unwrap_or_else(|e| panic!("{name}: {:?}\n{e}", g.text));
                complete.push(name.clone());
            }
            StopReason::Length => {
                // Cut by -n: what there is must be a viable start of a sentence (a
                // character cut by the last token shows as U+FFFD: left out).
                let text = g.text.trim_end_matches('\u{FFFD}');
                let e = llama_cpp_validates(file, text).err().unwrap_or_default();
                assert!(
                    e.is_empty() || e.contains("Unexpected end of input"),
                    "{name}: {:?}\n{e}",
                    g.text
                );
            }
            other => panic!("{name}: stopped by {other:?}"),
        }
        // json.gbnf's answer to a copy prompt finishes and parses as JSON; json_arr's
        // (SmolLM2 writes a long array) is checked as a viable prefix above.
        if name == "json" {
            assert!(
                matches!(g.stop, StopReason::Eog(_)),
                "{name} did not finish: {:?}",
                g.text
            );
        }
        if name.starts_with("json") && matches!(g.stop, StopReason::Eog(_)) {
            serde_json::from_str::<serde_json::Value>(&g.text)
                .unwrap_or_else(|e| panic!("{name}: {e}: {:?}", g.text));
        }
        eprintln!("{name}: {:?} ({:?})", g.text, g.stop);
    }
    eprintln!("complete sentences: {complete:?}");
    assert!(
        complete.len() >= 3,
        "too few grammars finished: {complete:?}"
    );
}

/// Review extraction, the seed's task: attribute, opinion, category, polarity.
fn review_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "attribute": {"type": "string", "maxLength": 40},
            "opinion": {"type": "string", "maxLength": 40},
            "category": {"enum": ["food", "service", "price", "ambience", "delivery"]},
            "polarity": {"enum": ["positive", "negative", "neutral"]}
        },
        "required": ["attribute", "opinion", "category", "polarity"],
        "additionalProperties": false
    })
}

pub const REVIEWS: [&str; 4] = [
    "The noodles were delicious but the waiter was rude.",
    "Way too expensive for such small portions.",
    "Delivery took two hours and the pizza arrived cold.",
    "Lovely quiet place with soft music, we will come back.",
];

#[test]
fn json_schema_output_validates_for_review_extraction_prompts() {
    let m = smollm2();
    let vocab = GrammarVocab::new(&m.tokenizer).unwrap();
    let schema = review_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let spec = GrammarSpec::JsonSchema(schema.clone());
    for review in REVIEWS {
        let prompt = chat_prompt(
            &m,
            &format!("Extract the attribute, opinion, category and polarity of this review as JSON.\nReview: {review}"),
        );
        let g = constrained(&m, &vocab, &spec, &prompt, 160);
        assert!(matches!(g.stop, StopReason::Eog(_)), "{review}: {:?}", g);
        let v: serde_json::Value =
            serde_json::from_str(&g.text).unwrap_or_else(|e| panic!("{review}: {e}: {:?}", g.text));
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{review}: {v}: {errors:?}");
        eprintln!("{review} -> {v}");
    }
}

#[test]
fn a_choice_grammar_restricts_the_output_to_its_choices() {
    let m = smollm2();
    let vocab = GrammarVocab::new(&m.tokenizer).unwrap();
    let spec = GrammarSpec::Gbnf(r#"root ::= "positive" | "negative" | "neutral""#.into());
    let mut seen = std::collections::BTreeSet::new();
    for (i, review) in REVIEWS.iter().enumerate() {
        let prompt = chat_prompt(
            &m,
            &format!("Is this review positive, negative or neutral?\n{review}"),
        );
        // Sampled, not greedy: every draw must still be one of the three.
        let grammar = vocab.compile(&spec).unwrap();
        let mut sampler = Sampler::new(SamplerParams {
            temp: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: Some(i as u64),
            ..Default::default()
        });
        sampler.set_constraint(Some(grammar.constraint()));
        let p = GenParams {
            n_predict: 16,
            stop: Vec::new(),
            ..Default::default()
        };
        let g = generate(&mut session(&m), &mut sampler, &prompt, &p, |_| true).unwrap();
        assert!(
            ["positive", "negative", "neutral"].contains(&g.text.as_str()),
            "{review}: {:?}",
            g.text
        );
        assert!(matches!(g.stop, StopReason::Eog(_)), "{:?}", g.stop);
        seen.insert(g.text);
    }
    eprintln!("labels: {seen:?}");
}

#[test]
fn speculative_decoding_keeps_the_constrained_text() {
    let m = smollm2();
    let vocab = GrammarVocab::new(&m.tokenizer).unwrap();
    let spec = GrammarSpec::JsonSchema(review_schema());
    let prompt = chat_prompt(
        &m,
        &format!("Extract the attribute, opinion, category and polarity of this review as JSON.\nReview: {}", REVIEWS[0]),
    );
    let plain = constrained(&m, &vocab, &spec, &prompt, 120);
    let grammar = vocab.compile(&spec).unwrap();
    let mut sampler = Sampler::new(SamplerParams::greedy());
    sampler.set_constraint(Some(grammar.constraint()));
    let mut sp = Speculator::new(
        Box::new(NgramDrafter::new(NgramSimple {
            size_n: 2,
            size_m: 8,
            min_n: 2,
            resync: 8,
        })),
        SpecParams::default(),
    );
    let p = GenParams {
        n_predict: 120,
        stop: Vec::new(),
        ..Default::default()
    };
    let g = generate_with(
        &mut session(&m),
        &mut sampler,
        Some(&mut sp),
        &prompt,
        &p,
        |_| true,
    )
    .unwrap();
    assert_eq!(g.text, plain.text);
    assert_eq!(g.tokens, plain.tokens);
    let _ = cache_dir();
}
