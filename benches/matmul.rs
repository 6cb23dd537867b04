//! Criterion benchmarks of the packed matmul kernels (`pocket_kernels::matmul`).
//!
//! `cargo bench --bench matmul` (add `-- --quick` for a faster, rougher run; a filter
//! such as `-- gemv/896x2560` narrows it).
//!
//! * `gemv/{rows}x{cols}/{format}/{isa}`: one token, one thread, every format on every
//!   `Isa::available()`. Throughput = bytes of packed weights read (codes + scales), so
//!   criterion prints GB/s (strictly GiB/s: it divides by 2^30).
//! * `gemv_2t/...`: the same split over 2 threads (scoped threads, one spawn per pass), on
//!   the two DRAM-sized shapes.
//! * `gemm/{rows}x{cols}x512/{format}/{isa}`: 512 tokens. Throughput =
//!   `Elements(2·rows·cols·tokens)`: **elements = operations**, so "Gelem/s" reads GOP/s.
//!   The scalar reference only runs the smallest shape (it is ~100x slower).
//! * `gemm_few/65536x2560x{2,3,4,8,9}/{format}/{isa}`: a few tokens (9: a speculative verify
//!   step of 1 + 8) on the DRAM-sized shape, one thread. Throughput = bytes of packed weights, as
//!   gemv's: a few-token call should stream its weights nearly as fast as gemv does.
//! * `bandwidth/read/{1,2}t`: AVX2 loads over a 512 MiB buffer, the machine's read limit.
//!
//! Shapes are MNN-Pocket's (Qwen2.5-0.5B: hidden 896, FFN 4864 split as 2560-wide parts in
//! its export, vocab rows in 64K chunks). K-quants need rows that are a multiple of 256
//! elements, so Q4_K / Q5_K / Q6_K only run the 2560-column shape (the 896-column ones are why
//! llama.cpp's Q4_K_M falls back to Q5_0 / Q8_0 there); gemv also runs 65536x2560, a
//! DRAM-sized matrix every format but F16 takes. F16 (f32 activations) runs every other
//! shape.

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use pocket_kernels::matmul::{gemm, gemv, PackOptions, PackedMatrix, QuantizedActivation};
use pocket_kernels::{GgmlType, Isa};
use std::hint::black_box;
use std::time::Duration;

mod data;
use data::{random_activations, random_tensor, XorShift, FORMATS};

const SHAPES: [(usize, usize); 5] = [
    (896, 896),
    (128, 896),
    (2560, 896),
    (896, 2560),
    (65536, 896),
];
/// gemv only: a DRAM-sized matrix whose rows are a multiple of 256, so the K-quants have
/// a memory-bound figure too (94-178 MB packed, 3-6x the 32 MiB L3; not an MNN-Pocket
/// shape).
const GEMV_EXTRA: (usize, usize) = (65536, 2560);
const TOKENS: usize = 512;

/// The format takes rows of `cols` (K-quants: multiples of 256), and F16 stays off the
/// 65536x2560 shape (335 MB unpacked, as much again packed: too much for a shared box).
fn valid(ty: GgmlType, rows: usize, cols: usize) -> bool {
    cols.is_multiple_of(ty.block_size()) && !(ty == GgmlType::F16 && rows * cols > 65536 * 896)
}

fn pack(ty: GgmlType, share: bool, rows: usize, cols: usize) -> PackedMatrix {
    let bytes = random_tensor(ty, share, rows, cols);
    let opts = PackOptions { merge_q4_1: share };
    PackedMatrix::pack_with(ty, &bytes, rows, cols, opts).expect("pack")
}

fn activation(tokens: usize, cols: usize) -> QuantizedActivation {
    let x = random_activations(&mut XorShift(42), tokens * cols);
    QuantizedActivation::quantize(&x, tokens)
}

/// A benchmark group with the short runs every group here uses: 10 samples, 2 s of
/// measurement after 0.5 s of warm-up.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g
}

fn bench_gemv(c: &mut Criterion) {
    let mut g = group(c, "gemv");
    for (rows, cols) in SHAPES.into_iter().chain([GEMV_EXTRA]) {
        let act = activation(1, cols);
        for (name, ty, share) in FORMATS {
            if !valid(ty, rows, cols) {
                continue;
            }
            let w = pack(ty, share, rows, cols);
            let mut out = vec![0f32; rows];
            g.throughput(Throughput::Bytes(w.bytes() as u64));
            for isa in Isa::available() {
                let id = BenchmarkId::new(format!("{rows}x{cols}/{name}"), isa.name());
                g.bench_function(id, |b| {
                    b.iter(|| gemv(&w, &act, &mut out, 0..w.panels(), black_box(isa)))
                });
            }
        }
    }
    g.finish();

    // Two threads on the DRAM-sized shapes (a decode pool's split; spawn cost included).
    let mut g = group(c, "gemv_2t");
    let isa = Isa::detect();
    for ((rows, cols), (name, ty, share)) in [(65536, 896), GEMV_EXTRA]
        .into_iter()
        .flat_map(|s| FORMATS.map(|f| (s, f)))
    {
        if !valid(ty, rows, cols) {
            continue;
        }
        let act = activation(1, cols);
        let w = pack(ty, share, rows, cols);
        let mut out = vec![0f32; rows];
        let ranges = w.split_panels(2);
        g.throughput(Throughput::Bytes(w.bytes() as u64));
        let id = BenchmarkId::new(format!("{rows}x{cols}/{name}"), isa.name());
        g.bench_function(id, |b| {
            b.iter(|| {
                std::thread::scope(|s| {
                    for (r, o) in ranges.iter().zip(w.split_out(&mut out, &ranges)) {
                        let (w, act, r) = (&w, &act, r.clone());
                        s.spawn(move || gemv(w, act, o, r, isa));
                    }
                })
            })
        });
    }
    g.finish();
}

fn bench_gemm(c: &mut Criterion) {
    let mut g = group(c, "gemm");
    for (rows, cols) in SHAPES {
        let act = activation(TOKENS, cols);
        for (name, ty, share) in FORMATS {
            if !valid(ty, rows, cols) {
                continue;
            }
            let w = pack(ty, share, rows, cols);
            let mut out = vec![0f32; rows * TOKENS];
            g.throughput(Throughput::Elements((2 * rows * cols * TOKENS) as u64));
            for isa in Isa::available() {
                if isa == Isa::Scalar && rows * cols > 128 * 896 {
                    continue;
                }
                let id = BenchmarkId::new(format!("{rows}x{cols}x{TOKENS}/{name}"), isa.name());
                g.bench_function(id, |b| {
                    b.iter(|| gemm(&w, &act, &mut out, rows, 0..w.panels(), black_box(isa)))
                });
            }
        }
    }
    g.finish();
}

/// A few tokens on the DRAM-sized shape: a verify step's matmuls, bound by reading the
/// weights, so GB/s beside gemv's says what the extra tokens cost.
fn bench_gemm_few(c: &mut Criterion) {
    let mut g = group(c, "gemm_few");
    let (rows, cols) = GEMV_EXTRA;
    let isa = Isa::detect();
    for (name, ty, share) in FORMATS {
        if !valid(ty, rows, cols) || ty == GgmlType::F16 {
            continue;
        }
        let w = pack(ty, share, rows, cols);
        g.throughput(Throughput::Bytes(w.bytes() as u64));
        for tokens in [2, 3, 4, 8, 9] {
            let act = activation(tokens, cols);
            let mut out = vec![0f32; rows * tokens];
            let id = BenchmarkId::new(format!("{rows}x{cols}x{tokens}/{name}"), isa.name());
            g.bench_function(id, |b| {
                b.iter(|| gemm(&w, &act, &mut out, rows, 0..w.panels(), black_box(isa)))
            });
        }
    }
    g.finish();
}

/// Sums a buffer (every byte loaded; the kernels crate's probe, AVX2 with the gemv
/// kernels' prefetch where the CPU has it).
fn read_bytes(buf: &[u8]) -> u64 {
    pocket_kernels::ops::read::read_sum(buf)
}

fn bench_bandwidth(c: &mut Criterion) {
    let mut g = group(c, "bandwidth");
    let len = 512 << 20;
    let buf: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    g.throughput(Throughput::Bytes(len as u64));
    for threads in [1usize, 2] {
        g.bench_function(BenchmarkId::new("read", format!("{threads}t")), |b| {
            b.iter(|| {
                if threads == 1 {
                    black_box(read_bytes(&buf));
                } else {
                    let chunk = len / threads;
                    std::thread::scope(|s| {
                        for part in buf.chunks(chunk) {
                            s.spawn(move || black_box(read_bytes(part)));
                        }
                    });
                }
            })
        });
    }
    g.finish();
}

/// Criterion with pprof-rs as its profiler: `cargo bench --bench matmul -- --profile-time 5
/// FILTER` runs each matching benchmark for 5 s under the sampler and writes
/// `target/criterion/<benchmark>/profile/flamegraph.svg` (no measurement, no report). A normal
/// `cargo bench` never starts the profiler.
fn config() -> Criterion {
    let c = Criterion::default();
    #[cfg(unix)]
    let c = c.with_profiler(pprof::criterion::PProfProfiler::new(
        999,
        pprof::criterion::Output::Flamegraph(None),
    ));
    c
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_bandwidth, bench_gemv, bench_gemm, bench_gemm_few
}
criterion_main!(benches);
