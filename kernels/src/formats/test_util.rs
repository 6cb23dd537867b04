//! Test helpers shared by the format files: llama.cpp's `test-quantize-fns.cpp` data,
//! error measures and bounds, and a small deterministic random source.

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
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
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

/// Asserts `got` is within `tol` per element (test-quantize-fns' `|got-ref|/n`) of `want`.
/// A block dot product against the f64 dot of its operands' dequantized values, within
/// `rel` of the summed magnitudes (the check every format's `vec_dot` twin shares).
pub fn assert_dot_matches_dequantized(got: f32, wf: &[f32], af: &[f32], rel: f64) {
    let want = dot_f64(wf, af);
    let scale: f64 = wf.iter().zip(af).map(|(x, y)| (x * y).abs() as f64).sum();
    let got = got as f64;
    assert!((got - want).abs() <= rel * scale, "{got} vs {want}");
}

pub fn assert_dot_close(got: f32, want: f64, n: usize, tol: f32, what: &str) {
    let err = ((got as f64 - want).abs() / n as f64) as f32;
    assert!(
        err < tol,
        "{what}: dot {got} vs reference {want}: error {err} >= {tol}"
    );
}
