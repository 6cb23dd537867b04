//! Shared helpers of pocket-compare's tests: the stored tool outputs of `tests/data`, the
//! fixtures of the pocket cache (a missing one fails the test with how to fetch it), and
//! the machine of the hand-built receipts.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pocket_compare::bandwidth::Bandwidth;
use pocket_compare::llama_bench::cache_dir;
use pocket_compare::receipt::{Machine, Receipt};
use pocket_compare::sysinfo::SysInfo;

/// `name` in this crate's `tests/data`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// `rel` in the pocket cache; missing, it fails the test saying to run `how`.
pub fn cached(rel: &str, how: &str) -> PathBuf {
    let path = cache_dir().join(rel);
    assert!(path.is_file(), "{} missing: run {how}", path.display());
    path
}

/// The SmolLM2-135M Q4_1 model of the fixtures.
pub fn smollm2() -> PathBuf {
    cached(
        "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "`bash tests/fixtures.sh`",
    )
}

/// A made-up bandwidth measurement (2 threads, 9 / 15 GB/s).
pub fn bandwidth() -> Bandwidth {
    Bandwidth {
        buffer_bytes: 512 << 20,
        single_gbs: 9.0,
        threads: 2,
        multi_gbs: 15.0,
    }
}

/// The machine `name` (this one's sysinfo) with `bandwidth`.
pub fn machine(name: &str, bandwidth: Option<Bandwidth>) -> Machine {
    Machine {
        name: name.into(),
        sysinfo: SysInfo::detect(),
        bandwidth,
    }
}

/// Why `text` does not load as a receipt.
pub fn load_err(text: &str) -> String {
    Receipt::from_json(text).unwrap_err().to_string()
}
