//! pocket's quantizers against llama.cpp's compiled reference quantizers
//! (`quantize_row_*_ref` in `libggml-base.a`), byte for byte. This covers what the gguf
//! Python package cannot: Q4_K, Q5_K, Q6_K and the activation formats Q8_1 and Q8_K.
//!
//! Ignored by default because it needs a C compiler and a llama.cpp build that
//! `tests/fixtures.sh` does not make: run it with
//! `cargo test -p pocket-kernels --test formats_vs_llama_cpp_ref -- --ignored`.
//! It looks for `$POCKET_CACHE/llama.cpp` (source, from fixtures.sh) and
//! `$POCKET_CACHE/llama.cpp-build/ggml/src/libggml-base.a` (a CMake build of it);
//! `POCKET_CACHE` defaults to `~/.cache/pocket`, `CC` to `cc`.

use std::path::Path;
use std::process::Command;

use pocket_kernels::formats::quantize;
use pocket_kernels::GgmlType;

mod common;
use common::cache_dir;

/// SplitMix64 and a Box-Muller normal: deterministic test data without dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// 512 super-blocks shaped to reach the quantizers' corner cases: magnitudes from 1e-5
/// to 1e3, all-positive blocks, zero sub-blocks and blocks, outliers, exact ties.
fn test_data() -> Vec<f32> {
    let mut rng = Rng(7);
    let mut x = Vec::with_capacity(512 * 256);
    for b in 0..512usize {
        let scale = 10f32.powi((b % 9) as i32 - 5);
        let mut block: Vec<f32> = (0..256).map(|_| scale * rng.normal()).collect();
        match b % 8 {
            1 => block.iter_mut().for_each(|v| *v = v.abs()),
            2 => block[..32].fill(0.0),
            3 if b % 24 == 3 => block.fill(0.0),
            4 => block[5] *= 50.0,
            5 => block = (0..256).map(|i| (i % 7) as f32 - 3.0).collect(),
            6 => block = (0..256).map(|_| 2.0 * rng.uniform() as f32 - 1.0).collect(),
            _ => {}
        }
        x.extend(block);
    }
    x
}

#[test]
#[ignore = "needs a C compiler and a llama.cpp build in $POCKET_CACHE/llama.cpp-build; run with --ignored"]
fn quantizers_match_llama_cpp_reference_byte_for_byte() {
    let cache = cache_dir();
    let source = cache.join("llama.cpp");
    let lib = cache.join("llama.cpp-build/ggml/src/libggml-base.a");
    assert!(
        source.join("ggml/include/ggml.h").exists() && lib.exists(),
        "need {} (run `bash tests/fixtures.sh`) and {} (a CMake build of it: \
         `cmake -S {} -B {} && cmake --build {} --target ggml-base`)",
        source.display(),
        lib.display(),
        source.display(),
        cache.join("llama.cpp-build").display(),
        cache.join("llama.cpp-build").display(),
    );

    let work = std::env::temp_dir().join(format!("pocket-quant-ref-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let harness = work.join("quantize_ref");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg("-O2")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/quantize_ref.c"))
        .arg(&lib)
        .args(["-lstdc++", "-lm", "-lgomp", "-lpthread", "-o"])
        .arg(&harness)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    assert!(built.success(), "compiling the quantize_ref harness failed");

    let x = test_data();
    let input = work.join("in.f32");
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&input, bytes).unwrap();

    let mut failures = Vec::new();
    for name in [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q4_K", "q5_K", "q6_K", "q8_K",
    ] {
        let ty = GgmlType::from_name(name).unwrap();
        let out = work.join(format!("{name}.bin"));
        let ok = Command::new(&harness)
            .arg(name)
            .arg(&input)
            .arg(&out)
            .status()
            .unwrap();
        assert!(ok.success(), "harness failed for {name}");
        let want = std::fs::read(&out).unwrap();
        let mut got = Vec::new();
        quantize(ty, &x, &mut got).unwrap();
        assert_eq!(got.len(), want.len(), "{name}: byte count");
        let unit = ty.type_size();
        let bad: Vec<usize> = (0..want.len() / unit)
            .filter(|&b| got[b * unit..(b + 1) * unit] != want[b * unit..(b + 1) * unit])
            .collect();
        if let Some(&b) = bad.first() {
            failures.push(format!(
                "{name}: {} of {} blocks differ; block {b}:\n  got  {:02x?}\n  want {:02x?}",
                bad.len(),
                want.len() / unit,
                &got[b * unit..(b + 1) * unit],
                &want[b * unit..(b + 1) * unit]
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
