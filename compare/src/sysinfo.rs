//! The machine a comparison ran on: CPU model and flags, cores, memory, OS and
//! architecture, plus the two builds compared (pocket's commit, llama.cpp's build).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::llama_bench::{LlamaTools, Provisioned};

/// What the machine is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SysInfo {
    pub cpu_model: String,
    /// The CPU's feature flags as the OS lists them (`/proc/cpuinfo` flags or Features;
    /// `sysctl` on macOS), sorted.
    pub cpu_flags: Vec<String>,
    pub logical_cores: u32,
    /// Physical cores, where the OS says.
    pub physical_cores: Option<u32>,
    pub mem_total_bytes: Option<u64>,
    /// `std::env::consts::OS` (`linux`, `macos`, ...).
    pub os: String,
    /// `std::env::consts::ARCH` (`x86_64`, `aarch64`, ...).
    pub arch: String,
    /// Kernel release (`uname -r`), where available.
    pub kernel: Option<String>,
}

/// The SIMD flags that matter to pocket's kernels, out of `flags`.
pub fn simd_flags(flags: &[String]) -> Vec<String> {
    const SIMD: [&str; 14] = [
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
        "avx_vnni",
        "asimd",
        "asimddp",
        "i8mm",
        "sve",
        "fphp",
    ];
    let mut v: Vec<String> = flags
        .iter()
        .filter(|f| SIMD.contains(&f.as_str()) || f.starts_with("FEAT_"))
        .cloned()
        .collect();
    v.dedup();
    v
}

impl SysInfo {
    /// Reads the running machine.
    pub fn detect() -> SysInfo {
        let logical = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let mut info = SysInfo {
            cpu_model: "unknown".into(),
            cpu_flags: Vec::new(),
            logical_cores: logical,
            physical_cores: None,
            mem_total_bytes: None,
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            kernel: command_line("uname", &["-r"]),
        };
        if cfg!(target_os = "macos") {
            info.fill_from_sysctl();
        } else {
            if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
                info.fill_from_cpuinfo(&text);
            }
            if let Ok(text) = std::fs::read_to_string("/proc/meminfo") {
                info.mem_total_bytes = meminfo_total(&text);
            }
        }
        info
    }

    /// Model, flags and physical cores from `/proc/cpuinfo` text (x86 or ARM).
    pub fn fill_from_cpuinfo(&mut self, text: &str) {
        let mut flags = BTreeSet::new();
        let mut cores = BTreeSet::new();
        let mut physical_id = String::new();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "model name" | "Hardware" | "cpu model" if self.cpu_model == "unknown" => {
                    self.cpu_model = value.to_string();
                }
                "flags" | "Features" => flags.extend(value.split_whitespace().map(String::from)),
                "physical id" => physical_id = value.to_string(),
                "core id" => {
                    cores.insert((physical_id.clone(), value.to_string()));
                }
                "CPU part" if self.cpu_model == "unknown" => {
                    self.cpu_model = format!("ARM part {value}");
                }
                _ => {}
            }
        }
        self.cpu_flags = flags.into_iter().collect();
        if !cores.is_empty() {
            self.physical_cores = Some(cores.len() as u32);
        }
    }

    fn fill_from_sysctl(&mut self) {
        let get = |name: &str| command_line("sysctl", &["-n", name]);
        if let Some(m) = get("machdep.cpu.brand_string") {
            self.cpu_model = m;
        }
        self.physical_cores = get("hw.physicalcpu").and_then(|v| v.parse().ok());
        self.mem_total_bytes = get("hw.memsize").and_then(|v| v.parse().ok());
        let mut flags = BTreeSet::new();
        for key in ["machdep.cpu.features", "machdep.cpu.leaf7_features"] {
            if let Some(v) = get(key) {
                flags.extend(v.split_whitespace().map(|f| f.to_lowercase()));
            }
        }
        // Apple silicon: `hw.optional.arm.FEAT_DotProd: 1` and the like.
        if let Some(all) = command_line("sysctl", &["hw.optional"]) {
            for line in all.lines() {
                if let Some((k, v)) = line.split_once(':') {
                    if v.trim() == "1" {
                        let name = k.trim().rsplit('.').next().unwrap_or("");
                        flags.insert(name.to_string());
                    }
                }
            }
        }
        self.cpu_flags = flags.into_iter().collect();
    }
}

/// `MemTotal` from `/proc/meminfo` text, in bytes.
pub fn meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// pocket's commit: `git rev-parse --short=12 HEAD` in `repo` (with `-dirty` for local
/// changes), else `$POCKET_COMMIT`, else `unknown`.
pub fn pocket_commit(repo: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if let Some(hash) = git(&["rev-parse", "--short=12", "HEAD"]).filter(|h| !h.is_empty()) {
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        return if dirty { format!("{hash}-dirty") } else { hash };
    }
    std::env::var("POCKET_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// llama.cpp's build line (`BUILD_INFO` in the cache), or `unknown`.
pub fn llama_build_info() -> String {
    LlamaTools::locate()
        .ok()
        .and_then(|t| t.build_info())
        .unwrap_or_else(|| "unknown".into())
}

/// A name for this machine in results directories: `$POCKET_MACHINE`, else the host
/// name, reduced to `[A-Za-z0-9._-]`.
pub fn machine_name() -> String {
    let raw = std::env::var("POCKET_MACHINE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| command_line("uname", &["-n"]))
        .unwrap_or_else(|| "machine".into());
    sanitize(&raw)
}

/// `name` with every character outside `[A-Za-z0-9._-]` replaced by `-`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}
