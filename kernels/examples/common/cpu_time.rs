//! CPU time of the calling thread, for the `*_cpu` examples: Linux
//! `/proc/thread-self/schedstat`, so the time slices a shared machine gives other jobs do
//! not count.

/// Nanoseconds this thread has run on a CPU.
pub fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// The least CPU nanoseconds per call of `f` over `reps` passes of `inner` calls each.
pub fn best_ns(reps: usize, inner: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t0 = cpu_ns();
        for _ in 0..inner {
            f();
        }
        best = best.min((cpu_ns() - t0) as f64 / inner as f64);
    }
    best
}
