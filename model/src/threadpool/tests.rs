//! The pool's contract: every item exactly once, every broadcast share on its own thread,
//! a stalled worker costs a job nothing, placement as asked.

use super::*;
use std::time::{Duration, Instant};

#[test]
fn broadcast_runs_every_thread_once_per_call() {
    let pool = ThreadPool::new(3, false);
    let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    for _ in 0..1000 {
        pool.broadcast(|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
    }
    std::thread::sleep(std::time::Duration::from_millis(50)); // let workers park
    pool.broadcast(|i| {
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
        pool.broadcast(|i| {
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
        pool.broadcast(|_| {
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
        pool.broadcast(|i| {
            let ids = core_affinity::get_core_ids().unwrap_or_default();
            *seen[i].lock().unwrap() = ids.iter().map(|c| c.id).collect();
        });
        seen.into_iter().map(|s| s.into_inner().unwrap()).collect()
    })
    .join()
    .unwrap()
}

/// A 2-thread pool placed by a one-CPU mask on `cpu` runs every thread there and on no
/// other CPU (nothing to check where the process has no CPU to name).
fn assert_threads_only_on(cpu: Option<usize>, strict: bool) {
    if let Some(cpu) = cpu {
        assert_eq!(cpus_seen(cpu, strict), [[cpu], [cpu]]);
    }
}

/// Strict placement over a one-CPU mask puts every thread on that CPU.
#[test]
#[cfg(target_os = "linux")]
fn strict_mask_pins_each_thread() {
    assert_threads_only_on(process_cores().first().map(|c| c.id), true);
}

/// A non-strict mask (sched_setaffinity with the whole mask): every thread may run on
/// the mask's CPUs, and on no other.
#[test]
#[cfg(target_os = "linux")]
fn loose_mask_confines_every_thread() {
    assert_threads_only_on(process_cores().last().map(|c| c.id), false);
}

/// Counts, per item, how often it ran, and per thread how many items it ran.
struct Tally {
    items: Vec<AtomicUsize>,
    by_thread: Vec<AtomicUsize>,
}

impl Tally {
    fn new(items: usize, threads: usize) -> Tally {
        let zeros = |n| (0..n).map(|_| AtomicUsize::new(0)).collect();
        Tally {
            items: zeros(items),
            by_thread: zeros(threads),
        }
    }
    fn hit(&self, thread: usize, item: usize) {
        self.items[item].fetch_add(1, Ordering::Relaxed);
        self.by_thread[thread].fetch_add(1, Ordering::Relaxed);
    }
    fn each_item(&self) -> Vec<usize> {
        self.items
            .iter()
            .map(|h| h.load(Ordering::Relaxed))
            .collect()
    }
    fn of_thread(&self, t: usize) -> usize {
        self.by_thread[t].load(Ordering::Relaxed)
    }
}

#[test]
fn run_items_runs_every_item_once() {
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads, false);
        for n_items in [0, 1, 2, 5, 64, 1001] {
            for _ in 0..50 {
                let t = Tally::new(n_items, threads);
                pool.run_items(n_items, |me, i| t.hit(me, i));
                assert!(t.each_item().iter().all(|&h| h == 1), "{threads} {n_items}");
            }
        }
    }
}

/// A worker that has not started when the caller has done every item does not hold the
/// job up: the caller does them all and returns, long before the worker wakes.
#[test]
fn stalled_worker_does_not_delay_a_job() {
    let pool = ThreadPool::with_placement(
        2,
        false,
        Placement {
            poll: 0,
            ..Default::default()
        },
    );
    std::thread::sleep(Duration::from_millis(20)); // the worker parks
    pool.stall_workers(300_000);
    let t = Tally::new(100, 2);
    let start = Instant::now();
    pool.run_items(100, |me, i| t.hit(me, i));
    let took = start.elapsed();
    assert!(t.each_item().iter().all(|&h| h == 1));
    assert_eq!(t.of_thread(1), 0, "the stalled worker ran items");
    assert!(
        took < Duration::from_millis(300),
        "waited for the stalled worker: {took:?}"
    );
    // Once it is back, the worker takes part again (and never runs the old job).
    pool.stall_workers(0);
    std::thread::sleep(Duration::from_millis(400));
    let t = Tally::new(40, 2);
    // 40 items of 5 ms: 200 ms for the worker to wake, even on a loaded machine.
    pool.run_items(40, |me, i| {
        std::thread::sleep(Duration::from_millis(5));
        t.hit(me, i)
    });
    assert!(t.each_item().iter().all(|&h| h == 1));
    assert!(t.of_thread(1) > 0, "the worker never came back");
}

/// A slow worker: the fast thread takes over its items from the back.
#[test]
fn fast_thread_takes_a_slow_threads_items() {
    let pool = ThreadPool::new(2, false);
    let t = Tally::new(40, 2);
    pool.run_items(40, |me, i| {
        if me == 1 {
            std::thread::sleep(Duration::from_millis(5));
        }
        t.hit(me, i)
    });
    assert!(t.each_item().iter().all(|&h| h == 1));
    assert!(
        t.of_thread(0) > 20,
        "the caller ran {} of 40",
        t.of_thread(0)
    );
}

#[test]
fn a_panicking_item_panics_the_caller_after_all_are_done() {
    let pool = ThreadPool::new(2, false);
    let t = Tally::new(10, 2);
    let r = catch_unwind(AssertUnwindSafe(|| {
        pool.run_items(10, |me, i| {
            t.hit(me, i);
            assert!(i != 7, "item 7");
        })
    }));
    assert!(r.is_err());
    // The pool still works afterwards.
    let t = Tally::new(10, 2);
    pool.run_items(10, |me, i| t.hit(me, i));
    assert!(t.each_item().iter().all(|&h| h == 1));
}

/// A 3-thread pool whose threads sit on cores of capacities 1024, 887 and 291.
fn weighted_pool() -> ThreadPool {
    let p = Placement::default();
    let placer = placement::placer(3, false, p, CoreClasses::detect());
    ThreadPool::with_weights(3, placer, p, Some(vec![1024, 887, 291]))
}

/// Static shares follow the weights: one item each, the other 997 of 1000 split
/// 1024 : 887 : 291 (463.6, 401.3, 131.8 rounded down at the boundaries).
#[test]
fn weighted_pool_shares_follow_capacity() {
    let pool = weighted_pool();
    let shares: Vec<_> = (0..3).map(|i| pool.share(1000, i)).collect();
    assert_eq!(shares, [0..464, 464..867, 867..1000]);
    // Fewer items than threads: the equal split, as unweighted.
    assert_eq!((0..3).map(|i| pool.share(2, i).len()).sum::<usize>(), 2);
    // Equal cores: no weights, the equal split.
    let even = ThreadPool::new(3, false);
    assert_eq!(even.share(1000, 1), ThreadPool::split(1000, 3, 1));
}

/// Weighted shares change who starts where, never what an item computes: every item
/// once, and the same bits as one thread.
#[test]
fn weighted_pool_runs_every_item_once_with_the_same_bits() {
    let pool = weighted_pool();
    let value = |i: usize| (0..200).map(|k| ((i * 31 + k) as f32).sin()).sum::<f32>();
    let want: Vec<f32> = (0..301).map(value).collect();
    for _ in 0..50 {
        for n_items in [0, 1, 2, 3, 5, 64, 301] {
            let t = Tally::new(n_items, 3);
            pool.run_items(n_items, |me, i| t.hit(me, i));
            assert!(t.each_item().iter().all(|&h| h == 1), "{n_items}");
        }
        let mut got = vec![0f32; 301];
        let pieces = Disjoint::split(&mut got, std::iter::repeat_n(1, 301));
        pool.run_items(301, |_, i| pieces.piece(i)[0] = value(i));
        drop(pieces);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
