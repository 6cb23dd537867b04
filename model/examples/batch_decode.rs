//! `cargo run --release -p pocket-model --example batch_decode -- MODEL [THREADS] [STEPS] [CTX]`:
//! the floor of a server's decode step. Times, back to back, decode steps of (a) one
//! sequence one row, (b) four sequences one row each, every row with logits (what
//! `pocket serve` runs at 4 streams), (c) four rows of one sequence, logits for the last
//! (`pocket bench`'s pp4), each from caches holding CTX tokens; prints ms per step and the
//! per-operation split of (a) and (b).
use std::time::Instant;

use pocket_model::profile::{Op, PhaseStats};
use pocket_model::{Batch, Model, Session, SessionOptions};

#[path = "common/args.rs"]
mod args;

fn main() {
    let usage = "batch_decode MODEL [THREADS] [STEPS] [CTX]";
    let (path, [threads, steps, ctx]) = args::model_and_numbers(usage, [2, 64, 16]);
    let model = Model::load(&path).expect("load");
    let o = SessionOptions {
        n_ctx: ctx + steps * 4 + 8,
        n_threads: threads,
        pin: true,
        n_seq: 4,
        ..Default::default()
    };
    let mut s = Session::new(&model, o);
    let prompt: Vec<u32> = (0..ctx as u32).map(|i| 100 + i * 7).collect();
    let fill = |s: &mut Session, n_seq: usize| {
        for q in 0..4 {
            s.clear_seq(q);
        }
        for q in 0..n_seq {
            let b = Batch::sequence(&prompt, 0, q, ctx - 1..ctx);
            s.forward_batch(&b).unwrap();
        }
    };
    let report = |name: &str, s: &mut Session, rows_of: &dyn Fn(&Session) -> Batch, n_seq| {
        fill(s, n_seq);
        s.set_breakdown(true);
        let t = Instant::now();
        for _ in 0..steps {
            let b = rows_of(s);
            s.forward_batch(&b).unwrap();
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / steps as f64;
        let bd = s.breakdown().unwrap();
        let ph: &PhaseStats = if bd.decode.calls > 0 {
            &bd.decode
        } else {
            &bd.prefill
        };
        let per = |op: Op| ph.get(op).ns as f64 / 1e6 / steps as f64;
        let split: Vec<String> = Op::ALL
            .iter()
            .map(|&op| format!("{} {:.2}", op.name(), per(op)))
            .collect();
        println!("{name}: {ms:.2} ms/step  [{}]", split.join(", "));
        s.set_breakdown(false);
    };
    for _round in 0..2 {
        report(
            "1 seq x 1 row      ",
            &mut s,
            &|s| Batch::sequence(&[42], s.seq_len(0), 0, 0..1),
            1,
        );
        report(
            "4 seq x 1 row (all)",
            &mut s,
            &|s| {
                let mut b = Batch::new();
                for q in 0..4 {
                    b.add(42 + q as u32, s.seq_len(q), q, true);
                }
                b
            },
            4,
        );
        report(
            "1 seq x 4 rows     ",
            &mut s,
            &|s| Batch::sequence(&[42, 43, 44, 45], s.seq_len(0), 0, 3..4),
            1,
        );
    }
}
