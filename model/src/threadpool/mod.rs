//! A persistent fork/join pool for the forward pass.
//!
//! Why our own and not rayon: a decode step of a small model is ~150 matmuls of tens of
//! microseconds each. candle measured per-token rayon fork/join costing decode outright
//! (candle #3134: 53.6 t/s with all threads vs 69.5 t/s single-threaded without rayon)
//! and moved to a persistent spin-then-park pool (#3627); ferrox saw rayon, called from a
//! non-rayon thread, block on a mutex ~150 times per token (#167). Measured here (2
//! threads, a 20k-element job): this pool 15-17 us per dispatch, rayon `install`+`join`
//! 20-23 us, `broadcast` 24-28 us.
//!
//! Design: `n - 1` workers, each pinned to a core where the OS allows it. A job is
//! published behind a *gate* (an epoch, a closed flag and a count of the threads inside
//! the job, one atomic word); the caller takes a share of the work too. Workers spin
//! briefly on the epoch (the next matmul of the layer arrives within microseconds), then
//! park on a condvar (between tokens, or when the caller is idle).
//!
//! Two kinds of job:
//! - [`ThreadPool::run_items`] (every matmul and attention call): items claimed as the
//!   threads go ([`claims`]). When every item is claimed the caller closes the gate and waits
//!   only for the threads still inside; a worker that was preempted or is still waking
//!   never enters, so a busy core delays a step by at most the item a thread holds, not by
//!   the scheduler's time slice (issue #19: one busy core took 2-thread decode from 155 to
//!   64 t/s with a static split).
//! - [`ThreadPool::broadcast`]: `f(i)` on every thread `i` itself (placement, per-thread
//!   set-up); waits for all.
//!
//! Heterogeneous cores ([`core_class`]): when the threads are pinned to cores of different
//! classes, each thread's static share ([`ThreadPool::share`]) is in proportion to its
//! core's capacity, so a little core starts with fewer items than a big one; claiming
//! still evens out whatever the weights misjudge.

mod claims;
pub mod core_class;
mod disjoint;
mod placement;

pub use core_class::{ClassError, CoreClasses, CpuClass};
pub use disjoint::Disjoint;
pub use placement::{process_cores, MaskError, Placement};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use claims::Share;

/// Spins (with `spin_loop` hints) before a worker parks, or a waiting caller yields.
const SPIN: u32 = 1 << 15;

/// The gate word: `epoch << EPOCH_SHIFT | CLOSED? | threads inside the job`.
const EPOCH_SHIFT: u32 = 16;
const CLOSED: u64 = 1 << 15;
const INSIDE: u64 = CLOSED - 1;

/// A job as the workers see it: lifetime erased, valid while the gate counts them inside.
#[derive(Clone, Copy)]
struct JobRef(*const (dyn Fn(usize) + Sync));
// SAFETY: the pointee is `Sync`, and `dispatch` does not return (so the job lives) while
// any worker is inside the gate, the only state in which a worker dereferences it.
unsafe impl Send for JobRef {}

struct Shared {
    /// The job, and whether it is a [`ThreadPool::broadcast`].
    job: Mutex<Option<(JobRef, bool)>>,
    gate: AtomicU64,
    /// [`ThreadPool::broadcast`]: workers that have not run their share yet.
    pending: AtomicUsize,
    /// Workers that entered the current job.
    entered: AtomicUsize,
    /// [`ThreadPool::run_items`]: each thread's share of the items.
    shares: Vec<Share>,
    sleepers: AtomicUsize,
    stop: AtomicBool,
    panicked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    /// Spins of an idle worker before it parks: [`Placement::poll`]'s, or 0 while the
    /// pool is in its contended mode ([`Contention`]).
    spin: AtomicU32,
    /// Tests: workers sleep this long before entering a job (a stalled core).
    #[cfg(test)]
    stall_us: AtomicU64,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n: usize,
    contention: Contention,
    /// Thread `i`'s core capacity when the threads are pinned to cores of different
    /// classes; `None`: equal shares.
    weights: Option<Vec<u64>>,
}

/// When a core is shared (the app's own work, a little core, another process), a spinning
/// worker burns its time slice waiting and is then preempted in the middle of an item, and
/// the caller waits for the scheduler to give the core back (milliseconds). A parked worker
/// instead wakes with the scheduler's preference for sleepers and runs its items at once.
/// Measured on MNN-Pocket Q4_1 tg64 with a busy loop on the worker's core (2 threads):
/// spinning 47-49 t/s, parking 61-67 t/s, one thread 50-57 t/s; but quiet, parking costs a
/// wake-up per matmul (75 vs 101-111 t/s). A stall is a wait of more than [`STALL`] plus
/// two of the caller's items (prefill items are long; a worker finishing its last one is
/// not late). So the pool spins, and switches to parking for
/// [`PARKED_JOBS`] jobs when it sees two stalls within [`STALL_WINDOW`] jobs: a worker inside a job for more than
/// [`STALL`] after the caller ran out of items, or a worker missing a job that took the
/// caller more than [`MISSED`]; then it tries spinning again.
struct Contention {
    /// The spin budget of [`Placement::poll`].
    base: u32,
    /// Jobs left in the parking mode.
    parked_for: AtomicU32,
    /// The job count at the last stall, and the job count.
    last_stall: AtomicU64,
    jobs: AtomicU64,
}

const STALL: Duration = Duration::from_micros(300);
const MISSED: Duration = Duration::from_micros(200);
const PARKED_JOBS: u32 = 1024;
/// Two stalls at most this many jobs apart switch to parking.
const STALL_WINDOW: u64 = 256;

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
    /// Threads pinned to cores of different classes get static shares in proportion to
    /// their capacities ([`ThreadPool::share`]).
    pub fn with_placement(n: usize, pin: bool, p: Placement) -> ThreadPool {
        let classes = CoreClasses::detect();
        let placer = placement::placer(n.max(1), pin, p, classes);
        let weights = placer.cpus.as_ref().and_then(|cpus| {
            let w: Vec<u64> = cpus
                .iter()
                .map(|&c| classes.capacity_of(c))
                .collect::<Option<_>>()?;
            w.iter().any(|&x| x != w[0]).then_some(w)
        });
        ThreadPool::with_weights(n, placer, p, weights)
    }

    /// A pool of `n` threads placed by `placer`, with these static-share weights.
    fn with_weights(
        n: usize,
        placer: placement::Placer,
        p: Placement,
        weights: Option<Vec<u64>>,
    ) -> ThreadPool {
        let n = n.max(1);
        assert!((n as u64) < INSIDE, "pool of {n} threads");
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            gate: AtomicU64::new(CLOSED),
            pending: AtomicUsize::new(0),
            entered: AtomicUsize::new(0),
            shares: (0..n).map(|_| Share::default()).collect(),
            sleepers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            spin: AtomicU32::new(p.spins()),
            #[cfg(test)]
            stall_us: AtomicU64::new(0),
        });
        let place: Arc<dyn Fn(usize) + Send + Sync> = Arc::from(placer.place);
        if n > 1 || p.cpu_mask != 0 || p.strict {
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
        let contention = Contention {
            base: p.spins(),
            parked_for: AtomicU32::new(0),
            last_stall: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
        };
        ThreadPool {
            shared,
            workers,
            n,
            contention,
            weights: weights.filter(|w| w.len() == n),
        }
    }

    pub fn threads(&self) -> usize {
        self.n
    }

    /// Runs `f(thread, item)` once for every item of `0..n_items`, spread over the threads
    /// as [`claims`] describes (thread `i` starts on the items of `share(n_items, i)`),
    /// the caller taking part; returns when every item is done. `thread` is the index of
    /// the thread running the item (for per-thread scratch). Panics (after all are done)
    /// if any item panicked.
    pub fn run_items<F: Fn(usize, usize) + Sync>(&self, n_items: usize, f: F) {
        if self.n == 1 || n_items == 1 {
            (0..n_items).for_each(|i| f(0, i));
            return;
        }
        let s = &*self.shared;
        for (i, share) in s.shares.iter().enumerate() {
            share.set(self.share(n_items, i));
        }
        let mine = AtomicUsize::new(0); // items the caller ran (a stall is relative to one)
        let body = |me: usize| {
            claims::claim_all(&s.shares, me, |i| {
                f(me, i);
                if me == 0 {
                    mine.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        self.dispatch(&body, false, &mine);
    }

    /// Runs `f(i)` on thread `i` for every `i` in `0..threads()`, `f(0)` on the calling
    /// thread; returns when all are done. Panics (after all are done) if any panicked.
    pub fn broadcast<F: Fn(usize) + Sync>(&self, f: F) {
        if self.n == 1 {
            f(0);
            return;
        }
        self.shared.pending.store(self.n - 1, Ordering::SeqCst);
        self.dispatch(&f, true, &AtomicUsize::new(1));
    }

    /// Publishes `f`, runs `f(0)`, then waits: for every worker to have run (`every`), or
    /// only for the workers inside the gate once the caller's `f(0)` has returned.
    /// `caller_items`: how many items `f(0)` ran, once it has returned (a worker is late
    /// when the caller waits for it much longer than an item takes).
    fn dispatch(&self, f: &(dyn Fn(usize) + Sync), every: bool, caller_items: &AtomicUsize) {
        let s = &*self.shared;
        // SAFETY: only erases the lifetime. We do not return before the gate is closed
        // and no worker is inside it; a worker dereferences the job only while inside.
        let ptr: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
        *s.job.lock().unwrap() = Some((JobRef(ptr), every));
        // Open the next epoch (the gate is closed and empty between jobs).
        let epoch = (s.gate.load(Ordering::Relaxed) >> EPOCH_SHIFT) + 1;
        s.gate.store(epoch << EPOCH_SHIFT, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap();
            s.wake.notify_all();
        }
        let t0 = Instant::now();
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        if every {
            wait_until(|| s.pending.load(Ordering::Acquire) == 0);
        }
        let t1 = Instant::now();
        let g = s.gate.fetch_or(CLOSED, Ordering::SeqCst);
        // Nobody entered the job: the gate's count of threads inside never rose (the
        // workers leave it before we close, so read `entered` instead).
        let missed = s.entered.swap(0, Ordering::Relaxed) == 0 && g & INSIDE == 0;
        wait_until(|| s.gate.load(Ordering::Acquire) & INSIDE == 0);
        let work = t1 - t0;
        let item = work / caller_items.load(Ordering::Relaxed).max(1) as u32;
        let stalled = t1.elapsed() > STALL + 2 * item || (missed && work > MISSED);
        self.adapt(stalled);
        *s.job.lock().unwrap() = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a pool thread panicked");
        }
    }

    /// Spin or park ([`Contention`]), after a job that `stalled` or not.
    fn adapt(&self, stalled: bool) {
        let c = &self.contention;
        let spin = &self.shared.spin;
        let left = c.parked_for.load(Ordering::Relaxed);
        let job = c.jobs.fetch_add(1, Ordering::Relaxed) + 1;
        // One stall can be anything (a page fault, a kernel thread); two close together
        // are a shared core.
        let repeated = stalled && {
            let last = c.last_stall.swap(job, Ordering::Relaxed);
            last > 0 && job - last <= STALL_WINDOW
        };
        if repeated && c.base > 0 {
            c.parked_for.store(PARKED_JOBS, Ordering::Relaxed);
            spin.store(0, Ordering::Relaxed);
        } else if left > 0 {
            c.parked_for.store(left - 1, Ordering::Relaxed);
            if left == 1 {
                spin.store(c.base, Ordering::Relaxed);
            }
        }
    }

    /// Whether the pool is in its contended (parking) mode.
    pub fn parking(&self) -> bool {
        self.contention.parked_for.load(Ordering::Relaxed) > 0
    }

    /// Thread `i`'s static share of `n_items` items (where it starts, and the items it
    /// keeps from step to step): [`ThreadPool::split`] when its cores are alike, else in
    /// proportion to their capacities with at least one item each when there are enough
    /// (`claims::weighted_split`). The shares tile `0..n_items` in thread order.
    pub fn share(&self, n_items: usize, i: usize) -> std::ops::Range<usize> {
        match &self.weights {
            Some(w) => claims::weighted_split(n_items, w, i),
            None => Self::split(n_items, self.n, i),
        }
    }

    /// `n` near-equal contiguous ranges covering `0..len`.
    pub fn split(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
        len * i / n..len * (i + 1) / n
    }

    /// Tests: make every worker sleep `us` microseconds before it enters a job.
    #[cfg(test)]
    fn stall_workers(&self, us: u64) {
        self.shared.stall_us.store(us, Ordering::SeqCst);
    }
}

/// Spins, then yields, until `done()`.
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins += 1;
        if spins < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Enters the job of `epoch` if its gate is still open: one more thread inside.
fn enter(s: &Shared, epoch: u64) -> bool {
    let mut g = s.gate.load(Ordering::Acquire);
    loop {
        if g >> EPOCH_SHIFT != epoch || g & CLOSED != 0 {
            return false;
        }
        match s
            .gate
            .compare_exchange_weak(g, g + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                s.entered.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            Err(now) => g = now,
        }
    }
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        let epoch = loop {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            let e = s.gate.load(Ordering::SeqCst) >> EPOCH_SHIFT;
            if e != seen {
                break e;
            }
            spins += 1;
            if spins < s.spin.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            } else {
                let g = s.lock.lock().unwrap();
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                let unchanged = s.gate.load(Ordering::SeqCst) >> EPOCH_SHIFT == seen;
                if unchanged && !s.stop.load(Ordering::SeqCst) {
                    drop(s.wake.wait(g).unwrap());
                } else {
                    drop(g);
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
                spins = 0;
            }
        };
        seen = epoch;
        #[cfg(test)]
        {
            let us = s.stall_us.load(Ordering::SeqCst);
            if us > 0 {
                std::thread::sleep(std::time::Duration::from_micros(us));
            }
        }
        if !enter(s, epoch) {
            continue; // the caller finished the job without us
        }
        let job = *s.job.lock().unwrap();
        if let Some((JobRef(f), every)) = job {
            // SAFETY: we are inside the gate, so `dispatch` keeps the job alive.
            let f = unsafe { &*f };
            if catch_unwind(AssertUnwindSafe(|| f(index))).is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
            if every {
                s.pending.fetch_sub(1, Ordering::Release);
            }
        }
        s.gate.fetch_sub(1, Ordering::Release);
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
mod tests;
