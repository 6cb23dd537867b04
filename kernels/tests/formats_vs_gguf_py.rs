//! pocket's block formats against an independent implementation: the `gguf` Python
//! package's numpy (de)quantizers, run by `tests/oracle/dequant.py` on random blocks,
//! on real tensors of the two fixture models, and on random data to quantize.
//! Dequantized f32 must match bit for bit (NaN matches any NaN); quantized bytes exactly.
//!
//! Needs the fixtures: `bash tests/fixtures.sh` (env `POCKET_CACHE`, default
//! `~/.cache/pocket`; env `POCKET_PYTHON` overrides the venv's Python).

use std::path::{Path, PathBuf};
use std::process::Command;

use pocket_kernels::formats::{dequantize, quantize};
use pocket_kernels::GgmlType;

mod common;
use common::cache_dir;

const MODELS: [&str; 2] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m-q4_k_m.gguf",
];

/// The oracle's Python and the cache, or a failure that says how to provide them.
fn fixtures() -> (PathBuf, PathBuf) {
    let cache = cache_dir();
    let python = std::env::var_os("POCKET_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("venv/bin/python"));
    let mut missing: Vec<String> = Vec::new();
    if !python.exists() {
        missing.push(format!("Python {}", python.display()));
    }
    for m in MODELS {
        let path = cache.join("models").join(m);
        if !path.exists() {
            missing.push(format!("model {}", path.display()));
        }
    }
    assert!(
        missing.is_empty(),
        "test fixtures missing ({}): run `bash tests/fixtures.sh` from the repository root \
         (POCKET_CACHE={})",
        missing.join(", "),
        cache.display()
    );
    (python, cache)
}

/// Equal bits, or both NaN (payloads may differ between numpy and Rust conversions).
fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Case {
    kind: String,
    ty: GgmlType,
    label: String,
    input: Vec<u8>,
    expected: Vec<u8>,
}

fn run_oracle(python: &Path, cache: &Path, out: &Path) -> Vec<Case> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/dequant.py");
    let status = Command::new(python)
        .arg(&script)
        .arg(out)
        .arg(cache)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): run `bash tests/fixtures.sh`",
                python.display()
            )
        });
    assert!(
        status.success(),
        "{} failed ({status}); if `gguf` or numpy is missing, run `bash tests/fixtures.sh`",
        script.display()
    );
    let manifest = std::fs::read_to_string(out.join("manifest.txt")).unwrap();
    manifest
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 5, "bad manifest line {line:?}");
            Case {
                kind: f[0].to_string(),
                ty: GgmlType::from_name(f[1]).unwrap_or_else(|| panic!("type {}", f[1])),
                label: f[2].to_string(),
                input: std::fs::read(out.join(f[3])).unwrap(),
                expected: std::fs::read(out.join(f[4])).unwrap(),
            }
        })
        .collect()
}

/// Dequantizes `case` from an aligned and from a deliberately misaligned copy (the
/// copying path); returns a description of the first mismatch, if any.
fn check_dequant(case: &Case) -> Option<String> {
    let expected = f32s(&case.expected);
    let mut shifted = vec![0u8; case.input.len() + 1];
    shifted[1..].copy_from_slice(&case.input);
    for (how, bytes) in [("aligned", &case.input[..]), ("misaligned", &shifted[1..])] {
        let mut got = vec![f32::NAN; expected.len()];
        if let Err(e) = dequantize(case.ty, bytes, &mut got) {
            return Some(format!("{how}: {e}"));
        }
        let bad: Vec<usize> = (0..got.len())
            .filter(|&i| !same_f32(got[i], expected[i]))
            .collect();
        if let Some(&i) = bad.first() {
            return Some(format!(
                "{how}: {} of {} elements differ; first at {i}: got {:e} ({:#010x}), \
                 want {:e} ({:#010x})",
                bad.len(),
                got.len(),
                got[i],
                got[i].to_bits(),
                expected[i],
                expected[i].to_bits()
            ));
        }
    }
    None
}

fn check_quant(case: &Case) -> Option<String> {
    let x = f32s(&case.input);
    let mut got = Vec::new();
    if let Err(e) = quantize(case.ty, &x, &mut got) {
        return Some(e.to_string());
    }
    if got.len() != case.expected.len() {
        return Some(format!("{} bytes, want {}", got.len(), case.expected.len()));
    }
    let unit = case.ty.type_size();
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i] != case.expected[i])
        .collect();
    bad.first().map(|&i| {
        let b = i / unit * unit;
        format!(
            "{} bytes differ; first in block {} (byte {}): got {:02x?}, want {:02x?}",
            bad.len(),
            i / unit,
            i - b,
            &got[b..b + unit],
            &case.expected[b..b + unit]
        )
    })
}

#[test]
fn formats_match_gguf_py_bit_for_bit() {
    let (python, cache) = fixtures();
    let out = std::env::temp_dir().join(format!("pocket-formats-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let cases = run_oracle(&python, &cache, &out);
    let _ = std::fs::remove_dir_all(&out);

    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for case in &cases {
        let result = match case.kind.as_str() {
            "dequant" => check_dequant(case),
            "quantize" => check_quant(case),
            other => panic!("unknown case kind {other}"),
        };
        seen.insert(format!("{} {}", case.kind, case.ty));
        match result {
            Some(why) => failures.push(format!("{} {} {}: {why}", case.kind, case.ty, case.label)),
            None => eprintln!("ok {} {} {}", case.kind, case.ty, case.label),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // The oracle must have covered every format it can check, so a silently shrunken
    // manifest cannot pass.
    for ty in [
        "f16", "bf16", "f32", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K",
        "q5_K", "q6_K", "iq4_nl", "iq4_xs",
    ] {
        assert!(
            seen.contains(&format!("dequant {ty}")),
            "no dequant case for {ty}"
        );
    }
    for ty in ["f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"] {
        assert!(
            seen.contains(&format!("quantize {ty}")),
            "no quantize case for {ty}"
        );
    }
}
