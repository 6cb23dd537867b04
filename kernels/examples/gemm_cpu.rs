//! gemm / gemv throughput per **CPU second** of the calling thread (Linux
//! `/proc/thread-self/schedstat`), not per wall second: on a machine shared with other
//! jobs the wall clock also counts the time slices given to them, the thread's own run
//! time does not. Best of `REPS` passes per case.
//!
//!     cargo run --release -p pocket-kernels --example gemm_cpu [FILTER] [TOKENS]
//!
//! FILTER is a substring of the case name (`gemm/2560x896/q4_0`); TOKENS defaults to 128
//! (1 = the gemv path). Prints GOP/s (2·rows·cols·tokens per CPU second) and, for gemv,
//! GB/s of packed weights. To A/B two builds, copy one binary aside and run the two
//! alternately on the same filter.

use pocket_kernels::matmul::{gemm, PackOptions, PackedMatrix, QuantizedActivation};
use pocket_kernels::Isa;
use std::hint::black_box;

// The benchmarks' weights (`random_tensor`), activations, formats and random source.
#[path = "../../benches/data.rs"]
mod data;
use data::{random_activations, random_tensor, XorShift, FORMATS};

const REPS: usize = 7;

const SHAPES: [(usize, usize); 4] = [(2560, 896), (896, 2560), (1152, 896), (896, 896)];

/// The benchmarks' formats but these (Q5_K and F16 are not A/B targets here).
const SKIPPED: [&str; 2] = ["q5_k", "f16"];

#[path = "common/cpu_time.rs"]
mod cpu_time;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let filter = args.get(1).cloned().unwrap_or_default();
    let tokens: usize = args.get(2).map_or(128, |t| t.parse().expect("TOKENS"));
    let isa = Isa::detect();
    let mut rng = XorShift(42);
    for (rows, cols) in SHAPES {
        for (name, ty, share) in FORMATS {
            let case = format!("gemm/{rows}x{cols}/{name}");
            if SKIPPED.contains(&name) || !case.contains(&filter) || cols % ty.block_size() != 0 {
                continue;
            }
            let bytes = random_tensor(ty, share, rows, cols);
            let w =
                PackedMatrix::pack_with(ty, &bytes, rows, cols, PackOptions { merge_q4_1: share })
                    .unwrap();
            let x = random_activations(&mut rng, tokens * cols);
            let act = QuantizedActivation::quantize(&x, tokens);
            let mut out = vec![0f32; rows * tokens];
            // Enough inner passes for ~50 ms per rep.
            let ops = 2.0 * (rows * cols * tokens) as f64;
            let inner = ((5e9 / ops) as usize).max(1);
            let best = cpu_time::best_ns(REPS, inner, || {
                gemm(&w, &act, &mut out, rows, 0..w.panels(), black_box(isa))
            });
            black_box(&out);
            println!(
                "{case:<24} x{tokens:<4} {:7.1} GOP/s {:7.2} GB/s",
                ops / best,
                w.bytes() as f64 / best
            );
        }
    }
}
