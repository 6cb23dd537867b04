//! Activation quantization: an f32 row becomes int8 blocks of 32 (q8_0-style, symmetric,
//! `x ≈ q·d`, `|q| <= 127`), with what the kernels need to fold the weights' offsets:
//! the per-block code sum `Σq` (Q4_0's `-8` offset: `Σ(w-8)q = Σwq - 8Σq`, exact in int32)
//! and `d·Σq` (Q4_1's min: `Σ(w·dw + m)(q·da) = dw·da·Σwq + m·(da·Σq)`).
//!
//! One activation serves every matrix that reads the same input (Q, K, V, gate, up). It
//! also keeps the f32 rows: F16 weights multiply those directly.

use super::packed::QK;
use crate::Isa;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

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
    /// activations, as ggml's F16 x F32 path); empty when the filler said no F16 matrix
    /// reads this activation ([`Self::parts_keeping`]).
    x: Vec<f32>,
    /// The rows as an ISA's tiles read them ([`Self::staged_all`]): made once per
    /// quantization by the first call that asks, then read by every item of every product
    /// of this input (a few-token product split by output panels restaged them in each of
    /// its items).
    staged: SharedStaging,
}

/// [`QuantizedActivation::staged_all`]'s copy: claimed by one thread, which makes it, and
/// read by every call after that. A call that finds it claimed but not made stages its own
/// rather than wait (a thread woken to wait cost more than the staging).
#[derive(Debug, Default)]
struct SharedStaging {
    claimed: AtomicBool,
    done: OnceLock<Staged>,
}

impl Clone for SharedStaging {
    fn clone(&self) -> Self {
        let done = self.done.clone();
        let claimed = AtomicBool::new(done.get().is_some());
        SharedStaging { claimed, done }
    }
}

/// All rows of an activation staged for token tiles of `tt` ([`QuantizedActivation::staged_all`]).
#[derive(Clone, Debug, Default)]
struct Staged {
    tt: usize,
    bytes: Vec<u8>,
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
        for part in self.parts_keeping(x, n_rows, 1, isa, true) {
            part.fill();
        }
    }

    /// Sizes this activation for `x` (`n_rows` rows) and splits it into at most `n` parts
    /// of whole rows, to be filled ([`RowsPart::fill`]) in any order, on any threads: once
    /// every part is filled the activation is what [`Self::requantize_with`] makes (rows
    /// are quantized independently). Prefill quantizes ~5 MB of activations per layer, too
    /// much for one thread of a pool.
    pub fn parts<'a>(
        &'a mut self,
        x: &'a [f32],
        n_rows: usize,
        n: usize,
        isa: Isa,
    ) -> Vec<RowsPart<'a>> {
        self.parts_keeping(x, n_rows, n, isa, true)
    }

    /// [`Self::parts`]; `keep_f32`: also keep a copy of the f32 rows ([`Self::row_f32`],
    /// which only F16 weights read). Without it the fill skips a copy of every input
    /// (4 bytes an element: a third of prefill's serial activation work on SmolLM2).
    pub fn parts_keeping<'a>(
        &'a mut self,
        x: &'a [f32],
        n_rows: usize,
        n: usize,
        isa: Isa,
        keep_f32: bool,
    ) -> Vec<RowsPart<'a>> {
        assert!(n_rows > 0, "no activation rows");
        assert!(
            x.len().is_multiple_of(n_rows),
            "activation length is not rows x cols"
        );
        let cols = x.len() / n_rows;
        assert!(
            cols > 0 && cols.is_multiple_of(QK),
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
        self.x.resize(if keep_f32 { x.len() } else { 0 }, 0.0);
        self.staged = SharedStaging::default();
        let n = n.clamp(1, n_rows);
        let (mut qs, mut d, mut sum, mut ds) = (
            &mut self.qs[..],
            &mut self.d[..],
            &mut self.sum[..],
            &mut self.ds[..],
        );
        let (mut sum8, mut sum16, mut xc, mut xs) =
            (&mut self.sum8[..], &mut self.sum16[..], &mut self.x[..], x);
        let bpr = cols / QK;
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let rows = n_rows * (i + 1) / n - n_rows * i / n;
            let (e, b) = (rows * cols, rows * bpr);
            let (q0, q1) = std::mem::take(&mut qs).split_at_mut(e);
            let (d0, d1) = std::mem::take(&mut d).split_at_mut(b);
            let (s0, s1) = std::mem::take(&mut sum).split_at_mut(b);
            let (ds0, ds1) = std::mem::take(&mut ds).split_at_mut(b);
            let (e0, e1) = std::mem::take(&mut sum8).split_at_mut(b);
            let (h0, h1) = std::mem::take(&mut sum16).split_at_mut(b);
            let (c0, c1) = std::mem::take(&mut xc).split_at_mut(if keep_f32 { e } else { 0 });
            let (x0, x1) = xs.split_at(e);
            (qs, d, sum, ds, sum8, sum16, xc, xs) = (q1, d1, s1, ds1, e1, h1, c1, x1);
            parts.push(RowsPart {
                x: x0,
                qs: q0,
                d: d0,
                sum: s0,
                ds: ds0,
                sum8: e0,
                sum16: h0,
                x_copy: c0,
                isa,
            });
        }
        parts
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
        row(&self.qs, t, self.cols)
    }
    /// Block scales of row `t`.
    pub fn row_d(&self, t: usize) -> &[f32] {
        row(&self.d, t, self.blocks())
    }
    /// Block code sums of row `t`.
    pub fn row_sum(&self, t: usize) -> &[i32] {
        row(&self.sum, t, self.blocks())
    }
    /// Block `8·Σq` of row `t`.
    pub fn row_sum8(&self, t: usize) -> &[i32] {
        row(&self.sum8, t, self.blocks())
    }
    /// Block half-sums of row `t`: `(Σq[0..16] as i16) | (Σq[16..32] as i16) << 16`.
    pub fn row_sum16(&self, t: usize) -> &[i32] {
        row(&self.sum16, t, self.blocks())
    }
    /// The f32 input row `t` (as given, unquantized). Panics when the activation was
    /// filled without them ([`Self::parts_keeping`]).
    pub fn row_f32(&self, t: usize) -> &[f32] {
        assert!(
            !self.x.is_empty(),
            "activation quantized without its f32 rows (no F16 matrix was to read them)"
        );
        row(&self.x, t, self.cols)
    }
    /// Every row staged for token tiles of `tt` by `stage` (which fills the buffer it is
    /// given from this activation), made by the first caller after the quantization and
    /// shared by the later ones; `None` when it was made for another tile size or is still
    /// being made by another thread (the caller then stages its own). The staging depends
    /// on the rows and `tt` alone, so a shared copy has the bits a private one would.
    pub fn staged_all(&self, tt: usize, stage: impl FnOnce(&mut Vec<u8>)) -> Option<&Vec<u8>> {
        let shared = &self.staged;
        if shared.done.get().is_none() && !shared.claimed.swap(true, Ordering::AcqRel) {
            let mut bytes = Vec::new();
            stage(&mut bytes);
            let _ = shared.done.set(Staged { tt, bytes });
        }
        let s = shared.done.get()?;
        (s.tt == tt).then_some(&s.bytes)
    }

    /// Block `d·Σq` of row `t`.
    pub fn row_ds(&self, t: usize) -> &[f32] {
        row(&self.ds, t, self.blocks())
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

/// Row `t` of `v` cut into rows of `len`.
#[inline(always)]
fn row<T>(v: &[T], t: usize, len: usize) -> &[T] {
    &v[t * len..(t + 1) * len]
}

/// Whole rows of a [`QuantizedActivation`] being filled: the input rows and the pieces of
/// every array they fill ([`QuantizedActivation::parts`]).
pub struct RowsPart<'a> {
    x: &'a [f32],
    qs: &'a mut [i8],
    d: &'a mut [f32],
    sum: &'a mut [i32],
    ds: &'a mut [f32],
    sum8: &'a mut [i32],
    sum16: &'a mut [i32],
    x_copy: &'a mut [f32],
    isa: Isa,
}

impl RowsPart<'_> {
    /// Quantizes the part's rows (every ISA level gives the same bits).
    pub fn fill(self) {
        let RowsPart {
            x,
            qs,
            d,
            sum,
            ds,
            sum8,
            sum16,
            x_copy,
            isa,
        } = self;
        if !x_copy.is_empty() {
            x_copy.copy_from_slice(x);
        }
        let filled = quantize_simd(x, qs, d, sum, ds, sum16, isa);
        if filled == Filled::Nothing {
            for (b, (xb, qb)) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).enumerate() {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let db = amax / 127.0;
                let id = if db > 0.0 { 1.0 / db } else { 0.0 };
                let mut s = 0i32;
                for (q, &v) in qb.iter_mut().zip(xb) {
                    // Round half to even (as `vroundps`); |v·id| <= 127 up to rounding; NaN -> 0.
                    let r = (v * id).round_ties_even().clamp(-127.0, 127.0) as i8;
                    *q = r;
                    s += r as i32;
                }
                d[b] = db;
                sum[b] = s;
                ds[b] = db * s as f32;
            }
        }
        // Sums derived from the codes, here for every path but the one that has its
        // halves' sums at hand (an ISA path that forgot one once broke Q6_K on ARM only:
        // `quantize_is_identical_on_every_isa` compares them all).
        for (s8, s) in sum8.iter_mut().zip(sum.iter()) {
            *s8 = 8 * s;
        }
        if filled == Filled::WithHalves {
            return;
        }
        for (s16, q) in sum16.iter_mut().zip(qs.chunks_exact(QK)) {
            let lo: i32 = q[..16].iter().map(|&v| v as i32).sum();
            let hi: i32 = q[16..].iter().map(|&v| v as i32).sum();
            *s16 = (lo as i16 as u16 as u32 | (hi as i16 as u16 as u32) << 16) as i32;
        }
    }
}

/// What an ISA's quantization kernel filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filled {
    /// No kernel at this level: the scalar loop fills everything.
    Nothing,
    /// `qs`, `d`, `sum` and `ds`.
    Codes,
    /// Those and `sum16` (AVX-512 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    WithHalves,
}

/// Fills `qs`, `d`, `sum` and `ds` (and `sum16` on AVX-512) with the ISA's kernel.
fn quantize_simd(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    sum: &mut [i32],
    ds: &mut [f32],
    sum16: &mut [i32],
    isa: Isa,
) -> Filled {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512Vnni && isa.is_available() {
        let out = crate::arch::x86::act::Blocks {
            qs,
            d,
            sum,
            ds,
            sum16,
        };
        crate::arch::x86::act::quantize_avx512_checked(x, out);
        return Filled::WithHalves;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() && isa.is_available() {
        crate::arch::x86::act::quantize_checked(x, qs, d, sum, ds);
        return Filled::Codes;
    }
    #[cfg(target_arch = "aarch64")]
    if matches!(isa, Isa::Neon | Isa::Dotprod | Isa::I8mm) && isa.is_available() {
        crate::arch::arm::act::quantize_checked(x, qs, d, sum, ds);
        return Filled::Codes;
    }
    let _ = (x, qs, d, sum, ds, sum16, isa);
    Filled::Nothing
}
