//! Packed Q4_K / Q5_K / Q6_K / Q5_0 / F16 matmul: every available ISA against the scalar packed
//! reference (bit for bit), the scalar reference against a naive f64 dot of rows decoded by
//! `formats::dequantize` from the raw GGUF bytes with the dequantized activation (loose),
//! and real gemma-3 tensors (needs `bash tests/fixtures.sh`).

use half::f16;
use pocket_kernels::formats;
use pocket_kernels::matmul::{
    gemm, gemm_swiglu, gemv, gemv_swiglu, Layout, PackedMatrix, QuantizedActivation,
};
use pocket_kernels::{GgmlType, Isa};
use proptest::prelude::*;
use std::path::PathBuf;

mod common;
use common::{assert_pack_refuses, random_act, Rng};

const TYPES: [GgmlType; 5] = [
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q5_0,
    GgmlType::F16,
];

/// Random raw GGUF bytes: random codes and scale bytes, sane fp16 super-scales.
fn random_tensor(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    let (bs, bb) = (ty.block_size(), ty.type_size());
    let mut out = vec![0u8; rows * cols / bs * bb];
    if ty == GgmlType::F16 {
        for h in out.chunks_exact_mut(2) {
            h.copy_from_slice(&rng.h(-1.0, 1.0));
        }
        return out;
    }
    for blk in out.chunks_exact_mut(bb) {
        blk.iter_mut().for_each(|b| *b = rng.next() as u8);
        match ty {
            GgmlType::Q4_K | GgmlType::Q5_K => {
                blk[0..2].copy_from_slice(&rng.h(0.0, 0.003));
                blk[2..4].copy_from_slice(&rng.h(0.0, 0.01));
            }
            GgmlType::Q6_K => blk[208..210].copy_from_slice(&rng.h(-0.001, 0.001)),
            GgmlType::Q5_0 => blk[0..2].copy_from_slice(&rng.h(-0.05, 0.05)),
            _ => unreachable!(),
        }
    }
    out
}

/// Row `r` decoded by `formats::dequantize` (independent of the packing).
fn naive_row(ty: GgmlType, bytes: &[u8], r: usize, cols: usize) -> Vec<f32> {
    let rb = ty.row_bytes(cols as u64).unwrap() as usize;
    let mut out = vec![0f32; cols];
    formats::dequantize(ty, &bytes[r * rb..(r + 1) * rb], &mut out).unwrap();
    out
}

/// Naive [tokens x rows] product and Σ|w·a| magnitudes. F16 weights take the f32
/// activation itself; the quantized formats its int8 codes.
fn naive(
    ty: GgmlType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
    act: &QuantizedActivation,
) -> (Vec<f64>, Vec<f64>) {
    common::naive_product(act, ty == GgmlType::F16, rows, |r| {
        naive_row(ty, bytes, r, cols)
            .into_iter()
            .map(f64::from)
            .collect()
    })
}

fn cols_for(ty: GgmlType, units: usize) -> usize {
    units
        * if matches!(ty, GgmlType::Q5_0 | GgmlType::F16) {
            32
        } else {
            256
        }
}

fn check_all(
    ty: GgmlType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
    tokens: usize,
    seed: u64,
    rng: &mut Rng,
) -> Result<(), TestCaseError> {
    let w = PackedMatrix::pack(ty, bytes, rows, cols).unwrap();
    for r in 0..rows {
        let d = w.dequant_row(r);
        let n = naive_row(ty, bytes, r, cols);
        prop_assert!(
            d.iter().zip(&n).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{:?} packed row {} does not decode like formats::dequantize",
            ty,
            r
        );
    }
    let x = random_act(tokens, cols, rng);
    let act = QuantizedActivation::quantize(&x, tokens);
    let (y, mag) = naive(ty, bytes, rows, cols, &act);
    let mut reference = vec![0f32; tokens * rows];
    gemm(&w, &act, &mut reference, rows, 0..w.panels(), Isa::Scalar);
    for i in 0..y.len() {
        let tol = 1e-5 * mag[i] + 1e-6;
        prop_assert!(
            (reference[i] as f64 - y[i]).abs() <= tol,
            "{:?} scalar vs naive at {}: {} vs {} (tol {})",
            ty,
            i,
            reference[i],
            y[i],
            tol
        );
    }
    for isa in Isa::available() {
        let mut out = vec![f32::NAN; tokens * rows];
        gemm(&w, &act, &mut out, rows, 0..w.panels(), isa);
        for i in 0..y.len() {
            prop_assert!(
                out[i].to_bits() == reference[i].to_bits(),
                "{:?} {} gemm vs scalar at {}: {} vs {}",
                ty,
                isa,
                i,
                out[i],
                reference[i]
            );
        }
        let split = (seed as usize) % (w.panels() + 1);
        let g = common::gemv_split(&w, &act, split, isa);
        for r in 0..rows {
            prop_assert!(
                g[r].to_bits() == reference[r].to_bits(),
                "{:?} {} gemv row {}: {} vs {}",
                ty,
                isa,
                r,
                g[r],
                reference[r]
            );
        }
        common::check_gemm_tokens(&w, &act, &out, (split, seed), isa)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn gemm_and_gemv_match_reference(
        ty in prop::sample::select(TYPES.to_vec()),
        rows in 1usize..=41,
        units in 1usize..=4,
        // Two-panel VNNI tiles from 16 tokens for the K-quants (`vnni::pairs_from`).
        tokens in 1usize..=20,
        seed in any::<u64>(),
    ) {
        let short = matches!(ty, GgmlType::Q5_0 | GgmlType::F16);
        let cols = cols_for(ty, if short { 3 * units } else { units });
        let mut rng = Rng(seed);
        let bytes = random_tensor(ty, rows, cols, &mut rng);
        check_all(ty, &bytes, rows, cols, tokens, seed, &mut rng)?;
    }

    #[test]
    fn swiglu_and_stacked_match(
        ty in prop::sample::select(TYPES.to_vec()),
        rows in 1usize..=20,
        r2 in 1usize..=12,
        units in 1usize..=2,
        tokens in 1usize..=20,
        seed in any::<u64>(),
    ) {
        let cols = cols_for(ty, units);
        let mut rng = Rng(seed);
        let gate = random_tensor(ty, rows, cols, &mut rng);
        let up = random_tensor(ty, rows, cols, &mut rng);
        let act = QuantizedActivation::quantize(&random_act(tokens, cols, &mut rng), tokens);
        let sw = PackedMatrix::pack_swiglu(ty, &gate, &up, rows, cols).unwrap();
        let g = PackedMatrix::pack(ty, &gate, rows, cols).unwrap();
        let u = PackedMatrix::pack(ty, &up, rows, cols).unwrap();
        let other = random_tensor(ty, r2, cols, &mut rng);
        let st = PackedMatrix::pack_stacked(ty, &[(&gate, rows), (&other, r2)], cols).unwrap();
        let o = PackedMatrix::pack(ty, &other, r2, cols).unwrap();
        for isa in Isa::available() {
            let (mut gy, mut uy) = (vec![0f32; tokens * rows], vec![0f32; tokens * rows]);
            gemm(&g, &act, &mut gy, rows, 0..g.panels(), isa);
            gemm(&u, &act, &mut uy, rows, 0..u.panels(), isa);
            let mut out = vec![f32::NAN; tokens * rows];
            gemm_swiglu(&sw, &act, &mut out, rows, 0..sw.panels(), isa);
            let mut one = vec![f32::NAN; rows];
            gemv_swiglu(&sw, &act, &mut one, 0..sw.panels(), isa);
            for i in 0..out.len() {
                let (gv, uv) = (gy[i] as f64, uy[i] as f64);
                let want = gv / (1.0 + (-gv).exp()) * uv;
                prop_assert!((out[i] as f64 - want).abs() <= 1e-5 * want.abs() + 1e-6,
                    "{:?} {} swiglu {}: {} vs {}", ty, isa, i, out[i], want);
                if i < rows {
                    prop_assert_eq!(one[i].to_bits(), out[i].to_bits());
                }
            }
            let n = rows + r2;
            let mut all = vec![0f32; tokens * n];
            gemm(&st, &act, &mut all, n, 0..st.panels(), isa);
            let mut oy = vec![0f32; tokens * r2];
            gemm(&o, &act, &mut oy, r2, 0..o.panels(), isa);
            for t in 0..tokens {
                for r in 0..rows {
                    prop_assert_eq!(all[t * n + r].to_bits(), gy[t * rows + r].to_bits());
                }
                for r in 0..r2 {
                    prop_assert_eq!(all[t * n + rows + r].to_bits(), oy[t * r2 + r].to_bits());
                }
            }
        }
    }
}

#[test]
fn layouts_and_sizes() {
    let mut rng = Rng(5);
    for (ty, layout, cols, bytes_per_row) in [
        (GgmlType::Q4_K, Layout::Q4_K, 512, 2 * (128 + 20)),
        (GgmlType::Q5_K, Layout::Q5_K, 512, 2 * (160 + 20)),
        (GgmlType::Q6_K, Layout::Q6_K, 512, 2 * 210),
        (GgmlType::Q5_0, Layout::Q5_0, 96, 3 * 22),
        (GgmlType::F16, Layout::F16, 96, 2 * 96),
    ] {
        let b = random_tensor(ty, 16, cols, &mut rng);
        let w = PackedMatrix::pack(ty, &b, 16, cols).unwrap();
        assert_eq!(w.layout, layout);
        assert_eq!(w.bytes(), 16 * bytes_per_row, "{ty:?}");
    }
    let b = vec![0u8; 144 * 2];
    assert_pack_refuses(GgmlType::Q4_K, &b, 288, (1, 256));
}

/// Largest codes and scales against ±127 activations: no int16 saturation anywhere.
#[test]
fn extreme_codes_do_not_saturate() {
    let (rows, cols) = (11, 2048);
    // (F16 has no integer sums to saturate.)
    for ty in TYPES.into_iter().filter(|&t| t != GgmlType::F16) {
        for code in [0xFFu8, 0x00, 0x0F, 0xF0, 0xAA] {
            let bb = ty.type_size();
            let mut bytes = vec![code; rows * cols / ty.block_size() * bb];
            for blk in bytes.chunks_exact_mut(bb) {
                let one = f16::from_f32(0.01).to_bits().to_le_bytes();
                match ty {
                    GgmlType::Q4_K | GgmlType::Q5_K => {
                        blk[0..2].copy_from_slice(&one);
                        blk[2..4].copy_from_slice(&one);
                    }
                    GgmlType::Q6_K => {
                        blk[208..210].copy_from_slice(&one);
                        // scales -128 and 127 alternate
                        for (j, s) in blk[192..208].iter_mut().enumerate() {
                            *s = if j % 2 == 0 { 0x80 } else { 0x7F };
                        }
                    }
                    _ => blk[0..2].copy_from_slice(&one),
                }
            }
            let w = PackedMatrix::pack(ty, &bytes, rows, cols).unwrap();
            common::assert_extremes_do_not_saturate(ty, code, &w, rows, cols, |act| {
                naive(ty, &bytes, rows, cols, act)
            });
        }
    }
}

/// A minimal GGUF (v2/v3) reader cursor.
struct Cur<'a> {
    d: &'a [u8],
    pos: usize,
}

impl Cur<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.d[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
    /// Skips a value of GGUF type `ty`, returning it when it is an integer.
    fn value(&mut self, ty: u32) -> Option<u64> {
        match ty {
            0 | 1 | 7 => Some(self.take(1)[0] as u64),
            2 | 3 => Some(u16::from_le_bytes(self.take(2).try_into().unwrap()) as u64),
            4..=6 => Some(self.u32() as u64),
            10..=12 => Some(self.u64()),
            8 => {
                self.string();
                None
            }
            9 => {
                let et = self.u32();
                for _ in 0..self.u64() {
                    self.value(et);
                }
                None
            }
            t => panic!("bad GGUF value type {t}"),
        }
    }
}

/// The tensor directory of a GGUF file: (name, type, dims, absolute data offset).
fn gguf_tensors(data: &[u8]) -> Vec<(String, GgmlType, Vec<u64>, usize)> {
    let mut c = Cur { d: data, pos: 0 };
    assert_eq!(c.take(4), b"GGUF");
    let _version = c.u32();
    let n_tensors = c.u64();
    let n_kv = c.u64();
    let mut alignment = 32usize;
    for _ in 0..n_kv {
        let key = c.string();
        let ty = c.u32();
        let v = c.value(ty);
        if key == "general.alignment" {
            alignment = v.unwrap() as usize;
        }
    }
    let mut infos = Vec::new();
    for _ in 0..n_tensors {
        let name = c.string();
        let nd = c.u32() as usize;
        let dims: Vec<u64> = (0..nd).map(|_| c.u64()).collect();
        let ty = GgmlType::from_id(c.u32()).unwrap();
        let off = c.u64() as usize;
        infos.push((name, ty, dims, off));
    }
    let start = c.pos.div_ceil(alignment) * alignment;
    infos
        .into_iter()
        .map(|(n, t, d, o)| (n, t, d, start + o))
        .collect()
}

fn gemma_path() -> PathBuf {
    let p = common::cache_dir().join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "{} is missing: run bash tests/fixtures.sh from the repository root",
        p.display()
    );
    p
}

#[test]
fn real_gemma3_tensors() {
    let data = std::fs::read(gemma_path()).unwrap();
    let dir = gguf_tensors(&data);
    let mut rng = Rng(99);
    for (name, want) in [
        ("blk.0.attn_output.weight", GgmlType::Q4_K),
        ("blk.0.ffn_down.weight", GgmlType::Q6_K),
        ("blk.0.ffn_gate.weight", GgmlType::Q5_0),
        ("blk.5.ffn_down.weight", GgmlType::Q4_K),
    ] {
        let (_, ty, dims, off) = dir.iter().find(|t| t.0 == name).expect(name);
        assert_eq!(*ty, want, "{name}");
        let (cols, rows) = (dims[0] as usize, dims[1] as usize);
        let len = ty.row_bytes(cols as u64).unwrap() as usize * rows;
        let bytes = &data[*off..*off + len];
        let w = PackedMatrix::pack(*ty, bytes, rows, cols).unwrap();
        let x: Vec<f32> = (0..2 * cols).map(|_| rng.f(-3.0, 3.0)).collect();
        let act = QuantizedActivation::quantize(&x, 2);
        let (y, mag) = naive(*ty, bytes, rows, cols, &act);
        for isa in Isa::available() {
            let mut g = vec![0f32; rows];
            gemv(&w, &act, &mut g, 0..w.panels(), isa);
            let mut m = vec![0f32; 2 * rows];
            gemm(&w, &act, &mut m, rows, 0..w.panels(), isa);
            for i in 0..2 * rows {
                assert!(
                    (m[i] as f64 - y[i]).abs() <= 1e-5 * mag[i] + 1e-6,
                    "{name} {isa} gemm at {i}: {} vs {}",
                    m[i],
                    y[i]
                );
            }
            for r in 0..rows {
                assert!(
                    (g[r] as f64 - y[r]).abs() <= 1e-5 * mag[r] + 1e-6,
                    "{name} {isa} gemv row {r}: {} vs {}",
                    g[r],
                    y[r]
                );
            }
        }
    }
}
