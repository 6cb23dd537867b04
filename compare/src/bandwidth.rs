//! A quick read-bandwidth probe: sums a large buffer with 1 and with N threads and reports
//! GB/s (10^9 bytes/s), the roof decode speed is measured against.

use std::hint::black_box;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The default buffer: large enough to leave every cache behind.
pub const DEFAULT_BYTES: usize = 512 << 20;

/// Read bandwidth with one thread and with `threads` threads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    pub buffer_bytes: u64,
    pub single_gbs: f64,
    pub threads: u32,
    pub multi_gbs: f64,
}

impl Bandwidth {
    /// The bandwidth that bounds a run on `threads` threads (the single-thread figure for
    /// one, the all-thread figure otherwise).
    pub fn for_threads(&self, threads: u32) -> f64 {
        if threads <= 1 {
            self.single_gbs
        } else {
            self.multi_gbs
        }
    }
}

/// Sums `data` in eight independent lanes (the compiler turns this into vector adds).
fn sum(data: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let chunks = data.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = l.wrapping_add(*v);
        }
    }
    let tail: u64 = tail.iter().fold(0, |a, v| a.wrapping_add(*v));
    lanes.iter().fold(tail, |a, v| a.wrapping_add(*v))
}

/// One timed pass over `data` split across `threads` threads; GB/s.
fn pass(data: &[u64], threads: usize) -> f64 {
    let part = data.len().div_ceil(threads);
    let start = Instant::now();
    let total = std::thread::scope(|s| {
        let handles: Vec<_> = data
            .chunks(part)
            .map(|chunk| s.spawn(move || sum(black_box(chunk))))
            .collect();
        handles
            .into_iter()
            .fold(0u64, |a, h| a.wrapping_add(h.join().expect("probe thread")))
    });
    black_box(total);
    (data.len() * 8) as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// Measures read bandwidth over a `bytes` buffer: the best of two passes with one thread
/// and with `threads` threads.
pub fn probe(bytes: usize, threads: u32) -> Bandwidth {
    let threads = threads.max(1);
    // Written, not just allocated, so every page is real before the timed reads.
    let data: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let best = |t: usize| (0..2).map(|_| pass(&data, t)).fold(0.0, f64::max);
    Bandwidth {
        buffer_bytes: (data.len() * 8) as u64,
        single_gbs: best(1),
        threads,
        multi_gbs: best(threads as usize),
    }
}

/// [`probe`] with the default buffer and every available core.
pub fn probe_default() -> Bandwidth {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    probe(DEFAULT_BYTES, threads)
}
