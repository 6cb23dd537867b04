//! `cargo run --release -p pocket-model --example bench -- MODEL [THREADS] [PP] [TG]`:
//! llama-bench-like timing: one prefill of PP pseudo-random tokens (logits for the last),
//! then TG single-token decodes from an empty cache after a one-token warm-up.
use std::time::Instant;

use pocket_model::{Model, Session, SessionOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let path = a.get(1).expect("usage: bench MODEL [THREADS] [PP] [TG]");
    let threads: usize = a.get(2).map_or(2, |s| s.parse().unwrap());
    let pp: usize = a.get(3).map_or(512, |s| s.parse().unwrap());
    let tg: usize = a.get(4).map_or(128, |s| s.parse().unwrap());
    let model = Model::load(path).expect("load");
    let nv = model.config.n_vocab as u64;
    let mut seed = 42u64;
    let mut rnd = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) % nv) as u32
    };
    let o = SessionOptions {
        n_ctx: pp.max(tg + 1) + 8,
        n_threads: threads,
        pin: true,
        ..Default::default()
    };
    let mut s = Session::new(&model, o);
    // warm-up
    s.prefill(&[rnd(), rnd()]).unwrap();
    s.clear();
    if pp > 0 {
        let toks: Vec<u32> = (0..pp).map(|_| rnd()).collect();
        let t = Instant::now();
        s.prefill(&toks).unwrap();
        let dt = t.elapsed().as_secs_f64();
        println!("pp{pp}: {:.2} t/s ({:.1} ms)", pp as f64 / dt, dt * 1e3);
    }
    if tg > 0 {
        s.clear();
        s.decode(rnd()).unwrap();
        s.clear();
        let t = Instant::now();
        let mut tok = rnd();
        for _ in 0..tg {
            let l = s.decode(tok).unwrap();
            tok = (l[0].to_bits() as u64 % nv) as u32;
        }
        let dt = t.elapsed().as_secs_f64();
        println!("tg{tg}: {:.2} t/s", tg as f64 / dt);
    }
}
