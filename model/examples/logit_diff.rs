//! `cargo run --release -p pocket-model --example logit_diff -- MODEL DUMP.bin [THREADS]`:
//! replays the tokens of a llama.cpp greedy run dumped by `tests/oracle/dump_logits.cpp`
//! (teacher forcing: pocket is fed llama.cpp's tokens) and prints, per step, the largest
//! logit difference, llama.cpp's top-2 gap and whether both argmaxes agree. It shows how far
//! from llama.cpp's arithmetic pocket is, and at which near-ties greedy texts must part.
use std::io::{Read, Write};

use pocket_model::{KvType, Model, Numerics, Session, SessionOptions};

fn read_i32s(b: &[u8], at: &mut usize, n: usize) -> Vec<i32> {
    let v = b[*at..*at + 4 * n]
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    *at += 4 * n;
    v
}

fn top2(l: &[f32]) -> (usize, f32) {
    let mut i1 = 0;
    for i in 1..l.len() {
        if l[i] > l[i1] {
            i1 = i;
        }
    }
    let second = l
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != i1)
        .fold(f32::MIN, |m, (_, &v)| m.max(v));
    (i1, l[i1] - second)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: logit_diff MODEL DUMP.bin [THREADS]");
        std::process::exit(2);
    }
    let threads: usize = a.get(3).map_or(2, |s| s.parse().unwrap());
    let mut bytes = Vec::new();
    std::fs::File::open(&a[2])
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("read dump");
    let mut at = 0;
    let hdr = read_i32s(&bytes, &mut at, 3);
    let (n_vocab, n_prompt, n_steps) = (hdr[0] as usize, hdr[1] as usize, hdr[2] as usize);
    let prompt: Vec<u32> = read_i32s(&bytes, &mut at, n_prompt)
        .into_iter()
        .map(|t| t as u32)
        .collect();
    // Knobs for experiments: POCKET_NO_PACK=1 (generic, unpacked matrices), POCKET_KV=f32,
    // POCKET_NUMERICS=ggml (llama.cpp's arithmetic, `Numerics::Ggml`).
    let pack = std::env::var_os("POCKET_NO_PACK").is_none();
    let model = Model::load_with(
        &a[1],
        pocket_model::LoadOptions {
            pack,
            fuse: pack,
            numerics: match std::env::var("POCKET_NUMERICS").as_deref() {
                Ok("ggml") => Numerics::Ggml,
                _ => Numerics::Fast,
            },
            ..Default::default()
        },
    )
    .expect("load");
    let kv = match std::env::var("POCKET_KV").as_deref() {
        Ok("f32") => KvType::F32,
        Ok("q8_0") => KvType::Q8_0,
        _ => KvType::F16,
    };
    let mut s = Session::new(
        &model,
        SessionOptions {
            n_ctx: 512,
            n_threads: threads,
            type_k: kv,
            type_v: kv,
            ..Default::default()
        },
    );
    // POCKET_DUMP=F.bin writes pocket's logits in the dump format (pocket vs pocket runs).
    let mut dump = std::env::var_os("POCKET_DUMP").map(|p| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(p).expect("create dump"));
        for v in [n_vocab, n_prompt, n_steps] {
            f.write_all(&(v as i32).to_le_bytes()).unwrap();
        }
        for &t in &prompt {
            f.write_all(&(t as i32).to_le_bytes()).unwrap();
        }
        f
    });
    let mut ours = s.prefill(&prompt).expect("prefill").to_vec();
    let (mut worst, mut sum, mut first_split) = (0.0f32, 0.0f64, None);
    for step in 0..n_steps {
        let chosen = read_i32s(&bytes, &mut at, 1)[0] as u32;
        let theirs: Vec<f32> = bytes[at..at + 4 * n_vocab]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += 4 * n_vocab;
        if let Some(f) = dump.as_mut() {
            f.write_all(&(chosen as i32).to_le_bytes()).unwrap();
            for v in &ours {
                f.write_all(&v.to_le_bytes()).unwrap();
            }
        }
        let d = ours
            .iter()
            .zip(&theirs)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        let (ti, gap) = top2(&theirs);
        let (oi, _) = top2(&ours);
        worst = worst.max(d);
        sum += d as f64;
        if oi != ti && first_split.is_none() {
            first_split = Some(step);
        }
        println!(
            "step {step:3}  max|dlogit| {d:.5}  llama top-2 gap {gap:.5}  {}",
            if oi == ti { "same" } else { "SPLIT" }
        );
        if step + 1 < n_steps {
            ours = s.decode(chosen).expect("decode").to_vec();
        }
    }
    println!(
        "mean max|dlogit| {:.5}, worst {worst:.5}, first split {first_split:?}",
        sum / n_steps as f64
    );
}
