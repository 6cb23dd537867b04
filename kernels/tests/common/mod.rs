//! Test data, checks and the fixture cache shared by the kernel test files.

// Each test file compiles this module and uses only part of it.
#![allow(dead_code)]

#[path = "../../src/formats/splitmix.rs"]
mod splitmix;

#[path = "../../../tests/common/fixtures.rs"]
mod fixtures;
#[allow(unused_imports)]
pub use fixtures::{cache_dir, fixture};

use half::f16;
use pocket_kernels::matmul::{
    gemm, gemm_tokens, gemv, PackError, PackedMatrix, QuantizedActivation,
};
use pocket_kernels::{GgmlType, Isa};
use proptest::prelude::*;
use std::path::PathBuf;

/// SplitMix64: deterministic test data without dependencies.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        splitmix::next(&mut self.0)
    }
    /// Uniform in `[lo, hi)`.
    pub fn f(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// [`Rng::f`] as fp16 bytes (little-endian).
    pub fn h(&mut self, lo: f32, hi: f32) -> [u8; 2] {
        f16::from_f32(self.f(lo, hi)).to_bits().to_le_bytes()
    }
}

/// `tokens x cols` activations uniform in [-2, 2), with elements 32..64 zero (an all-zero
/// block exercises `d = 0`).
pub fn random_act(tokens: usize, cols: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..tokens * cols).map(|_| rng.f(-2.0, 2.0)).collect();
    if x.len() >= 64 {
        x[32..64].iter_mut().for_each(|v| *v = 0.0);
    }
    x
}

/// The naive [tokens x rows] product `y[t·rows + r] = Σ_c w_r[c]·a_t[c]` in f64 and the
/// matching `Σ|w·a|` magnitudes (for tolerances): `w_row(r)` is row r's decoded weights,
/// `a_t` token t of `act` decoded, as the f32 row itself when `f32_rows` (F16 weights take
/// it) and else from its int8 codes.
pub fn naive_product(
    act: &QuantizedActivation,
    f32_rows: bool,
    rows: usize,
    w_row: impl Fn(usize) -> Vec<f64>,
) -> (Vec<f64>, Vec<f64>) {
    let acts: Vec<Vec<f32>> = (0..act.rows())
        .map(|t| {
            if f32_rows {
                act.row_f32(t).to_vec()
            } else {
                act.dequant_row(t)
            }
        })
        .collect();
    let mut y = vec![0f64; acts.len() * rows];
    let mut mag = vec![0f64; acts.len() * rows];
    for r in 0..rows {
        let w = w_row(r);
        for (t, a) in acts.iter().enumerate() {
            for (wc, &ac) in w.iter().zip(a) {
                let p = wc * ac as f64;
                y[t * rows + r] += p;
                mag[t * rows + r] += p.abs();
            }
        }
    }
    (y, mag)
}

/// The int16-saturation check of `extreme_codes_do_not_saturate`: `w` (`rows x cols`,
/// packed from blocks of the extreme code byte `code`) against two activation rows, all
/// `sign` then `-sign·(i % 3)` (so ±127 codes), for both signs, on every available ISA,
/// within `1e-5` of `naive(act)` relative to its magnitudes (`naive` returns the f64
/// product and the `Σ|w·a|` of each output).
pub fn assert_extremes_do_not_saturate(
    ty: GgmlType,
    code: u8,
    w: &PackedMatrix,
    rows: usize,
    cols: usize,
    naive: impl Fn(&QuantizedActivation) -> (Vec<f64>, Vec<f64>),
) {
    for sign in [1.0f32, -1.0] {
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| {
                if i < cols {
                    sign
                } else {
                    -sign * (i % 3) as f32
                }
            })
            .collect();
        let act = QuantizedActivation::quantize(&x, 2);
        let (y, mag) = naive(&act);
        for isa in Isa::available() {
            let mut out = vec![0f32; 2 * rows];
            gemm(w, &act, &mut out, rows, 0..w.panels(), isa);
            for i in 0..out.len() {
                assert!(
                    (out[i] as f64 - y[i]).abs() <= 1e-5 * mag[i] + 1e-6,
                    "{ty:?} code {code:#x} sign {sign} {isa} at {i}: {} vs {}",
                    out[i],
                    y[i]
                );
            }
        }
    }
}

/// The ggml oracle `name` (a `tests/oracle/*.cpp`), built into the fixture cache by
/// `bash compare/provision-llama.sh`.
pub fn oracle_bin(name: &str) -> PathBuf {
    let p = cache_dir().join("llama.cpp-build/bin").join(name);
    assert!(
        p.exists(),
        "oracle {} is missing: run `bash compare/provision-llama.sh` (it builds \
         tests/oracle/*.cpp against the cached llama.cpp)",
        p.display()
    );
    p
}

/// Runs the oracle `name` as `name SEED FILE` (after `setup` adds its environment) and
/// returns a reader over the file it wrote, past its 4-byte `magic` and format version 1.
/// `tag` tells apart the temporary files of one test process.
pub fn run_oracle(
    name: &str,
    seed: u64,
    tag: &str,
    magic: &[u8; 4],
    setup: impl FnOnce(&mut std::process::Command),
) -> Reader {
    let path = std::env::temp_dir().join(format!(
        "pocket_{name}_{}_{seed}_{tag}.bin",
        std::process::id()
    ));
    let mut cmd = std::process::Command::new(oracle_bin(name));
    cmd.arg(seed.to_string()).arg(&path);
    setup(&mut cmd);
    let st = cmd.output().unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(
        st.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut r = Reader {
        b: std::fs::read(&path).unwrap(),
        at: 0,
    };
    let _ = std::fs::remove_file(&path);
    assert_eq!(r.bytes(4), magic);
    assert_eq!(r.u32(), 1);
    r
}

/// Little-endian reader over an oracle file.
pub struct Reader {
    pub b: Vec<u8>,
    pub at: usize,
}

impl Reader {
    pub fn bytes(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        s
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes(4).try_into().unwrap())
    }
    pub fn f32(&mut self) -> f32 {
        f32::from_bits(self.u32())
    }
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.bytes(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn f16s(&mut self, n: usize) -> Vec<f16> {
        self.bytes(2 * n)
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect()
    }
    pub fn blocks<T: bytemuck::Pod>(&mut self, n: usize) -> Vec<T> {
        let sz = std::mem::size_of::<T>();
        self.bytes(n * sz)
            .chunks_exact(sz)
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }
    /// A `mul_mat` record's operands: a weight of `rows` rows of `k / qk` blocks `W`, then
    /// `tokens` rows of `k` floats.
    pub fn weight_and_x<W: bytemuck::Pod>(
        &mut self,
        rows: usize,
        k: usize,
        qk: usize,
        tokens: usize,
    ) -> (Vec<W>, Vec<f32>) {
        let w = self.blocks(rows * k / qk);
        (w, self.f32s(tokens * k))
    }
    /// Reads records up to the kind-0 terminator, `record(reader, kind)` reading each
    /// one's body, then asserts the whole file was read and every kind of `1..KINDS` came
    /// at least once (`what` names the oracle run in the message).
    pub fn read_records<const KINDS: usize>(
        &mut self,
        what: &str,
        mut record: impl FnMut(&mut Reader, usize),
    ) {
        let mut kinds = [0usize; KINDS];
        loop {
            let kind = self.u32() as usize;
            if kind == 0 {
                break;
            }
            kinds[kind] += 1;
            record(self, kind);
        }
        self.finish();
        assert!(
            kinds[1..].iter().all(|&c| c > 0),
            "{what}: some record kinds missing: {kinds:?}"
        );
    }
    /// Asserts the whole file was read.
    pub fn finish(&self) {
        assert_eq!(self.at, self.b.len(), "trailing bytes in the oracle file");
    }
}

/// Values compared by bits against an oracle, and the first 40 mismatches.
#[derive(Default)]
pub struct Bits {
    pub checked: usize,
    pub bad: Vec<String>,
}

impl Bits {
    /// Counts one comparison; records `msg()` when `same` is false.
    pub fn check(&mut self, same: bool, msg: impl FnOnce() -> String) {
        self.checked += 1;
        if !same && self.bad.len() < 40 {
            self.bad.push(msg());
        }
    }
    pub fn f32(&mut self, what: &str, i: usize, ours: f32, ggml: f32) {
        self.check(ours.to_bits() == ggml.to_bits(), || {
            format!("{what}[{i}]: ours {ours:e} ggml {ggml:e}")
        });
    }
    /// Panics with the mismatches, if any.
    pub fn assert_clean(&self) {
        assert!(
            self.bad.is_empty(),
            "{} of {} values differ from ggml:\n{}",
            self.bad.len(),
            self.checked,
            self.bad.join("\n")
        );
    }
}

/// A ggml row quantizer into blocks `B`.
pub type Quantizer<B> = fn(&[f32], &mut [B]);

/// A quantizer record of the ggml_exact oracles, kind 1 (one row by ggml's plain row
/// quantizer, `quantize[0]`) or kind 2 (four rows by its 4x8 one, `quantize[1]`; ggml's
/// 4x8 quantizers treat their rows independently): `k`, the rows of `k` floats, then
/// ggml's blocks of `qk` elements. Every block is compared with ggml's by
/// `check(t, what, index, ours, ggml)`.
pub fn check_quantized_rows<B: bytemuck::Pod>(
    r: &mut Reader,
    t: &mut Bits,
    (tag, kind): (&str, usize),
    qk: usize,
    quantize: [Quantizer<B>; 2],
    check: fn(&mut Bits, &str, usize, &B, &B),
) {
    let (n_rows, quantize) = match kind {
        1 => (1, quantize[0]),
        2 => (4, quantize[1]),
        _ => panic!("kind {kind} is no quantizer record"),
    };
    let k = r.u32() as usize;
    let x = r.f32s(n_rows * k);
    let ggml: Vec<B> = r.blocks(n_rows * k / qk);
    let mut ours = vec![B::zeroed(); n_rows * k / qk];
    for (xr, o) in x.chunks_exact(k).zip(ours.chunks_exact_mut(k / qk)) {
        quantize(xr, o);
    }
    let what = format!("{tag} k={k}");
    for (i, (o, g)) in ours.iter().zip(&ggml).enumerate() {
        check(t, &what, i, o, g);
    }
}

/// ggml's vec_dot `mul_mat`: each token of `x` (rows of `k` floats) quantized by `quant`
/// into `k / qk` blocks, then `out[token * rows + row]` = `dot(weight row, token)`.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_rows<W, A: Clone>(
    w: &[W],
    rows: usize,
    x: &[f32],
    k: usize,
    qk: usize,
    zero: A,
    quant: impl Fn(&[f32], &mut [A]),
    dot: impl Fn(&[W], &[A]) -> f32,
) -> Vec<f32> {
    let nb = k / qk;
    let mut out = Vec::new();
    let mut a = vec![zero; nb];
    for xt in x.chunks_exact(k) {
        quant(xt, &mut a);
        for r in 0..rows {
            out.push(dot(&w[r * nb..(r + 1) * nb], &a));
        }
    }
    out
}

/// `w` times the first row of `act` by two gemv calls, over the panels before `split` and
/// from it on: the rows of a panel range land where the whole gemv puts them.
pub fn gemv_split(w: &PackedMatrix, act: &QuantizedActivation, split: usize, isa: Isa) -> Vec<f32> {
    let mut g = vec![f32::NAN; w.rows];
    let (lo, hi) = g.split_at_mut(w.rows_in(0..split));
    gemv(w, act, lo, 0..split, isa);
    gemv(w, act, hi, split..w.panels(), isa);
    g
}

/// [`gemm_tokens`] over a token sub-range (from `seed`), the panels from `split` on and a
/// wider `ld` equals `out`, the gemm of all of `act` (`ld = w.rows`), bit for bit.
pub fn check_gemm_tokens(
    w: &PackedMatrix,
    act: &QuantizedActivation,
    out: &[f32],
    (split, seed): (usize, u64),
    isa: Isa,
) -> Result<(), TestCaseError> {
    let (rows, tokens) = (w.rows, act.rows());
    let t0 = (seed as usize / 7) % tokens;
    let ld = rows + 3;
    let mut part = vec![f32::NAN; (tokens - t0) * ld];
    gemm_tokens(w, act, t0..tokens, &mut part, ld, split..w.panels(), isa);
    let r0 = split * 8;
    for t in t0..tokens {
        for r in r0..rows {
            prop_assert_eq!(
                part[(t - t0) * ld + r - r0].to_bits(),
                out[t * rows + r].to_bits()
            );
        }
    }
    Ok(())
}

/// What `PackedMatrix::pack` refuses: `ty` with `bad_cols` columns (not whole blocks),
/// `bytes` that are not `rows` x `cols` of `ty`, and Q3_K (a type without a packed layout).
pub fn assert_pack_refuses(
    ty: GgmlType,
    bytes: &[u8],
    bad_cols: usize,
    (rows, cols): (usize, usize),
) {
    assert!(matches!(
        PackedMatrix::pack(ty, bytes, rows, bad_cols),
        Err(PackError::BadCols(c)) if c == bad_cols
    ));
    let expected = rows * cols / ty.block_size() * ty.type_size();
    assert!(matches!(
        PackedMatrix::pack(ty, bytes, rows, cols),
        Err(PackError::BadLength { expected: e, got }) if e == expected && got == bytes.len()
    ));
    assert!(matches!(
        PackedMatrix::pack(GgmlType::Q3_K, bytes, 1, 256),
        Err(PackError::UnsupportedType(GgmlType::Q3_K))
    ));
}
