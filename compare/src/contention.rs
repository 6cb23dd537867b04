//! A busy core, standing in for the app's own work on a phone (its UI thread, or a
//! slower little core): a thread pinned to one CPU that spins until dropped. `pocket bench
//! --contention CPU` and `pocket compare --contention CPU` measure with one running
//! (issue #19). Pinned through `core_affinity`, so the load sits on that CPU only and the
//! engines' threads on it get about half of it under Linux's fair scheduler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A CPU that is not one this process may run on.
#[derive(Debug, thiserror::Error)]
#[error("--contention {cpu}: not a CPU this process may run on (CPUs: {available:?})")]
pub struct ContentionError {
    pub cpu: usize,
    pub available: Vec<usize>,
}

/// The spinning thread; stops and joins when dropped.
pub struct BusyLoop {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BusyLoop {
    pub fn start(cpu: usize) -> Result<BusyLoop, ContentionError> {
        let available: Vec<usize> = pocket_model::threadpool::process_cores()
            .iter()
            .map(|c| c.id)
            .collect();
        if !available.contains(&cpu) {
            return Err(ContentionError { cpu, available });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("busy-cpu{cpu}"))
            .spawn(move || {
                core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
                let mut x = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
            .expect("spawn the busy loop");
        Ok(BusyLoop {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for BusyLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `Some(cpu)` when measuring under contention: the busy loop for its duration.
pub fn busy(cpu: Option<u32>) -> Result<Option<BusyLoop>, ContentionError> {
    cpu.map(|c| BusyLoop::start(c as usize)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_outside_the_process_is_refused() {
        let e = BusyLoop::start(100_000).err().expect("no CPU 100000");
        assert!(e.to_string().contains("--contention 100000"), "{e}");
    }

    /// The loop really burns its CPU: its own thread's CPU time grows while it runs, and
    /// the thread is gone once the loop is dropped.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_loop_spins_on_its_cpu_and_stops_when_dropped() {
        let cpu = pocket_model::threadpool::process_cores()[0].id;
        let name = format!("busy-cpu{cpu}");
        let b = BusyLoop::start(cpu).unwrap();
        // On a loaded machine (the other tests, a parallel build) the pinned loop may get
        // a fraction of its CPU: wait until it has burned 0.1 s, for up to 20 s.
        let start = std::time::Instant::now();
        let mut used = 0.0;
        while start.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            used = thread_cpu_seconds(&name).expect("the busy thread runs");
            if used > 0.1 {
                break;
            }
        }
        drop(b);
        assert!(
            used > 0.1,
            "the busy loop used {used} s of CPU in {:?}",
            start.elapsed()
        );
        // The drop joined the thread; the kernel drops its /proc/self/task entry a moment
        // after the join returns (seen once on a loaded machine: still listed right after).
        let joined = std::time::Instant::now();
        while thread_cpu_seconds(&name).is_some()
            && joined.elapsed() < std::time::Duration::from_secs(2)
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            thread_cpu_seconds(&name),
            None,
            "the busy thread outlived the drop"
        );
    }

    /// utime + stime of this process's thread named `name` (at most one such thread runs
    /// here: the other tests pin their loops elsewhere or not at all), `None` if none is.
    #[cfg(target_os = "linux")]
    fn thread_cpu_seconds(name: &str) -> Option<f64> {
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue; // the thread ended between the listing and the read
            };
            let (open, close) = (stat.find('(')?, stat.rfind(')')?);
            if &stat[open + 1..close] != name {
                continue;
            }
            let f: Vec<&str> = stat[close + 2..].split(' ').collect();
            // utime, stime: fields 14 and 15 of stat, 12 and 13 after the command name.
            let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
            return Some(ticks / 100.0);
        }
        None
    }
}
