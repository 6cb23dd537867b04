//! Attention throughput per **CPU second** of the calling thread (as `gemm_cpu`: Linux
//! `/proc/thread-self/schedstat`, so time slices given to other jobs on a shared machine do
//! not count). One KV head's query group over an f16 cache of `KEYS` positions, the
//! MNN-Pocket shape (head_dim 64, 7 query heads a KV head, 2 KV heads a row): decode (one
//! query row, the last position) and a 32-token prefill block at the end of the cache.
//! Best of `REPS` passes per case.
//!
//!     cargo run --release -p pocket-kernels --example attention_cpu [KEYS [decode|prefill32]]
//!
//! Prints microseconds per call and GFLOP/s (2·2·heads·head_dim per visible key and row:
//! the q·k scores and the weighted V sum). To A/B two builds, copy one binary aside and run
//! the two alternately.

use half::f16;
use pocket_kernels::attention::{attend, AttnScratch, F16Rows, QueryBlock};
use pocket_kernels::Isa;
use std::hint::black_box;

const REPS: usize = 7;
const HEAD_DIM: usize = 64;
const HEADS: usize = 7;
const N_KV: usize = 2;

#[path = "common/cpu_time.rs"]
mod cpu_time;

fn main() {
    let keys: usize = std::env::args()
        .nth(1)
        .map_or(4096, |k| k.parse().expect("KEYS"));
    let isa = Isa::active(); // POCKET_ISA forces a level
    let stride = N_KV * HEAD_DIM;
    let mut seed = 1u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let k: Vec<f16> = (0..keys * stride).map(|_| f16::from_f32(next())).collect();
    let v: Vec<f16> = (0..keys * stride).map(|_| f16::from_f32(next())).collect();
    let rows = F16Rows {
        k: &k,
        v: &v,
        stride,
    };
    let len = HEADS * HEAD_DIM;
    let mut s = AttnScratch::default();
    let only = std::env::args().nth(2); // a case name: run only that one
    for (name, bt) in [("decode", 1), ("prefill32", 32)] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let q: Vec<f32> = (0..bt * len).map(|_| next()).collect();
        let pos0 = keys - bt;
        let block = QueryBlock {
            q: &q,
            q_stride: len,
            len,
            head_dim: HEAD_DIM,
            kv_off: 0,
            pos0,
            window: 0,
            scale: 0.125,
        };
        let mut out = vec![0f32; bt * len];
        // Visible keys summed over the rows.
        let visible: usize = (0..bt).map(|i| pos0 + i + 1).sum();
        let flops = 4.0 * (HEADS * HEAD_DIM * visible) as f64;
        // Passes of ~10 GFLOP (~0.1 s): this clock can advance in 4 ms scheduler ticks.
        let inner = ((1e10 / flops) as usize).max(1);
        let best = cpu_time::best_ns(REPS, inner, || {
            attend(&rows, &block, &mut out, &mut s, black_box(isa))
        });
        black_box(&out);
        println!(
            "attention/{name:<10} keys {keys:<6} {isa:<11} {:9.1} us {:7.1} GFLOP/s",
            best / 1e3,
            flops / best
        );
    }
}
