//! Where the pool's threads run: llama.cpp's `--cpu-mask`, `--cpu-strict` and `--poll`,
//! and the process's cores as they were before any pool pinned a thread.

use super::core_class::CoreClasses;
use super::SPIN;

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

/// How the threads of a pool place themselves.
pub(super) struct Placer {
    /// What thread `i` does to place itself.
    pub place: Box<dyn Fn(usize) + Send + Sync>,
    /// The one CPU thread `i` is pinned to, for every thread; `None` when they float.
    pub cpus: Option<Vec<usize>>,
}

/// How thread `i` of an `n`-thread pool places itself: pinned to one core, given the whole
/// mask, or nothing. Without a mask or strict placement, `pin` puts thread `i` on the
/// `i`-th core, fastest core class first ([`CoreClasses::fastest_first`]: the caller, which
/// also runs the serial parts, on a big core), when there are at least `n` cores.
pub(super) fn placer(n: usize, pin: bool, p: Placement, classes: &CoreClasses) -> Placer {
    let _ = process_cores(); // read before this pool pins the caller
    let masked = p.cpu_mask != 0;
    let mut ids: Vec<usize> = if masked {
        p.cpus()
    } else if pin || p.strict {
        process_cores().iter().map(|c| c.id).collect()
    } else {
        Vec::new()
    };
    let pinned = |ids: Vec<usize>| {
        let cores: Vec<core_affinity::CoreId> =
            ids.iter().map(|&id| core_affinity::CoreId { id }).collect();
        Placer {
            place: Box::new(move |i| {
                core_affinity::set_for_current(cores[i % cores.len()]);
            }),
            cpus: Some(ids),
        }
    };
    if p.strict && !ids.is_empty() {
        pinned((0..n).map(|i| ids[i % ids.len()]).collect())
    } else if masked {
        let mask = p.cpu_mask;
        Placer {
            place: Box::new(move |_| set_mask_for_current(mask)),
            cpus: None,
        }
    } else if pin && n > 1 && ids.len() >= n {
        classes.fastest_first(&mut ids);
        ids.truncate(n);
        pinned(ids)
    } else {
        Placer {
            place: Box::new(|_| {}),
            cpus: None,
        }
    }
}
