//! Quick throughput probes (ignored by default; run in release):
//!
//! `cargo test -p pocket-kernels --release -- --ignored --nocapture gemv_bandwidth`
//!
//! gemv: GB/s of packed weights (codes + scales) read per second, single-threaded and with
//! 2 threads splitting the panels (spin barrier between passes, as a decode pool would).
//! gemm: GOP/s (2·rows·cols·tokens) for a prefill-sized batch.

use pocket_kernels::matmul::{
    gemm, gemm_tokens, gemv, PackOptions, PackedMatrix, QuantizedActivation,
};
use pocket_kernels::{GgmlType, Isa};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(n);
    v
}

/// Random blocks with small sane fp16 scales (the codes are whatever the bytes are).
fn random_tensor(ty: GgmlType, rows: usize, cols: usize, share_q4_1: bool) -> Vec<u8> {
    let bb = ty.type_size();
    let mut v = random_bytes(rows * cols / 32 * bb, 0x1234_5678_9abc_def1);
    let d = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    let m = half::f16::from_f32(-0.08).to_bits().to_le_bytes();
    for (i, blk) in v.chunks_exact_mut(bb).enumerate() {
        blk[0..2].copy_from_slice(&d);
        if ty == GgmlType::Q4_1 {
            if share_q4_1 {
                blk[2..4].copy_from_slice(&m);
            } else {
                blk[2..4].copy_from_slice(
                    &half::f16::from_f32(-0.08 + (i % 7) as f32 * 1e-3)
                        .to_bits()
                        .to_le_bytes(),
                );
            }
        }
    }
    v
}

struct SpinBarrier {
    count: AtomicUsize,
    gen: AtomicUsize,
    n: usize,
}

impl SpinBarrier {
    fn wait(&self) {
        let g = self.gen.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.gen.fetch_add(1, Ordering::Release);
        } else {
            while self.gen.load(Ordering::Acquire) == g {
                std::hint::spin_loop();
            }
        }
    }
}

/// Seconds per gemv pass (best of passes run for about `budget`) with `threads` threads.
fn time_gemv(w: &PackedMatrix, act: &QuantizedActivation, threads: usize, isa: Isa) -> f64 {
    let budget = Duration::from_millis(400);
    let np = w.panels();
    let mut out = vec![0f32; w.rows];
    let cuts: Vec<usize> = (0..=threads).map(|i| np * i / threads).collect();
    let mut chunks: Vec<&mut [f32]> = Vec::new();
    let mut rest = &mut out[..];
    for i in 0..threads {
        let (a, b) = rest.split_at_mut(w.rows_in(cuts[i]..cuts[i + 1]));
        chunks.push(a);
        rest = b;
    }
    let barrier = SpinBarrier {
        count: AtomicUsize::new(0),
        gen: AtomicUsize::new(0),
        n: threads,
    };
    let stop = AtomicUsize::new(0);
    let best = std::sync::Mutex::new(f64::INFINITY);
    std::thread::scope(|s| {
        for (i, chunk) in chunks.into_iter().enumerate() {
            let (barrier, stop, best) = (&barrier, &stop, &best);
            let range = cuts[i]..cuts[i + 1];
            s.spawn(move || {
                let start = Instant::now();
                let mut passes = 0;
                loop {
                    barrier.wait();
                    if stop.load(Ordering::Acquire) != 0 {
                        break;
                    }
                    let t = Instant::now();
                    gemv(w, act, chunk, range.clone(), isa);
                    barrier.wait();
                    let dt = t.elapsed().as_secs_f64();
                    passes += 1;
                    if i == 0 {
                        let mut b = best.lock().unwrap();
                        *b = b.min(dt);
                        if passes >= 3 && start.elapsed() > budget {
                            stop.store(1, Ordering::Release);
                        }
                    }
                }
            });
        }
    });
    let b = *best.lock().unwrap();
    std::hint::black_box(&out);
    b
}

fn formats() -> Vec<(&'static str, GgmlType, bool)> {
    vec![
        ("q4_0", GgmlType::Q4_0, false),
        ("q4_1", GgmlType::Q4_1, false),
        ("q4_1x64", GgmlType::Q4_1, true),
        ("q8_0", GgmlType::Q8_0, false),
    ]
}

#[test]
#[ignore]
fn gemv_bandwidth() {
    let isas = Isa::available();
    println!("isas {isas:?}");
    for (name, ty, merged) in formats() {
        // Rows x cols; the last shape is ~200 MB of packed weights.
        let big_cols = 4096;
        let big_rows =
            (200_000_000f64 / (big_cols as f64 * ty.bits_per_weight() / 8.0)) as usize / 8 * 8;
        for (rows, cols) in [(2560, 896), (896, 2560), (65536, 896), (big_rows, big_cols)] {
            let raw = random_tensor(ty, rows, cols, merged);
            let w =
                PackedMatrix::pack_with(ty, &raw, rows, cols, PackOptions { merge_q4_1: merged })
                    .unwrap();
            drop(raw);
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.02)
                .collect();
            let act = QuantizedActivation::quantize(&x, 1);
            for &isa in &isas {
                let mut line = format!(
                    "{name:8} {:?} {rows:6}x{cols:5} {:7.1} MB {:6}",
                    w.layout,
                    w.bytes() as f64 / 1e6,
                    isa.name()
                );
                for threads in [1, 2] {
                    if isa == Isa::Scalar && (rows * cols > 64 << 20) {
                        continue; // the scalar reference is too slow to be worth the wait
                    }
                    let s = time_gemv(&w, &act, threads, isa);
                    line += &format!(
                        "  {threads}T {:7.1} us {:6.2} GB/s",
                        s * 1e6,
                        w.bytes() as f64 / s / 1e9
                    );
                }
                println!("{line}");
            }
        }
    }
}

#[test]
#[ignore]
fn gemv_bandwidth_gemm_gops() {
    let isa = Isa::detect();
    for (name, ty, merged) in formats() {
        for (rows, cols, tokens) in [(2560, 896, 128), (896, 2560, 128), (4864, 896, 512)] {
            let raw = random_tensor(ty, rows, cols, merged);
            let w =
                PackedMatrix::pack_with(ty, &raw, rows, cols, PackOptions { merge_q4_1: merged })
                    .unwrap();
            let x: Vec<f32> = (0..cols * tokens)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.02)
                .collect();
            let act = QuantizedActivation::quantize(&x, tokens);
            let mut out = vec![0f32; rows * tokens];
            let mut best = f64::INFINITY;
            let start = Instant::now();
            let mut n = 0;
            while n < 2 || start.elapsed() < Duration::from_millis(400) {
                let t = Instant::now();
                gemm(&w, &act, &mut out, rows, 0..w.panels(), isa);
                best = best.min(t.elapsed().as_secs_f64());
                n += 1;
            }
            // 2 threads splitting the tokens (disjoint output rows).
            let mut best2 = f64::INFINITY;
            let start = Instant::now();
            let mut n = 0;
            let half = tokens / 2;
            while n < 2 || start.elapsed() < Duration::from_millis(400) {
                let t = Instant::now();
                let (a, b) = out.split_at_mut(half * rows);
                let (w, act) = (&w, &act);
                std::thread::scope(|s| {
                    s.spawn(move || gemm_tokens(w, act, half..tokens, b, rows, 0..w.panels(), isa));
                    gemm_tokens(w, act, 0..half, a, rows, 0..w.panels(), isa);
                });
                best2 = best2.min(t.elapsed().as_secs_f64());
                n += 1;
            }
            let ops = 2.0 * rows as f64 * cols as f64 * tokens as f64;
            // Activation quantization, timed separately (per token, all of `x`).
            let t = Instant::now();
            let a2 = QuantizedActivation::quantize(&x, tokens);
            let tq = t.elapsed().as_secs_f64();
            std::hint::black_box((&out, a2));
            println!(
                "{name:8} {:?} gemm {rows:5}x{cols:5} x {tokens:3} tokens {isa}: 1T {:7.2} ms {:6.1} GOP/s  2T {:7.2} ms {:6.1} GOP/s (quantize act {:.2} ms)",
                w.layout,
                best * 1e3,
                ops / best / 1e9,
                best2 * 1e3,
                ops / best2 / 1e9,
                tq * 1e3
            );
        }
    }
}
