//! `score::score` (prompt once, forked sequences, all options in one batch) against the
//! plain definition computed here, one option at a time: a fresh session prefills
//! prompt + option with every row's logits, and the option's log-probability is the sum of
//! each token's log-softmax (written out in f64 in this file, not taken from the crate).
//! SmolLM2 and gemma3; and the latency of 3 and 10 options against one session per option
//! (`cargo test --release -p pocket-model --test score -- --ignored --nocapture`).

use std::time::Instant;

use pocket_model::score::{score, score_separately, ScoreInput};
use pocket_model::{Model, Session, SessionOptions};

mod common;
use common::fixture;

const PROMPT: &str = "Question: What is the capital of France?\nAnswer:";
const OPTIONS: [&str; 5] = [
    " Paris",
    " London, the capital of England",
    " Berlin",
    " A city in the south of France called Marseille",
    " paris",
];

fn opts() -> SessionOptions {
    SessionOptions {
        n_threads: 2,
        ..Default::default()
    }
}

/// The option's log-probability by teacher forcing, alone in a fresh session.
fn teacher_forced(m: &Model, prefix: &[u32], option: &[u32]) -> f64 {
    let mut tokens = prefix.to_vec();
    tokens.extend_from_slice(option);
    let o = SessionOptions {
        n_ctx: tokens.len(),
        ..opts()
    };
    let mut s = Session::new(m, o);
    s.logits_all = true;
    let all = s.prefill(&tokens).unwrap();
    let v = m.config.n_vocab;
    let mut total = 0.0;
    for (j, &t) in option.iter().enumerate() {
        let row = &all[(prefix.len() - 1 + j) * v..(prefix.len() + j) * v];
        let max = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
        let z: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
        total += row[t as usize] as f64 - max - z.ln();
    }
    total
}

fn check(name: &str) {
    let m = Model::load(fixture(&format!("models/{name}"))).unwrap();
    let input = ScoreInput::from_text(&m.tokenizer, PROMPT, &OPTIONS).unwrap();
    let got = score(&m, &opts(), &input).unwrap();
    let want: Vec<f64> = input
        .options
        .iter()
        .map(|o| teacher_forced(&m, &input.prefix, o))
        .collect();
    let max = want.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = want.iter().map(|&l| (l - max).exp()).sum();
    let mut sum = 0.0;
    for (i, (g, &w)) in got.iter().zip(&want).enumerate() {
        let p = (w - max).exp() / z;
        eprintln!(
            "{name} {:?}: logprob {:.5} (alone {w:.5}), p {:.6} (alone {p:.6}), {} tokens",
            OPTIONS[i], g.logprob, g.prob, g.n_tokens
        );
        assert!(
            (g.prob - p).abs() < 1e-4,
            "{name} option {i}: {} vs {p}",
            g.prob
        );
        assert!(
            (g.logprob - w).abs() < 1e-3,
            "{name} option {i}: {} vs {w}",
            g.logprob
        );
        assert_eq!(g.n_tokens, input.options[i].len());
        sum += g.prob;
    }
    assert!((sum - 1.0).abs() < 1e-9);
    // The options differ, so the model must not see them as one (a test that can fail:
    // scoring every option with the first one's tokens would give equal probabilities).
    assert!(got.iter().any(|g| (g.prob - got[0].prob).abs() > 1e-3));
    // The multi-token options are spread over several rows of the batch.
    assert!(input.options.iter().any(|o| o.len() > 3));
}

#[test]
fn score_matches_teacher_forcing_one_by_one_smollm2() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn score_matches_teacher_forcing_one_by_one_gemma3() {
    check("gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn bad_inputs_are_errors() {
    let m = Model::load(fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let e = ScoreInput::from_text(&m.tokenizer, PROMPT, &[" Paris", ""]).unwrap_err();
    assert!(e.to_string().contains("option 1"), "{e}");
    assert!(ScoreInput::from_text(&m.tokenizer, PROMPT, &[]).is_err());
}

/// Latency of `score` (prompt once, one batch) against `score_separately` (one session and
/// one prefill per option), for 3 and 10 options.
#[test]
#[ignore]
fn bench_score_vs_separate() {
    let m = Model::load(fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let prompt = "Classify the customer's message into one of the teams.\n\
        Message: I was charged twice for my order last week and nobody has replied. \
        I would like a refund as soon as possible, or at least an answer.\nTeam:";
    let teams = [
        " billing",
        " shipping",
        " technical support",
        " sales",
        " returns",
        " account security",
        " product quality",
        " delivery delays",
        " legal",
        " other",
    ];
    let o = opts();
    for k in [3, 10] {
        let input = ScoreInput::from_text(&m.tokenizer, prompt, &teams[..k]).unwrap();
        let time = |f: &dyn Fn()| {
            f(); // warm-up
            let reps = 5;
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        };
        let one = time(&|| {
            score(&m, &o, &input).unwrap();
        });
        let sep = time(&|| {
            score_separately(&m, &o, &input).unwrap();
        });
        println!(
            "{k} options (prompt {} tokens, {} option tokens): score {one:.1} ms, separately {sep:.1} ms ({:.2}x)",
            input.prefix.len(),
            input.options.iter().map(Vec::len).sum::<usize>(),
            sep / one
        );
    }
}
