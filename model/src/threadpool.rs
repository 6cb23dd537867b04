//! A persistent fork/join pool for the forward pass.
//!
//! Why our own and not rayon: a decode step of a small model is ~150 matmuls of tens of
//! microseconds each. candle measured per-token rayon fork/join costing decode outright
//! (candle #3134: 53.6 t/s with all threads vs 69.5 t/s single-threaded without rayon)
//! and moved to a persistent spin-then-park pool (#3627); ferrox saw rayon, called from a
//! non-rayon thread, block on a mutex ~150 times per token (#167).
//!
//! Design: `n - 1` workers, each pinned to a core where the OS allows it. [`ThreadPool::run`]
//! publishes a job (`Fn(thread_index)`), bumps an epoch, runs share 0 itself (the caller
//! takes a share of the work), then waits for the workers' countdown. Workers spin briefly
//! on the epoch (the next matmul of the layer arrives within microseconds), then park on a
//! condvar (between tokens, or when the caller is idle). One `run` = one barrier; a layer
//! uses a handful of them (QKV, attention, output, gate/up, down).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// A job as the workers see it: lifetime erased, valid while `run` waits.
#[derive(Clone, Copy)]
struct JobRef(*const (dyn Fn(usize) + Sync));
// SAFETY: the pointee is `Sync` and `run` keeps it alive until every worker is done.
unsafe impl Send for JobRef {}

struct Shared {
    job: Mutex<Option<JobRef>>,
    epoch: AtomicU64,
    pending: AtomicUsize,
    sleepers: AtomicUsize,
    stop: AtomicBool,
    panicked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n: usize,
}

/// Spins (with `spin_loop` hints) before a worker parks.
const SPIN: u32 = 1 << 15;

impl ThreadPool {
    /// A pool of `n` threads including the caller (`n - 1` workers). `pin`: pin worker `i`
    /// to core `i` (and the caller to core 0) when there are at least `n` cores.
    pub fn new(n: usize, pin: bool) -> ThreadPool {
        let n = n.max(1);
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            epoch: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let cores = if pin {
            process_cores().to_vec()
        } else {
            Vec::new()
        };
        let pin = pin && n > 1 && cores.len() >= n;
        if pin {
            core_affinity::set_for_current(cores[0]);
        }
        let workers = (1..n)
            .map(|i| {
                let s = shared.clone();
                let core = pin.then(|| cores[i]);
                std::thread::Builder::new()
                    .name(format!("pocket-{i}"))
                    .spawn(move || {
                        if let Some(c) = core {
                            core_affinity::set_for_current(c);
                        }
                        worker(&s, i)
                    })
                    .expect("spawn pool thread")
            })
            .collect();
        ThreadPool { shared, workers, n }
    }

    pub fn threads(&self) -> usize {
        self.n
    }

    /// Runs `f(i)` for `i` in `0..threads()`, `f(0)` on the calling thread; returns when
    /// all are done. Panics (after all are done) if any share panicked.
    pub fn run<F: Fn(usize) + Sync>(&self, f: F) {
        if self.n == 1 {
            f(0);
            return;
        }
        let s = &*self.shared;
        let dynf: &(dyn Fn(usize) + Sync) = &f;
        // SAFETY: only erases the lifetime; we do not return before `pending` is 0, i.e.
        // before every worker has finished calling it, and the slot is cleared below.
        let ptr: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(dynf) };
        *s.job.lock().unwrap() = Some(JobRef(ptr));
        s.pending.store(self.n - 1, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap();
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        *s.job.lock().unwrap() = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a pool thread panicked");
        }
    }

    /// `n` near-equal contiguous ranges covering `0..len` (share `i` of [`Self::run`]).
    pub fn split(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
        len * i / n..len * (i + 1) / n
    }
}

/// The cores this process may run on, read once before any pool pins a thread.
///
/// Why cached: `core_affinity::get_core_ids` reads the *calling thread's* affinity mask,
/// and the first pool pins the caller to core 0, so a second pool created later in the
/// same process (a bench's next test) would see one core, skip pinning, and its workers
/// would inherit the caller's one-core mask: all threads of the pool on one core.
pub fn process_cores() -> &'static [core_affinity::CoreId] {
    static CORES: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

fn worker(s: &Shared, _index: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        loop {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            let e = s.epoch.load(Ordering::SeqCst);
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if spins < SPIN {
                std::hint::spin_loop();
            } else {
                let g = s.lock.lock().unwrap();
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                if s.epoch.load(Ordering::SeqCst) == seen && !s.stop.load(Ordering::SeqCst) {
                    drop(s.wake.wait(g).unwrap());
                } else {
                    drop(g);
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
                spins = 0;
            }
        }
        let job = *s.job.lock().unwrap();
        if let Some(JobRef(f)) = job {
            // SAFETY: `run` keeps the job alive until `pending` reaches 0.
            let f = unsafe { &*f };
            if catch_unwind(AssertUnwindSafe(|| f(_index))).is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap();
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_share_runs_once_per_call() {
        let pool = ThreadPool::new(3, false);
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..1000 {
            pool.run(|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50)); // let workers park
        pool.run(|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1001);
        }
    }

    /// A pool created after another one has pinned the caller still spreads its threads
    /// over distinct cores (regression: the second pool of a bench ran on one core).
    #[test]
    fn second_pool_still_pins_to_distinct_cores() {
        if process_cores().len() < 2 {
            return; // nothing to check on a one-core machine
        }
        for round in 0..2 {
            let pool = ThreadPool::new(2, true);
            let seen: Vec<Mutex<Vec<usize>>> = (0..2).map(|_| Mutex::default()).collect();
            pool.run(|i| {
                let ids = core_affinity::get_core_ids().unwrap_or_default();
                *seen[i].lock().unwrap() = ids.iter().map(|c| c.id).collect();
            });
            let (a, b) = (
                seen[0].lock().unwrap().clone(),
                seen[1].lock().unwrap().clone(),
            );
            assert_eq!((a.len(), b.len()), (1, 1), "round {round}: {a:?} {b:?}");
            assert_ne!(
                a, b,
                "round {round}: caller and worker pinned to the same core"
            );
        }
    }
}
