//! Seeded random weights and their quantization.
//!
//! The generator is xoshiro256** (Blackman & Vigna) seeded through SplitMix64; normal
//! deviates come from the Box-Muller transform on two 53-bit uniforms (both outputs used).
//! Every tensor is cut into chunks of whole rows whose size depends only on the tensor's
//! shape, and each chunk has its own stream seeded from `(seed, tensor index, chunk index)`,
//! so chunks can be generated and quantized on any number of threads and the bytes never
//! change. (`f64::ln`/`sin`/`cos` come from the platform's libm: files are byte-identical on
//! one platform; another libm could in principle differ in the last bit of a weight.)

use half::f16;
use pocket_kernels::formats::{self, q4_1::BlockQ4_1, FormatError};
use pocket_kernels::GgmlType;
use rayon::prelude::*;

/// SplitMix64 (Steele, Lea & Flood), used to seed and to mix seeds.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        crate::sampler::splitmix64(&mut self.0)
    }
}

/// xoshiro256** with a cached second Box-Muller deviate.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
    spare: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut sm = SplitMix64(seed);
        Rng {
            s: [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()],
            spare: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal deviate (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]: ln is finite
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        self.spare = Some(r * s);
        r * c
    }
}

/// The seed of one chunk's stream: SplitMix64 over the three numbers.
pub fn chunk_seed(seed: u64, tensor: u64, chunk: u64) -> u64 {
    let mut sm = SplitMix64(seed);
    let a = sm.next_u64();
    let mut sm = SplitMix64(a ^ tensor.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let b = sm.next_u64();
    let mut sm = SplitMix64(b ^ chunk.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7));
    sm.next_u64()
}

/// How a tensor's values are made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal with mean 0 and this standard deviation.
    Normal(f32),
    /// Every element this value (norm weights: 1.0).
    Const(f32),
}

/// Standard deviation of the random weights and biases.
pub const WEIGHT_STD: f32 = 0.02;

/// Elements generated per chunk (rounded to whole rows).
const CHUNK_ELEMS: usize = 1 << 16;

/// How the values of one tensor become bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `formats::quantize` of the type.
    Plain(GgmlType),
    /// Q4_1 where each 64-element group is quantized once (asymmetric, as MNN's int4) and
    /// written as two 32-element blocks with the same `d` and `m`.
    Q4_1Group64,
}

impl Encoding {
    pub fn ggml_type(self) -> GgmlType {
        match self {
            Encoding::Plain(t) => t,
            Encoding::Q4_1Group64 => GgmlType::Q4_1,
        }
    }
}

/// Generates tensor number `index` (`ncols` × `nrows`) and encodes it. Deterministic in
/// `(seed, index, init, shape, encoding)`, whatever the number of rayon threads.
pub fn tensor_bytes(
    seed: u64,
    index: u64,
    init: Init,
    ncols: usize,
    nrows: usize,
    enc: Encoding,
) -> Result<Vec<u8>, FormatError> {
    let rows_per_chunk = (CHUNK_ELEMS / ncols.max(1)).max(1);
    let n_chunks = nrows.div_ceil(rows_per_chunk);
    let parts: Vec<Result<Vec<u8>, FormatError>> = (0..n_chunks)
        .into_par_iter()
        .map(|c| {
            let r0 = c * rows_per_chunk;
            let r1 = (r0 + rows_per_chunk).min(nrows);
            let n = (r1 - r0) * ncols;
            let mut x = vec![0f32; n];
            match init {
                Init::Const(v) => x.fill(v),
                Init::Normal(std) => {
                    let mut rng = Rng::new(chunk_seed(seed, index, c as u64));
                    for v in &mut x {
                        *v = (rng.normal() * std as f64) as f32;
                    }
                }
            }
            let mut out = Vec::new();
            match enc {
                Encoding::Plain(t) => formats::quantize(t, &x, &mut out)?,
                Encoding::Q4_1Group64 => quantize_q4_1_group64(&x, &mut out),
            }
            Ok(out)
        })
        .collect();
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(&p?);
    }
    Ok(out)
}

/// MNN-style 4-bit asymmetric quantization with 64-element groups, stored as Q4_1:
/// `m = min`, `d = (max - min) / 15`, `q = min(15, trunc((x - m) / d + 0.5))` over the
/// group (the rule of `quantize_row_q4_1_ref`, applied to 64 elements), and both 32-blocks
/// of the group carry the same `(d, m)`. `x.len()` must be a multiple of 64.
pub fn quantize_q4_1_group64(x: &[f32], out: &mut Vec<u8>) {
    assert_eq!(x.len() % 64, 0, "Q4_1 group-64 needs whole groups");
    for g in x.chunks_exact(64) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in g {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let code = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
        for half in g.chunks_exact(32) {
            let mut b = BlockQ4_1 {
                d: f16::from_f32(d),
                m: f16::from_f32(min),
                qs: [0; 16],
            };
            for j in 0..16 {
                b.qs[j] = code(half[j]) | code(half[j + 16]) << 4;
            }
            out.extend_from_slice(bytemuck::bytes_of(&b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xoshiro_reference_and_normal_moments() {
        // SplitMix64 from 0: first output (published reference value).
        assert_eq!(SplitMix64(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut r = Rng::new(42);
        let n = 200_000;
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let z = r.normal();
            s += z;
            s2 += z * z;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }

    #[test]
    fn chunking_is_thread_independent() {
        let a = tensor_bytes(
            7,
            3,
            Init::Normal(0.02),
            96,
            1000,
            Encoding::Plain(GgmlType::Q8_0),
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let b = pool.install(|| {
            tensor_bytes(
                7,
                3,
                Init::Normal(0.02),
                96,
                1000,
                Encoding::Plain(GgmlType::Q8_0),
            )
        });
        assert_eq!(a.unwrap(), b.unwrap());
    }

    #[test]
    fn group64_blocks_share_scale_and_decode_close() {
        let mut rng = Rng::new(1);
        let x: Vec<f32> = (0..256).map(|_| rng.normal() as f32 * 0.02).collect();
        let mut q = Vec::new();
        quantize_q4_1_group64(&x, &mut q);
        assert_eq!(q.len(), 8 * 20);
        for g in q.chunks_exact(40) {
            assert_eq!(g[0..4], g[20..24], "both halves carry the same d, m");
        }
        let mut y = vec![0f32; 256];
        formats::dequantize(GgmlType::Q4_1, &q, &mut y).unwrap();
        for (gx, gy) in x.chunks_exact(64).zip(y.chunks_exact(64)) {
            let (mn, mx) = gx
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let step = (mx - mn) / 15.0;
            for (a, b) in gx.iter().zip(gy) {
                assert!((a - b).abs() <= step * 0.5 + 1e-3, "{a} vs {b}");
            }
        }
    }
}
