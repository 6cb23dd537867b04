//! The decode pool's dispatch cost against rayon's (issue #13: the pool's 3-line lifetime
//! erasure is the one `unsafe` outside the SIMD kernels and the mmap; rayon's safe
//! `broadcast` is the alternative it is weighed against).
//!
//! `cargo bench --bench pool`: 2 threads, one job of 16 items (a decode matmul's shape:
//! 8 row blocks per thread), each item spinning `us` µs (0: the bare dispatch; 2: about a
//! decode item of the MNN-Pocket shape). Time per job; 16 × 2 µs over 2 threads is 16 µs
//! of work.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pocket_model::threadpool::ThreadPool;
use std::hint::black_box;
use std::time::{Duration, Instant};

const ITEMS: usize = 16;

fn spin(us: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_micros(us) {
        black_box(());
    }
}

fn bench_dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let pool = ThreadPool::new(2, true);
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    for us in [0u64, 2] {
        g.bench_function(BenchmarkId::new("pocket_run_items", us), |b| {
            b.iter(|| pool.run_items(ITEMS, |_, _| spin(us)))
        });
        g.bench_function(BenchmarkId::new("rayon_broadcast", us), |b| {
            b.iter(|| {
                rayon.broadcast(|ctx| {
                    for _ in (ctx.index()..ITEMS).step_by(ctx.num_threads()) {
                        spin(us)
                    }
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_dispatch);
criterion_main!(benches);
