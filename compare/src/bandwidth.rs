//! A quick read-bandwidth probe: sums a large buffer with 1 and with N threads and reports
//! GB/s (10^9 bytes/s), the roof decode speed is measured against.
//!
//! The sum is the kernels' `ops::read::read_sum` (several streams side by side with
//! software prefetch, as the gemv reads its weights), and each thread is pinned to its own
//! core of the process. Until 2026-12-07 the probe was a plain loop of u64 adds on
//! unpinned threads: it read 10.5 GB/s on one core of the Sapphire Rapids-class VM (the
//! 4-stream kernel 15.5), so decode showed at 135 % of the "roof"; and run after a bench
//! (whose pool pins the calling thread to one core, a mask its spawned threads inherit)
//! its two threads shared one core: 10.9 GB/s with 1 and with 2 threads.

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

/// The core probe thread `i` is pinned to: the process's cores in turn (not the calling
/// thread's mask, which a pool may have narrowed to one core).
fn probe_core(i: usize) -> Option<core_affinity::CoreId> {
    let cores = pocket_model::threadpool::process_cores();
    cores.get(i % cores.len().max(1)).copied()
}

/// One timed pass over `data` split across `threads` threads; GB/s.
fn pass(data: &[u8], threads: usize) -> f64 {
    let part = data.len().div_ceil(threads);
    let start = Instant::now();
    let total = std::thread::scope(|s| {
        let handles: Vec<_> = data
            .chunks(part)
            .enumerate()
            .map(|(i, chunk)| {
                let core = probe_core(i);
                s.spawn(move || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
                    pocket_kernels::ops::read::read_sum(black_box(chunk))
                })
            })
            .collect();
        handles
            .into_iter()
            .fold(0u64, |a, h| a.wrapping_add(h.join().expect("probe thread")))
    });
    black_box(total);
    data.len() as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// A probe's buffer, kept for repeated measurements (`pocket bench --roof` reads it after
/// every repetition).
pub struct ProbeBuffer(Vec<u8>);

impl ProbeBuffer {
    /// `bytes` of data, written, not just allocated, so every page is real before the
    /// timed reads.
    pub fn new(bytes: usize) -> ProbeBuffer {
        ProbeBuffer((0..bytes).map(|i| (i >> 3) as u8).collect())
    }

    /// GB/s reading the buffer with `threads` threads (each pinned to its own core of the
    /// process): the best of two passes.
    pub fn read_gbs(&self, threads: usize) -> f64 {
        (0..2)
            .map(|_| pass(&self.0, threads.max(1)))
            .fold(0.0, f64::max)
    }
}

/// Measures read bandwidth over a `bytes` buffer: the best of two passes with one thread
/// and with `threads` threads.
pub fn probe(bytes: usize, threads: u32) -> Bandwidth {
    let threads = threads.max(1);
    let buf = ProbeBuffer::new(bytes);
    Bandwidth {
        buffer_bytes: buf.0.len() as u64,
        single_gbs: buf.read_gbs(1),
        threads,
        multi_gbs: buf.read_gbs(threads as usize),
    }
}

/// [`probe`] with the default buffer and every available core.
pub fn probe_default() -> Bandwidth {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    probe(DEFAULT_BYTES, threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool pins its calling thread to one core; the probe's threads must still get a
    /// core each (they used to inherit the one-core mask and share it).
    #[test]
    fn probe_threads_get_distinct_cores_after_the_caller_is_pinned() {
        let cores = pocket_model::threadpool::process_cores();
        if cores.len() < 2 {
            eprintln!("SKIPPED: this process may run on {} core(s)", cores.len());
            return;
        }
        std::thread::spawn(|| {
            assert!(core_affinity::set_for_current(cores[0]));
            assert_eq!(core_affinity::get_core_ids().map(|c| c.len()), Some(1));
            assert_ne!(probe_core(0), probe_core(1));
            let bw = probe(8 << 20, 2);
            assert!(bw.single_gbs > 0.0 && bw.multi_gbs > 0.0);
        })
        .join()
        .unwrap();
    }
}
