//! Activation quantization: an f32 row becomes int8 blocks of 32 (q8_0-style, symmetric,
//! `x ≈ q·d`, `|q| <= 127`), with what the kernels need to fold the weights' offsets:
//! the per-block code sum `Σq` (Q4_0's `-8` offset: `Σ(w-8)q = Σwq - 8Σq`, exact in int32)
//! and `d·Σq` (Q4_1's min: `Σ(w·dw + m)(q·da) = dw·da·Σwq + m·(da·Σq)`).
//!
//! One activation serves every matrix that reads the same input (Q, K, V, gate, up). It
//! also keeps the f32 rows: F16 weights multiply those directly.

use super::packed::QK;
use crate::Isa;

/// One or more quantized activation rows (tokens) of `cols` elements.
#[derive(Clone, Debug, Default)]
pub struct QuantizedActivation {
    rows: usize,
    cols: usize,
    /// `rows x cols` codes.
    qs: Vec<i8>,
    /// `rows x cols/32` scales.
    d: Vec<f32>,
    /// `rows x cols/32` code sums `Σq`.
    sum: Vec<i32>,
    /// `rows x cols/32` products `d·Σq`.
    ds: Vec<f32>,
    /// `rows x cols/32` values `8·Σq` (Q4_0's offset, ready to broadcast from memory).
    sum8: Vec<i32>,
    /// `rows x cols/32` pairs of half-block code sums, `(Σq[0..16] as i16) | (Σq[16..32]
    /// as i16) << 16` (Q6_K's `-32` offset under its per-16 scales; `|Σ| <= 2032`).
    sum16: Vec<i32>,
    /// The f32 rows themselves (`rows x cols`), for F16 weights (which take f32
    /// activations, as ggml's F16 x F32 path).
    x: Vec<f32>,
}

impl QuantizedActivation {
    /// Quantizes `n_rows` rows laid out back to back in `x` (`x.len()` must be a multiple
    /// of `n_rows`, and the row length a multiple of 32).
    pub fn quantize(x: &[f32], n_rows: usize) -> Self {
        Self::quantize_with(x, n_rows, Isa::active())
    }

    /// [`Self::quantize`] on a given ISA level (every level gives bit-identical results).
    pub fn quantize_with(x: &[f32], n_rows: usize, isa: Isa) -> Self {
        let mut a = QuantizedActivation::default();
        a.requantize_with(x, n_rows, isa);
        a
    }

    /// Like [`Self::quantize`], reusing this activation's buffers (no allocation once
    /// they are large enough).
    pub fn requantize(&mut self, x: &[f32], n_rows: usize) {
        self.requantize_with(x, n_rows, Isa::active())
    }

    pub fn requantize_with(&mut self, x: &[f32], n_rows: usize, isa: Isa) {
        assert!(n_rows > 0, "no activation rows");
        assert!(
            x.len() % n_rows == 0,
            "activation length is not rows x cols"
        );
        let cols = x.len() / n_rows;
        assert!(
            cols > 0 && cols % QK == 0,
            "activation row of {cols} is not a positive multiple of 32"
        );
        let nb = x.len() / QK;
        self.rows = n_rows;
        self.cols = cols;
        self.qs.resize(x.len(), 0);
        self.d.resize(nb, 0.0);
        self.sum.resize(nb, 0);
        self.ds.resize(nb, 0.0);
        self.sum8.resize(nb, 0);
        self.sum16.resize(nb, 0);
        self.x.clear();
        self.x.extend_from_slice(x);
        if !self.quantize_simd(x, isa) {
            for (b, (xb, qb)) in x
                .chunks_exact(QK)
                .zip(self.qs.chunks_exact_mut(QK))
                .enumerate()
            {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                let mut s = 0i32;
                for (q, &v) in qb.iter_mut().zip(xb) {
                    // Round half to even (as `vroundps`); |v·id| <= 127 up to rounding; NaN -> 0.
                    let r = (v * id).round_ties_even().clamp(-127.0, 127.0) as i8;
                    *q = r;
                    s += r as i32;
                }
                self.d[b] = d;
                self.sum[b] = s;
                self.ds[b] = d * s as f32;
            }
        }
        // Sums derived from the codes, in one place for every path (an ISA path that
        // forgot one once broke Q6_K on ARM only).
        for (s8, s) in self.sum8.iter_mut().zip(&self.sum) {
            *s8 = 8 * s;
        }
        self.fill_sum16();
    }

    /// Fills `qs`, `d`, `sum` and `ds` with the ISA's kernel; false when there is none.
    fn quantize_simd(&mut self, x: &[f32], isa: Isa) -> bool {
        #[cfg(target_arch = "x86_64")]
        if isa.has_avx2() && isa.is_available() {
            crate::arch::x86::act::quantize_checked(
                x,
                &mut self.qs,
                &mut self.d,
                &mut self.sum,
                &mut self.ds,
            );
            return true;
        }
        #[cfg(target_arch = "aarch64")]
        if matches!(isa, Isa::Neon | Isa::Dotprod | Isa::I8mm) && isa.is_available() {
            crate::arch::arm::act::quantize_checked(
                x,
                &mut self.qs,
                &mut self.d,
                &mut self.sum,
                &mut self.ds,
            );
            return true;
        }
        let _ = (x, isa);
        false
    }

    fn fill_sum16(&mut self) {
        for (s16, q) in self.sum16.iter_mut().zip(self.qs.chunks_exact(QK)) {
            let lo: i32 = q[..16].iter().map(|&v| v as i32).sum();
            let hi: i32 = q[16..].iter().map(|&v| v as i32).sum();
            *s16 = (lo as i16 as u16 as u32 | (hi as i16 as u16 as u32) << 16) as i32;
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// 32-blocks per row.
    pub fn blocks(&self) -> usize {
        self.cols / QK
    }
    /// Codes of row `t`.
    pub fn row_qs(&self, t: usize) -> &[i8] {
        &self.qs[t * self.cols..(t + 1) * self.cols]
    }
    /// Block scales of row `t`.
    pub fn row_d(&self, t: usize) -> &[f32] {
        let nb = self.blocks();
        &self.d[t * nb..(t + 1) * nb]
    }
    /// Block code sums of row `t`.
    pub fn row_sum(&self, t: usize) -> &[i32] {
        let nb = self.blocks();
        &self.sum[t * nb..(t + 1) * nb]
    }
    /// Block `8·Σq` of row `t`.
    pub fn row_sum8(&self, t: usize) -> &[i32] {
        let nb = self.blocks();
        &self.sum8[t * nb..(t + 1) * nb]
    }
    /// Block half-sums of row `t`: `(Σq[0..16] as i16) | (Σq[16..32] as i16) << 16`.
    pub fn row_sum16(&self, t: usize) -> &[i32] {
        let nb = self.blocks();
        &self.sum16[t * nb..(t + 1) * nb]
    }
    /// The f32 input row `t` (as given, unquantized).
    pub fn row_f32(&self, t: usize) -> &[f32] {
        &self.x[t * self.cols..(t + 1) * self.cols]
    }
    /// Block `d·Σq` of row `t`.
    pub fn row_ds(&self, t: usize) -> &[f32] {
        let nb = self.blocks();
        &self.ds[t * nb..(t + 1) * nb]
    }
    /// Dequantized row `t` (test oracle).
    pub fn dequant_row(&self, t: usize) -> Vec<f32> {
        self.row_qs(t)
            .iter()
            .enumerate()
            .map(|(i, &q)| q as f32 * self.row_d(t)[i / QK])
            .collect()
    }
}
