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
    /// Spins of an idle worker before it parks ([`Placement::poll`]).
    spin: u32,
}

/// Where the pool's threads run and how idle workers wait: llama.cpp's `--cpu-mask`,
/// `--cpu-strict` and `--poll`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The CPUs the pool may use, bit `i` for CPU `i`; 0: no mask (the process's CPUs).
    pub cpu_mask: u128,
    /// Each thread on its own CPU of the mask, in order, wrapping around (llama.cpp's
    /// `--cpu-strict 1`); otherwise every thread may run on any CPU of the mask.
    pub strict: bool,
    /// 0..=100, how long an idle worker spins for the next job before it parks on a
    /// condvar: 0 parks at once, 50 (the default, as llama.cpp's) spins 2^15 rounds, 100
    /// twice that. Spinning costs a busy core between tokens; parking costs a wake-up
    /// (tens of microseconds) per matmul when the pause was long enough to park.
    pub poll: u32,
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            cpu_mask: 0,
            strict: false,
            poll: 50,
        }
    }
}

impl Placement {
    /// The CPU ids in `cpu_mask`, lowest first.
    pub fn cpus(&self) -> Vec<usize> {
        (0..128).filter(|i| self.cpu_mask >> i & 1 == 1).collect()
    }

    /// Spins before parking for this poll level.
    pub fn spins(&self) -> u32 {
        (SPIN as u64 * self.poll.min(100) as u64 / 50) as u32
    }

    /// Parses a llama.cpp CPU mask: hexadecimal, with or without `0x` (`0x3`, `ff`).
    pub fn parse_mask(text: &str) -> Result<u128, MaskError> {
        let t = text.trim();
        let h = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        if h.is_empty() || h.len() > 32 {
            return Err(MaskError(text.to_string()));
        }
        u128::from_str_radix(h, 16).map_err(|_| MaskError(text.to_string()))
    }
}

/// A CPU mask that is not hexadecimal for at most 128 CPUs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad CPU mask `{0}` (hexadecimal, up to 128 CPUs)")]
pub struct MaskError(pub String);

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
        ThreadPool::with_placement(n, pin, Placement::default())
    }

    /// A pool of `n` threads placed by `p`. Without a mask or strict placement, `pin` keeps
    /// [`ThreadPool::new`]'s behaviour (thread `i` on core `i` when there are enough).
    /// With a mask, non-strict: every thread may run on any CPU of the mask (Linux only;
    /// ignored elsewhere). Strict: thread `i` on CPU `i mod k` of the mask's `k` CPUs (the
    /// process's CPUs when no mask), as far as the OS allows (macOS takes no hard pinning).
    pub fn with_placement(n: usize, pin: bool, p: Placement) -> ThreadPool {
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
            spin: p.spins(),
        });
        let _ = process_cores(); // read before this pool pins the caller
        let masked = p.cpu_mask != 0;
        let cores: Vec<core_affinity::CoreId> = if masked {
            p.cpus()
                .into_iter()
                .map(|id| core_affinity::CoreId { id })
                .collect()
        } else if pin || p.strict {
            process_cores().to_vec()
        } else {
            Vec::new()
        };
        // What thread `i` does: pin to one core, take the whole mask, or nothing.
        let place: Box<dyn Fn(usize) + Send + Sync> = if p.strict && !cores.is_empty() {
            let cores = cores.clone();
            Box::new(move |i| {
                core_affinity::set_for_current(cores[i % cores.len()]);
            })
        } else if masked {
            let mask = p.cpu_mask;
            Box::new(move |_| set_mask_for_current(mask))
        } else if pin && n > 1 && cores.len() >= n {
            let cores = cores.clone();
            Box::new(move |i| {
                core_affinity::set_for_current(cores[i]);
            })
        } else {
            Box::new(|_| {})
        };
        let place = Arc::new(place);
        if n > 1 || masked || p.strict {
            place(0);
        }
        let workers = (1..n)
            .map(|i| {
                let s = shared.clone();
                let place = place.clone();
                std::thread::Builder::new()
                    .name(format!("pocket-{i}"))
                    .spawn(move || {
                        place(i);
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

/// Lets the calling thread run on every CPU of `mask` (Linux; a no-op elsewhere).
fn set_mask_for_current(mask: u128) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use nix::sched::{sched_setaffinity, CpuSet};
        let mut set = CpuSet::new();
        for i in (0..128.min(CpuSet::count())).filter(|i| mask >> i & 1 == 1) {
            set.set(i).expect("index below CpuSet::count");
        }
        // A mask naming no CPU of this machine is refused by the kernel; the thread then
        // keeps the process's CPUs, as llama.cpp does when its mask cannot be applied.
        let _ = sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = mask;
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
            if spins < s.spin {
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

    #[test]
    fn placement_masks_and_poll() {
        assert_eq!(Placement::parse_mask("0x5").unwrap(), 5);
        assert_eq!(Placement::parse_mask("ff").unwrap(), 255);
        assert!(Placement::parse_mask("0x").is_err());
        assert!(Placement::parse_mask("zz").is_err());
        let p = Placement {
            cpu_mask: 0b1010,
            ..Placement::default()
        };
        assert_eq!(p.cpus(), [1, 3]);
        assert_eq!(Placement::default().spins(), SPIN);
        assert_eq!(Placement { poll: 0, ..p }.spins(), 0);
        // poll 0: workers park at once and still wake for every job.
        let pool = ThreadPool::with_placement(2, false, Placement { poll: 0, ..p });
        let hits = AtomicUsize::new(0);
        for _ in 0..200 {
            pool.run(|_| {
                hits.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(hits.load(Ordering::Relaxed), 400);
    }

    /// The CPUs each thread of a 2-thread pool placed by a one-CPU mask on `cpu` may run on.
    /// In a thread of its own: the pool pins its caller.
    fn cpus_seen(cpu: usize, strict: bool) -> Vec<Vec<usize>> {
        let p = Placement {
            cpu_mask: 1u128 << cpu,
            strict,
            poll: 50,
        };
        std::thread::spawn(move || {
            let pool = ThreadPool::with_placement(2, false, p);
            let seen: Vec<Mutex<Vec<usize>>> = (0..2).map(|_| Mutex::default()).collect();
            pool.run(|i| {
                let ids = core_affinity::get_core_ids().unwrap_or_default();
                *seen[i].lock().unwrap() = ids.iter().map(|c| c.id).collect();
            });
            seen.into_iter().map(|s| s.into_inner().unwrap()).collect()
        })
        .join()
        .unwrap()
    }

    /// Strict placement over a one-CPU mask puts every thread on that CPU.
    #[test]
    #[cfg(target_os = "linux")]
    fn strict_mask_pins_each_thread() {
        let Some(first) = process_cores().first().map(|c| c.id) else {
            return;
        };
        assert_eq!(cpus_seen(first, true), [[first], [first]]);
    }

    /// A non-strict mask (sched_setaffinity with the whole mask): every thread may run on
    /// the mask's CPUs, and on no other.
    #[test]
    #[cfg(target_os = "linux")]
    fn loose_mask_confines_every_thread() {
        let Some(last) = process_cores().last().map(|c| c.id) else {
            return;
        };
        assert_eq!(cpus_seen(last, false), [[last], [last]]);
    }
}
