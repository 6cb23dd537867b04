//! Core classes from fake sysfs trees (Snapdragon 8 Gen 3-like, uniform x86, hybrid x86,
//! missing and bad files) and fake macOS sysctls.

use super::*;
use std::path::PathBuf;

/// A fake `/sys/devices/system/cpu` removed on drop.
struct FakeSysfs(PathBuf);

impl FakeSysfs {
    fn new(name: &str) -> FakeSysfs {
        // Unique per tree: tests run in parallel threads of one process, and several build
        // the same layout (a shared directory was removed under another test's reads).
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("pocket-sysfs-{pid}-{name}-{k}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cpufreq")).unwrap(); // not a CPU
        std::fs::create_dir_all(dir.join("cpuidle")).unwrap();
        std::fs::write(dir.join("online"), "0-7\n").unwrap();
        FakeSysfs(dir)
    }
    /// `cpuN/<file>` holding `value` (the directories made as needed).
    fn put(&self, cpu: usize, file: &str, value: &str) -> &Self {
        let path = self.0.join(format!("cpu{cpu}/{file}"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
        self
    }
    fn classes(&self) -> Option<CoreClasses> {
        CoreClasses::from_sysfs(&self.0)
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Snapdragon 8 Gen 3's layout: cpu0-1 Cortex-A520, cpu2-4 A720 at 3.15 GHz, cpu5-6 A720
/// at 2.96 GHz, cpu7 Cortex-X4 (capacities of that shape, the fastest 1024).
fn snapdragon_8_gen_3() -> FakeSysfs {
    let t = FakeSysfs::new("sd8g3");
    let layout = [
        (291, 2_265_600),
        (887, 3_148_800),
        (836, 2_956_800),
        (1024, 3_302_400),
    ];
    let cluster = [0, 0, 1, 1, 1, 2, 2, 3];
    for (cpu, &k) in cluster.iter().enumerate() {
        let (cap, khz) = layout[k];
        t.put(cpu, "cpu_capacity", &cap.to_string());
        t.put(cpu, "cpufreq/cpuinfo_max_freq", &khz.to_string());
    }
    t.put(1, "online", "1");
    t
}

fn class(capacity: u64, cpus: &[usize]) -> CoreClass {
    CoreClass {
        capacity,
        count: cpus.len(),
        cpus: cpus.to_vec(),
    }
}

#[test]
fn snapdragon_prime_mid_little_from_capacity() {
    let t = snapdragon_8_gen_3();
    let c = t.classes().unwrap();
    assert_eq!(c.source, ClassSource::Capacity);
    // The two A720 frequency bins (887, 836: within 10%) are one class.
    let want = [
        class(1024, &[7]),
        class(887, &[2, 3, 4, 5, 6]),
        class(291, &[0, 1]),
    ];
    assert_eq!(c.classes, want);
    assert_eq!(
        c.to_string(),
        "3 core classes (cpu_capacity): 1024 x1 [7], 887 x5 [2-6], 291 x2 [0-1]"
    );
    assert_eq!((c.capacity_of(0), c.capacity_of(5)), (Some(291), Some(887)));
    assert_eq!(c.capacity_of(8), None);
    let mut ids: Vec<usize> = (0..8).collect();
    c.fastest_first(&mut ids);
    assert_eq!(ids, [7, 2, 3, 4, 5, 6, 0, 1]);
}

#[test]
fn snapdragon_class_choices() {
    let c = snapdragon_8_gen_3().classes().unwrap();
    let pick = |class, mask| c.choose(class, mask).map(|ch| (ch.mask, ch.threads));
    assert_eq!(pick(CpuClass::Big, 0), Ok((0b1111_1100, Some(6))));
    assert_eq!(pick(CpuClass::Prime, 0), Ok((0b1000_0000, Some(1))));
    assert_eq!(pick(CpuClass::All, 0), Ok((0, None)));
    assert_eq!(pick(CpuClass::All, 0x3), Ok((0x3, None)));
    // Intersected with --cpu-mask; an empty intersection is an error naming both.
    assert_eq!(pick(CpuClass::Big, 0x0f), Ok((0x0c, Some(2))));
    let e = c.choose(CpuClass::Big, 0x3).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--cpu-class big (CPUs 0xfc) and --cpu-mask 0x3 share no CPU"
    );
    assert!(c.choose(CpuClass::Big, 0).unwrap().note.is_none());
}

#[test]
fn two_classes_big_is_the_fast_one_and_restriction_drops_classes() {
    let c = snapdragon_8_gen_3().classes().unwrap();
    // The process may run on cpu0, 1 and 7 only (taskset): prime and little are left.
    let r = c.clone().restricted_to(&[0, 1, 7]).unwrap();
    assert_eq!(r.classes, [class(1024, &[7]), class(291, &[0, 1])]);
    assert_eq!(r.choose(CpuClass::Big, 0).unwrap().mask, 0x80);
    assert_eq!(r.choose(CpuClass::Prime, 0).unwrap().mask, 0x80);
    assert_eq!(c.clone().restricted_to(&[]), Some(c.clone()));
    assert_eq!(c.restricted_to(&[40]), None);
}

#[test]
fn uniform_x86_is_one_class_and_big_is_every_cpu() {
    let t = FakeSysfs::new("x86");
    for cpu in 0..4 {
        t.put(cpu, "cpufreq/cpuinfo_max_freq", "3000000");
    }
    let c = t.classes().unwrap();
    assert_eq!(c.source, ClassSource::MaxFrequency);
    assert_eq!(c.classes, [class(3_000_000, &[0, 1, 2, 3])]);
    let ch = c.choose(CpuClass::Big, 0x5).unwrap();
    assert_eq!((ch.mask, ch.threads), (0x5, None));
    let note = ch.note.unwrap();
    assert!(
        note.contains("one core class") && note.contains("`big` is every CPU"),
        "{note}"
    );
}

#[test]
fn hybrid_x86_by_max_frequency_with_favoured_cores() {
    let t = FakeSysfs::new("hybrid");
    // Two favoured P-cores at 5.1 GHz, two more at 4.9 (one class), four E-cores at 3.8.
    for (cpu, khz) in [5_100_000, 5_100_000, 4_900_000, 4_900_000]
        .iter()
        .enumerate()
    {
        t.put(cpu, "cpufreq/cpuinfo_max_freq", &khz.to_string());
    }
    for cpu in 4..8 {
        t.put(cpu, "cpufreq/cpuinfo_max_freq", "3800000");
    }
    let c = t.classes().unwrap();
    assert_eq!(
        c.classes,
        [
            class(5_100_000, &[0, 1, 2, 3]),
            class(3_800_000, &[4, 5, 6, 7])
        ]
    );
    assert_eq!(c.choose(CpuClass::Big, 0).unwrap().threads, Some(4));
}

#[test]
fn missing_and_bad_files() {
    // cpu_capacity on some CPUs only (and one unreadable): max frequency for all.
    let t = FakeSysfs::new("partial");
    t.put(0, "cpu_capacity", "1024")
        .put(1, "cpu_capacity", "junk");
    t.put(0, "cpufreq/cpuinfo_max_freq", "2000000");
    t.put(1, "cpufreq/cpuinfo_max_freq", "1000000");
    t.put(2, "cpufreq/cpuinfo_max_freq", "1000000");
    let c = t.classes().unwrap();
    assert_eq!(c.source, ClassSource::MaxFrequency);
    assert_eq!(
        c.classes,
        [class(2_000_000, &[0]), class(1_000_000, &[1, 2])]
    );
    // Neither file everywhere: one class of the CPUs listed; an offline CPU left out.
    let t = FakeSysfs::new("bare");
    t.put(0, "topology/core_id", "0")
        .put(1, "topology/core_id", "1");
    t.put(2, "online", "0")
        .put(1, "cpufreq/cpuinfo_max_freq", "1000000");
    let c = t.classes().unwrap();
    assert_eq!(c.source, ClassSource::Unknown);
    assert_eq!(c.classes, [class(1, &[0, 1])]);
    assert_eq!(c.to_string(), "1 core class (no per-CPU data): x2 [0-1]");
    // No CPU directories, or no directory at all.
    let empty = FakeSysfs::new("empty");
    assert_eq!(empty.classes(), None);
    assert_eq!(CoreClasses::from_sysfs(&empty.0.join("absent")), None);
}

/// A fake `sysctl -n NAME`.
fn sysctls(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |name| {
        let hit = pairs.iter().find(|(k, _)| *k == name);
        hit.map(|(_, v)| format!("{v}\n"))
    }
}

#[test]
fn apple_silicon_perf_levels() {
    // An M2 Pro: 8 performance and 4 efficiency cores.
    let m2 = sysctls(&[
        ("hw.nperflevels", "2"),
        ("hw.perflevel0.logicalcpu", "8"),
        ("hw.perflevel1.logicalcpu", "4"),
    ]);
    let c = CoreClasses::from_perf_levels(m2).unwrap();
    assert_eq!(c.source, ClassSource::PerfLevels);
    let level = |capacity, count| CoreClass {
        capacity,
        count,
        cpus: Vec::new(),
    };
    assert_eq!(c.classes, [level(2, 8), level(1, 4)]);
    assert_eq!(
        c.to_string(),
        "2 core classes (hw.perflevel): perflevel0 x8, perflevel1 x4"
    );
    // No CPU numbers on macOS: the mask stays the user's, the threads are the class's.
    let ch = c.choose(CpuClass::Big, 0x3).unwrap();
    assert_eq!((ch.mask, ch.threads), (0x3, Some(8)));
    assert_eq!(c.capacity_of(0), None);
    // An Intel Mac has no hw.nperflevels; a level without a count is no answer either.
    assert_eq!(CoreClasses::from_perf_levels(sysctls(&[])), None);
    let broken = sysctls(&[("hw.nperflevels", "2"), ("hw.perflevel0.logicalcpu", "8")]);
    assert_eq!(CoreClasses::from_perf_levels(broken), None);
}

#[test]
fn cpu_lists_as_linux_writes_them() {
    assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    assert_eq!(cpu_list(&[5]), "5");
}
