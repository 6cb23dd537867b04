//! `cargo run --release -p pocket-model --example logit_diff -- MODEL DUMP.bin [THREADS]`:
//! replays the tokens of a llama.cpp greedy run dumped by `tests/oracle/dump_logits.cpp`
//! (teacher forcing: pocket is fed llama.cpp's tokens) and prints, per step, the largest
//! logit difference, llama.cpp's top-2 gap and whether both argmaxes agree.
//!
//! Knobs: POCKET_NUMERICS=ggml (llama.cpp's arithmetic: expect 0 everywhere),
//! POCKET_NO_PACK=1 (unpacked matrices), POCKET_KV=f32|q8_0, POCKET_DUMP=F.bin (write
//! pocket's own logits in the dump format, to compare two pocket runs).
use pocket_model::logit_dump::{max_abs_diff, top2, LogitDump};
use pocket_model::{KvType, LoadOptions, Model, Numerics, Session, SessionOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: logit_diff MODEL DUMP.bin [THREADS]");
        std::process::exit(2);
    }
    let threads: usize = a.get(3).map_or(2, |s| s.parse().expect("THREADS"));
    let theirs = LogitDump::read(&a[2]).unwrap_or_else(|e| panic!("{e}"));
    let pack = std::env::var_os("POCKET_NO_PACK").is_none();
    let numerics = match std::env::var("POCKET_NUMERICS").as_deref() {
        Ok("ggml") => Numerics::Ggml,
        _ => Numerics::Fast,
    };
    let o = LoadOptions {
        pack,
        fuse: pack,
        numerics,
        ..Default::default()
    };
    let model = Model::load_with(&a[1], o).expect("load");
    let kv = match std::env::var("POCKET_KV").as_deref() {
        Ok("f32") => KvType::F32,
        Ok("q8_0") => KvType::Q8_0,
        _ => KvType::F16,
    };
    let so = SessionOptions {
        n_ctx: 512,
        n_threads: threads,
        type_k: kv,
        type_v: kv,
        ..Default::default()
    };
    let mut s = Session::new(&model, so);
    let mut ours = LogitDump {
        n_vocab: theirs.n_vocab,
        prompt: theirs.prompt.clone(),
        steps: Vec::new(),
    };
    let mut logits = s.prefill(&theirs.prompt).expect("prefill").to_vec();
    let (mut worst, mut sum, mut first_split) = (0.0f32, 0.0f64, None);
    for (step, (chosen, tl)) in theirs.steps.iter().enumerate() {
        let d = max_abs_diff(&logits, tl);
        let (ti, gap) = top2(tl);
        let same = top2(&logits).0 == ti;
        worst = worst.max(d);
        sum += d as f64;
        if !same && first_split.is_none() {
            first_split = Some(step);
        }
        println!(
            "step {step:3}  max|dlogit| {d:.5}  llama top-2 gap {gap:.5}  {}",
            if same { "same" } else { "SPLIT" }
        );
        ours.steps.push((*chosen, std::mem::take(&mut logits)));
        if step + 1 < theirs.steps.len() {
            logits = s.decode(*chosen).expect("decode").to_vec();
        }
    }
    println!(
        "mean max|dlogit| {:.5}, worst {worst:.5}, first split {first_split:?}",
        sum / theirs.steps.len().max(1) as f64
    );
    if let Some(p) = std::env::var_os("POCKET_DUMP") {
        std::fs::write(p, ours.to_bytes()).expect("write POCKET_DUMP");
    }
}
