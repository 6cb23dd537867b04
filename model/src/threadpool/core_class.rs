//! Core classes of a heterogeneous CPU (big.LITTLE phones, Apple silicon, hybrid x86),
//! as far as the OS tells them, and the `--cpu-class prime|big|all` choice over them.
//!
//! Where they come from:
//! - Linux / Android: `/sys/devices/system/cpu/cpuN/cpu_capacity` (arm64 exposes each
//!   CPU's capacity, 1024 for the fastest; recent x86 kernels expose it too), else
//!   `cpuN/cpufreq/cpuinfo_max_freq` (kHz). Offline CPUs (`cpuN/online` = 0) are left out.
//! - macOS: `sysctl hw.nperflevels` and `hw.perflevelN.logicalcpu` (perflevel0 is the
//!   performance cores). macOS numbers no CPUs for affinity, so a class there is a count.
//! - Elsewhere, or when neither file is there for every CPU: one class.
//!
//! CPUs whose value is within 10% of the fastest CPU of a class join it: the frequency
//! bins of one cluster (Snapdragon 8 Gen 3's five Cortex-A720 at 3.15 and 2.96 GHz) and a
//! preferred core's boost (Intel's favoured cores, AMD's CPPC ranking) are one class.

use std::fmt;
use std::path::Path;

/// What the per-CPU values of [`CoreClasses`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassSource {
    /// Linux `cpu_capacity` (1024 = the fastest CPU of the machine).
    Capacity,
    /// Linux `cpufreq/cpuinfo_max_freq`, kHz.
    MaxFrequency,
    /// macOS performance levels; the value is a rank (highest = perflevel0).
    PerfLevels,
    /// Nothing exposed: one class.
    Unknown,
}

impl fmt::Display for ClassSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClassSource::Capacity => "cpu_capacity",
            ClassSource::MaxFrequency => "cpuinfo_max_freq kHz",
            ClassSource::PerfLevels => "hw.perflevel",
            ClassSource::Unknown => "no per-CPU data",
        })
    }
}

/// CPUs of one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreClass {
    /// The highest value of its CPUs (the unit of [`ClassSource`]).
    pub capacity: u64,
    /// Logical CPUs in the class.
    pub count: usize,
    /// Their CPU ids, lowest first; empty where the OS numbers none (macOS).
    pub cpus: Vec<usize>,
}

/// The machine's core classes, fastest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreClasses {
    pub source: ClassSource,
    pub classes: Vec<CoreClass>,
}

/// `--cpu-class`: which classes the pool may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuClass {
    /// The fastest class only (a phone's prime core(s)).
    Prime,
    /// Every class but the slowest (no efficiency cores); with two classes, the fastest.
    Big,
    /// Every CPU.
    #[default]
    All,
}

impl fmt::Display for CpuClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CpuClass::Prime => "prime",
            CpuClass::Big => "big",
            CpuClass::All => "all",
        })
    }
}

/// What a [`CpuClass`] turns into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassChoice {
    /// The pool's CPU mask (0: no mask); the user's mask where the class changes nothing
    /// or the OS numbers no CPUs.
    pub mask: u128,
    /// The default thread count: the class's CPUs; `None` keeps the usual default.
    pub threads: Option<usize>,
    /// Said once on stderr: the class asked for is every CPU here.
    pub note: Option<String>,
}

/// A class and a CPU mask that share no CPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--cpu-class {class} (CPUs {class_mask:#x}) and --cpu-mask {mask:#x} share no CPU")]
pub struct ClassError {
    pub class: CpuClass,
    pub class_mask: u128,
    pub mask: u128,
}

/// Two values are one class when the lower is at least this fraction (in tenths) of the
/// class's highest.
const SAME_CLASS_TENTHS: u64 = 9;

impl CoreClasses {
    /// The classes of this machine's CPUs that this process may run on, read once.
    pub fn detect() -> &'static CoreClasses {
        static CLASSES: std::sync::OnceLock<CoreClasses> = std::sync::OnceLock::new();
        CLASSES.get_or_init(|| {
            let allowed: Vec<usize> = super::process_cores().iter().map(|c| c.id).collect();
            let found = if cfg!(any(target_os = "linux", target_os = "android")) {
                CoreClasses::from_sysfs(Path::new("/sys/devices/system/cpu"))
                    .and_then(|c| c.restricted_to(&allowed))
            } else if cfg!(target_os = "macos") {
                CoreClasses::from_perf_levels(sysctl)
            } else {
                None
            };
            found.unwrap_or_else(|| {
                let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                CoreClasses::uniform(allowed, n)
            })
        })
    }

    /// One class of `count` CPUs (`cpus` where known).
    fn uniform(cpus: Vec<usize>, count: usize) -> CoreClasses {
        let count = count.max(cpus.len()).max(1);
        CoreClasses {
            source: ClassSource::Unknown,
            classes: vec![CoreClass {
                capacity: 1,
                count,
                cpus,
            }],
        }
    }

    /// The classes under a Linux sysfs CPU directory (`/sys/devices/system/cpu`, or a
    /// fake tree); `None` when it lists no CPU.
    pub fn from_sysfs(root: &Path) -> Option<CoreClasses> {
        let mut ids: Vec<usize> = std::fs::read_dir(root)
            .ok()?
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("cpu")?
                    .parse()
                    .ok()
            })
            .filter(|&id: &usize| id < 128) // the pool's masks name 128 CPUs
            .filter(|id| read_u64(&root.join(format!("cpu{id}/online"))) != Some(0))
            .collect();
        if ids.is_empty() {
            return None;
        }
        ids.sort_unstable();
        let read_all = |file: &str| -> Option<Vec<u64>> {
            ids.iter()
                .map(|id| read_u64(&root.join(format!("cpu{id}/{file}"))))
                .collect()
        };
        let (source, values) = if let Some(v) = read_all("cpu_capacity") {
            (ClassSource::Capacity, v)
        } else if let Some(v) = read_all("cpufreq/cpuinfo_max_freq") {
            (ClassSource::MaxFrequency, v)
        } else {
            let n = ids.len();
            return Some(CoreClasses::uniform(ids, n));
        };
        Some(CoreClasses::group(source, ids.into_iter().zip(values)))
    }

    /// The classes of macOS's performance levels, read through `sysctl(name)` (the value
    /// of a sysctl, `None` when there is none: Intel Macs have no `hw.nperflevels`).
    pub fn from_perf_levels(sysctl: impl Fn(&str) -> Option<String>) -> Option<CoreClasses> {
        let count = |name: &str| sysctl(name)?.trim().parse::<usize>().ok();
        let levels = count("hw.nperflevels")?;
        let classes = (0..levels)
            .map(|l| {
                Some(CoreClass {
                    capacity: (levels - l) as u64,
                    count: count(&format!("hw.perflevel{l}.logicalcpu"))?,
                    cpus: Vec::new(),
                })
            })
            .filter(|c| c.as_ref().is_none_or(|c| c.count > 0))
            .collect::<Option<Vec<_>>>()?;
        (!classes.is_empty()).then_some(CoreClasses {
            source: ClassSource::PerfLevels,
            classes,
        })
    }

    /// `(cpu, value)` pairs grouped into classes, fastest first.
    fn group(source: ClassSource, cpus: impl Iterator<Item = (usize, u64)>) -> CoreClasses {
        let mut cpus: Vec<(usize, u64)> = cpus.collect();
        cpus.sort_by_key(|&(id, v)| (std::cmp::Reverse(v), id));
        let mut classes: Vec<CoreClass> = Vec::new();
        for (id, v) in cpus {
            match classes.last_mut() {
                Some(c) if v * 10 >= c.capacity * SAME_CLASS_TENTHS => {
                    c.cpus.push(id);
                    c.count += 1;
                }
                _ => classes.push(CoreClass {
                    capacity: v,
                    count: 1,
                    cpus: vec![id],
                }),
            }
        }
        for c in &mut classes {
            c.cpus.sort_unstable();
        }
        CoreClasses { source, classes }
    }

    /// These classes without the CPUs outside `allowed` (the process's affinity); all of
    /// them when `allowed` is empty (unknown); `None` when none is left.
    fn restricted_to(mut self, allowed: &[usize]) -> Option<CoreClasses> {
        if allowed.is_empty() {
            return Some(self);
        }
        for c in &mut self.classes {
            c.cpus.retain(|id| allowed.contains(id));
            c.count = c.cpus.len();
        }
        self.classes.retain(|c| c.count > 0);
        (!self.classes.is_empty()).then_some(self)
    }

    /// The capacity of CPU `cpu`'s class, where the OS numbers CPUs.
    pub fn capacity_of(&self, cpu: usize) -> Option<u64> {
        let c = self.classes.iter().find(|c| c.cpus.contains(&cpu))?;
        Some(c.capacity)
    }

    /// The CPUs of the classes `class` names, where the OS numbers them.
    fn picked(&self, class: CpuClass) -> &[CoreClass] {
        let n = self.classes.len();
        match class {
            CpuClass::Prime => &self.classes[..1.min(n)],
            CpuClass::Big => &self.classes[..n.saturating_sub(1).max(1).min(n)],
            CpuClass::All => &self.classes,
        }
    }

    /// `class` as a CPU mask within the user's `mask` (0: none) and a default thread count.
    pub fn choose(&self, class: CpuClass, mask: u128) -> Result<ClassChoice, ClassError> {
        let unchanged = ClassChoice {
            mask,
            threads: None,
            note: None,
        };
        if class == CpuClass::All {
            return Ok(unchanged);
        }
        if self.classes.len() <= 1 {
            return Ok(ClassChoice {
                note: Some(format!(
                    "cpu-class: one core class here ({}); `{class}` is every CPU",
                    self.source
                )),
                ..unchanged
            });
        }
        let picked = self.picked(class);
        if self.source == ClassSource::PerfLevels {
            let threads = picked.iter().map(|c| c.count).sum();
            return Ok(ClassChoice {
                threads: Some(threads),
                ..unchanged
            });
        }
        let class_mask = picked
            .iter()
            .flat_map(|c| &c.cpus)
            .fold(0u128, |m, &id| m | 1 << id);
        let chosen = if mask == 0 {
            class_mask
        } else {
            class_mask & mask
        };
        if chosen == 0 {
            return Err(ClassError {
                class,
                class_mask,
                mask,
            });
        }
        Ok(ClassChoice {
            mask: chosen,
            threads: Some(chosen.count_ones() as usize),
            note: None,
        })
    }

    /// `ids` reordered fastest class first (stable: in their order within a class).
    pub fn fastest_first(&self, ids: &mut [usize]) {
        ids.sort_by_key(|&id| std::cmp::Reverse(self.capacity_of(id).unwrap_or(0)));
    }
}

/// `3 core classes (cpu_capacity): 1024 x1 [7], 887 x5 [2-6], 291 x2 [0-1]`.
impl fmt::Display for CoreClasses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.classes.len();
        let plural = if n == 1 { "" } else { "es" };
        write!(f, "{n} core class{plural} ({}):", self.source)?;
        for (i, c) in self.classes.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            match self.source {
                ClassSource::PerfLevels => write!(f, "{sep}perflevel{i} x{}", c.count)?,
                ClassSource::Unknown => write!(f, "{sep}x{}", c.count)?,
                _ => write!(f, "{sep}{} x{}", c.capacity, c.count)?,
            }
            if !c.cpus.is_empty() {
                write!(f, " [{}]", cpu_list(&c.cpus))?;
            }
        }
        Ok(())
    }
}

/// `0-3,6` as Linux lists CPUs (`ids` sorted).
fn cpu_list(ids: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == id => *end = id,
            _ => runs.push((id, id)),
        }
    }
    let show = |&(a, b): &(usize, usize)| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    runs.iter().map(show).collect::<Vec<_>>().join(",")
}

/// A file holding one non-negative integer.
fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of macOS sysctl `name` (`sysctl -n`), through the `sysctl` command: no FFI.
fn sysctl(name: &str) -> Option<String> {
    let out = std::process::Command::new("sysctl")
        .args(["-n", name])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
#[path = "core_class_tests.rs"]
mod tests;
