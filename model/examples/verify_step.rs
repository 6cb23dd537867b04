//! `cargo run --release -p pocket-model --example verify_step -- MODEL [THREADS] [ROUNDS] [K]`:
//! what a speculative verify step costs against a decode step (#16's bar: 1 + 8 tokens at
//! most 2x one token). Each round times, back to back in one process, 16 one-row decode
//! steps and 16 verify steps of 1 + K rows with logits for every row (as
//! `speculative.rs` asks), each verify cut back afterwards so the cache stays at the same
//! depth; prints the medians over the rounds and the median of the per-round ratios (a
//! noisy host moves both kinds of step within a round alike), then each kind's split by
//! operation (a separate pass: timing each operation adds waits).
use std::time::Instant;

use pocket_model::profile::Op;
use pocket_model::{Batch, Model, Session, SessionOptions};

#[path = "common/args.rs"]
mod args;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let usage = "verify_step MODEL [THREADS] [ROUNDS] [K]";
    let (path, [threads, rounds, k]) = args::model_and_numbers(usage, [2, 10, 8]);
    const STEPS: usize = 16;
    let model = Model::load(&path).expect("load");
    let ctx = 64;
    let o = SessionOptions {
        n_ctx: ctx + STEPS * (k + 2) + 8,
        n_threads: threads,
        ..Default::default()
    };
    let mut s = Session::new(&model, o);
    let prompt: Vec<u32> = (0..ctx as u32).map(|i| 100 + i * 7).collect();
    s.forward_batch(&Batch::sequence(&prompt, 0, 0, ctx - 1..ctx))
        .unwrap();
    let rows: Vec<u32> = (0..=k as u32).map(|i| 42 + i).collect();
    let (mut one, mut verify, mut ratio) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..STEPS {
            let b = Batch::sequence(&rows[..1], s.seq_len(0), 0, 0..1);
            s.forward_batch(&b).unwrap();
        }
        let d = t.elapsed().as_secs_f64() * 1e3 / STEPS as f64;
        s.truncate_seq(0, ctx);
        let t = Instant::now();
        for _ in 0..STEPS {
            let b = Batch::sequence(&rows, ctx, 0, 0..k + 1);
            s.forward_batch(&b).unwrap();
            s.truncate_seq(0, ctx);
        }
        let v = t.elapsed().as_secs_f64() * 1e3 / STEPS as f64;
        println!(
            "decode {d:.2} ms  verify 1+{k} {v:.2} ms  ratio {:.2}",
            v / d
        );
        one.push(d);
        verify.push(v);
        ratio.push(v / d);
    }
    s.set_breakdown(true);
    for _ in 0..STEPS {
        let b = Batch::sequence(&rows[..1], s.seq_len(0), 0, 0..1);
        s.forward_batch(&b).unwrap();
    }
    s.truncate_seq(0, ctx);
    for _ in 0..STEPS {
        s.forward_batch(&Batch::sequence(&rows, ctx, 0, 0..k + 1))
            .unwrap();
        s.truncate_seq(0, ctx);
    }
    let bd = s.breakdown().unwrap();
    println!("ms/step by operation: decode | verify 1+{k} | ratio");
    for op in Op::ALL {
        let ms = |ns: u64| ns as f64 / 1e6 / STEPS as f64;
        let (d, v) = (ms(bd.decode.get(op).ns), ms(bd.prefill.get(op).ns));
        println!("  {:<12} {d:6.3} | {v:6.3} | {:.2}", op.name(), v / d);
    }
    println!(
        "median: decode {:.2} ms, verify 1+{k} {:.2} ms, per-round ratio {:.2}",
        median(&mut one),
        median(&mut verify),
        median(&mut ratio)
    );
}
