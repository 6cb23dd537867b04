//! Test helpers shared by the format files: llama.cpp's `test-quantize-fns.cpp` data,
//! error measures and bounds, a small deterministic random source, and the checks every
//! format's tests share (round trip and dot product against llama.cpp's bounds, `vec_dot`
//! against the dequantized dot).

use bytemuck::Pod;

use super::kquant::QK_K;
use super::{
    iq4_nl, iq4_xs, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, q8_1, q8_k,
};

/// `MAX_QUANTIZATION_TOTAL_ERROR` (4-bit and up).
pub const MAX_QUANTIZATION_TOTAL_ERROR: f32 = 0.002;
/// `MAX_DOT_PRODUCT_ERROR`.
pub const MAX_DOT_PRODUCT_ERROR: f32 = 0.02;

/// Elements per test vector, as in test-quantize-fns (`32 * 128`).
pub const TEST_SIZE: usize = 32 * 128;

/// test-quantize-fns' `generate_data`: `0.1 + amplitude*cos(i + offset)`.
pub fn generate_data(offset: f32, n: usize, amplitude: f32) -> Vec<f32> {
    (0..n)
        .map(|i| 0.1 + amplitude * (i as f32 + offset).cos())
        .collect()
}

/// test-quantize-fns' `array_rmse`: note it is sqrt(Σd²)/n, not sqrt(Σd²/n).
pub fn array_rmse(a: &[f32], b: &[f32]) -> f32 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x as f64 - y as f64;
            d * d
        })
        .sum();
    (sum.sqrt() / a.len() as f64) as f32
}

/// The largest magnitude in `x`.
pub fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// Dot product in f64 (test-quantize-fns sums f32 products in a double).
pub fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| (x * y) as f64).sum()
}

/// SplitMix64: enough randomness for test data, with no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        super::splitmix::next(&mut self.0)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` values uniform in [-amplitude, amplitude).
    pub fn vec(&mut self, n: usize, amplitude: f32) -> Vec<f32> {
        (0..n).map(|_| amplitude * self.unit()).collect()
    }

    pub fn fill_bytes(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next_u64() as u8;
        }
    }

    /// A finite fp16 scale of moderate size (random sign, |d| in [2^-10, 2)).
    pub fn scale_f16(&mut self) -> half::f16 {
        let exp = 5 + (self.next_u64() % 11) as u16; // biased exponent 5..=15
        let mant = (self.next_u64() & 0x3FF) as u16;
        let sign = (self.next_u64() & 1) as u16;
        half::f16::from_bits(sign << 15 | exp << 10 | mant)
    }
}

/// Random blocks of any format: random bytes, then `fix` forces the scales finite.
pub fn random_blocks<B: bytemuck::Pod>(
    rng: &mut Rng,
    n: usize,
    fix: impl Fn(&mut B, &mut Rng),
) -> Vec<B> {
    let mut blocks = vec![B::zeroed(); n];
    rng.fill_bytes(bytemuck::cast_slice_mut(&mut blocks));
    for b in &mut blocks {
        fix(b, rng);
    }
    blocks
}

/// A block dot product against the f64 dot of its operands' dequantized values, within
/// `rel` of the summed magnitudes (the check every format's `vec_dot` twin shares).
pub fn assert_dot_matches_dequantized(got: f32, wf: &[f32], af: &[f32], rel: f64) {
    let want = dot_f64(wf, af);
    let scale: f64 = wf.iter().zip(af).map(|(x, y)| (x * y).abs() as f64).sum();
    let got = got as f64;
    assert!((got - want).abs() <= rel * scale, "{got} vs {want}");
}

/// Asserts `got` is within `tol` per element (test-quantize-fns' `|got-ref|/n`) of `want`.
pub fn assert_dot_close(got: f32, want: f64, n: usize, tol: f32, what: &str) {
    let err = ((got as f64 - want).abs() / n as f64) as f32;
    assert!(
        err < tol,
        "{what}: dot {got} vs reference {want}: error {err} >= {tol}"
    );
}

/// A block format's scalar conversions, for the checks every format's tests repeat.
pub struct Codec<B> {
    /// Elements per block.
    pub qk: usize,
    pub quantize_row: fn(&[f32], &mut [B]),
    pub dequantize_row: fn(&[B], &mut [f32]),
}

impl<B: Pod> Codec<B> {
    pub const fn new(
        qk: usize,
        quantize_row: fn(&[f32], &mut [B]),
        dequantize_row: fn(&[B], &mut [f32]),
    ) -> Self {
        Codec {
            qk,
            quantize_row,
            dequantize_row,
        }
    }

    /// A format pocket only decodes: its `quantize_row` panics.
    pub const fn decode_only(qk: usize, dequantize_row: fn(&[B], &mut [f32])) -> Self {
        fn no_quantizer<B>(_: &[f32], _: &mut [B]) {
            unreachable!("pocket has no quantizer for this format")
        }
        Codec {
            qk,
            quantize_row: no_quantizer::<B>,
            dequantize_row,
        }
    }

    /// `x` quantized into `x.len() / qk` blocks.
    pub fn quantize(&self, x: &[f32]) -> Vec<B> {
        let mut q = vec![B::zeroed(); x.len() / self.qk];
        (self.quantize_row)(x, &mut q);
        q
    }

    /// The values `blocks` decode to.
    pub fn dequantize(&self, blocks: &[B]) -> Vec<f32> {
        let mut y = vec![0.0; blocks.len() * self.qk];
        (self.dequantize_row)(blocks, &mut y);
        y
    }

    /// Quantizes `x` and decodes it again, asserting that every element of each block `xb`
    /// comes back within `tol(xb)`; returns the decoded values.
    pub fn assert_round_trip_within(&self, x: &[f32], tol: impl Fn(&[f32]) -> f32) -> Vec<f32> {
        let y = self.dequantize(&self.quantize(x));
        for (xb, yb) in x.chunks(self.qk).zip(y.chunks(self.qk)) {
            let tol = tol(xb);
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= tol, "{a} -> {b}, tol {tol}");
            }
        }
        y
    }

    /// test-quantize-fns' round trip: its data quantized and decoded again is within
    /// `MAX_QUANTIZATION_TOTAL_ERROR` (as [`array_rmse`]).
    pub fn assert_round_trip_within_llama_cpp_bound(&self) {
        let x = generate_data(0.0, TEST_SIZE, 2.0);
        let err = array_rmse(&x, &self.dequantize(&self.quantize(&x)));
        assert!(err < MAX_QUANTIZATION_TOTAL_ERROR, "rmse {err}");
    }
}

/// `pub const $name: Codec<$m::$block>` for formats that quantize, `$qk` elements a block.
macro_rules! codecs {
    ($($name:ident = $m:ident::$block:ident, $qk:expr;)*) => {$(
        pub const $name: Codec<$m::$block> = Codec::new($qk, $m::quantize_row, $m::dequantize_row);
    )*};
}

// Every block format's codec (the decode-only ones panic if asked to quantize).
codecs! {
    Q4_0 = q4_0::BlockQ4_0, q4_0::QK4_0;
    Q4_1 = q4_1::BlockQ4_1, q4_1::QK4_1;
    Q5_0 = q5_0::BlockQ5_0, q5_0::QK5_0;
    Q5_1 = q5_1::BlockQ5_1, q5_1::QK5_1;
    Q8_0 = q8_0::BlockQ8_0, q8_0::QK8_0;
    Q8_1 = q8_1::BlockQ8_1, q8_1::QK8_1;
    Q4_K = q4_k::BlockQ4K, QK_K;
    Q5_K = q5_k::BlockQ5K, QK_K;
    Q6_K = q6_k::BlockQ6K, QK_K;
    Q8_K = q8_k::BlockQ8K, QK_K;
}
pub const Q2_K: Codec<q2_k::BlockQ2K> = Codec::decode_only(QK_K, q2_k::dequantize_row);
pub const Q3_K: Codec<q3_k::BlockQ3K> = Codec::decode_only(QK_K, q3_k::dequantize_row);
pub const IQ4_NL: Codec<iq4_nl::BlockIq4Nl> =
    Codec::decode_only(iq4_nl::QK4_NL, iq4_nl::dequantize_row);
pub const IQ4_XS: Codec<iq4_xs::BlockIq4Xs> = Codec::decode_only(QK_K, iq4_xs::dequantize_row);

/// test-quantize-fns' dot product check: `vec_dot` of its weight data quantized as `w`
/// and its activation data quantized as `a`, within `MAX_DOT_PRODUCT_ERROR` per element
/// of the f64 dot of the unquantized data.
pub fn assert_vec_dot_within_llama_cpp_bound<W: Pod, A: Pod>(
    w: &Codec<W>,
    a: &Codec<A>,
    vec_dot: fn(&[W], &[A]) -> f32,
    what: &str,
) {
    let x = generate_data(0.0, TEST_SIZE, 2.0);
    let y = generate_data(1.0, TEST_SIZE, 2.0);
    let got = vec_dot(&w.quantize(&x), &a.quantize(&y));
    assert_dot_close(got, dot_f64(&x, &y), TEST_SIZE, MAX_DOT_PRODUCT_ERROR, what);
}

/// The operands of a `vec_dot` twin test: `nb` random weight blocks of `w` (`fix` makes
/// their scales finite) and activations of `a` quantized from uniform data in
/// [-1.5, 1.5), each with its decoded values: `(w, a, w decoded, a decoded)`.
pub fn random_dot_operands<W: Pod, A: Pod>(
    rng: &mut Rng,
    nb: usize,
    w: &Codec<W>,
    fix: impl Fn(&mut W, &mut Rng),
    a: &Codec<A>,
) -> (Vec<W>, Vec<A>, Vec<f32>, Vec<f32>) {
    let wq = random_blocks(rng, nb, fix);
    let aq = a.quantize(&rng.vec(nb * w.qk, 1.5));
    let (wf, af) = (w.dequantize(&wq), a.dequantize(&aq));
    (wq, aq, wf, af)
}

/// The `vec_dot` twin test of a format: `vec_dot` on [`random_dot_operands`] (seeded by
/// `rng`) matches the f64 dot of the decoded operands within `1e-5` of `Σ|w·a|`; for the
/// formats with a min (`min`: a block's `m`), as [`assert_min_dot_matches_dequantized`]
/// bounds it (`1e-3`).
pub fn assert_vec_dot_twin<W: Pod, A: Pod>(
    mut rng: Rng,
    nb: usize,
    w: &Codec<W>,
    fix: impl Fn(&mut W, &mut Rng),
    a: &Codec<A>,
    vec_dot: fn(&[W], &[A]) -> f32,
    min: Option<fn(&W) -> half::f16>,
) {
    let (wq, aq, wf, af) = random_dot_operands(&mut rng, nb, w, fix, a);
    let got = vec_dot(&wq, &aq);
    match min {
        None => assert_dot_matches_dequantized(got, &wf, &af, 1e-5),
        Some(min) => {
            let m: Vec<f32> = wq.iter().map(|b| min(b).to_f32()).collect();
            assert_min_dot_matches_dequantized(got, &wf, &af, &m, 1e-3);
        }
    }
}

/// [`assert_dot_matches_dequantized`] for the formats with a min (Q4_1, Q5_1): their
/// `vec_dot` applies the block min `m[b]` through the activation's `s`, which is `d·Σq`
/// rounded to fp16, so the min term carries a 2^-11 relative error and the bound counts
/// `|m|·|a|` too.
pub fn assert_min_dot_matches_dequantized(got: f32, wf: &[f32], af: &[f32], m: &[f32], rel: f64) {
    let want = dot_f64(wf, af);
    let qk = wf.len() / m.len();
    let scale: f64 = (0..wf.len())
        .map(|i| ((wf[i].abs() + m[i / qk].abs()) * af[i].abs()) as f64)
        .sum();
    let got = got as f64;
    assert!((got - want).abs() <= rel * scale, "{got} vs {want}");
}
