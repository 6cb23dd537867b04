//! A LoRA adapter's `B` in int8 ([`Bt8`]): `out += s · B·mid` for the rank-long middle
//! vector `mid = A x`, over any run of output columns ([`add_product_with`]). A decode
//! step reads every adapter byte once, so its cost is the bytes: int8 codes with one f32
//! scale per output column are `rank + 4` bytes a column against bf16's `2·rank`.
//!
//! Layout: `Bᵀ` in panels of [`PANEL`] (16) output columns; panel `p` holds the `rank`
//! rows of columns `16p .. 16p + 16` one after the other (16 codes each, zero past
//! `n_out`), so a run of columns is one contiguous read and one 16-byte load per rank
//! index (one `zmm`, two `ymm`). Column `o`'s codes are `round(B[o][r] / d[o])` with `d[o]
//! = max_r |B[o][r]| / 127` (each column its own scale: the rows of `B` are the output
//! channels).
//!
//! Column `o` of the product, on every level: `acc = ((0 + mid[0]·q[o][0]) +
//! mid[1]·q[o][1]) + …` (each code widened to f32 exactly; multiplies and adds apart, no
//! FMA), then `out[o] += scale · (d[o] · acc)`. The SIMD bodies (`arch::x86::lowrank_q8`:
//! AVX2, and AVX-512 on the AVX-512 level) compute exactly that per lane, so they are
//! bit-identical to [`add_product_ref`] whichever columns a call takes. On aarch64 the reference runs
//! (no NEON body yet: the compiler vectorizes its column loop).

use super::{path, Path};
use crate::Isa;

/// Output columns per panel.
pub const PANEL: usize = 16;

/// `Bᵀ` (`rank × n_out`) as int8 codes with a scale per output column (see the module).
#[derive(Clone, Debug, Default)]
pub struct Bt8 {
    pub rank: usize,
    pub n_out: usize,
    /// Panels of `rank × 16` codes (`n_out.div_ceil(16)` of them).
    pub q: Vec<i8>,
    /// Per column, padded to whole panels (0 past `n_out`).
    pub d: Vec<f32>,
}

impl Bt8 {
    /// Quantizes `B` (`n_out × rank`, row-major f32).
    pub fn quantize(b: &[f32], n_out: usize, rank: usize) -> Bt8 {
        assert_eq!(b.len(), n_out * rank, "lowrank_q8: B is not {n_out}x{rank}");
        let cols = n_out.div_ceil(PANEL) * PANEL;
        let mut t = Bt8 {
            rank,
            n_out,
            q: vec![0; cols * rank],
            d: vec![0.0; cols],
        };
        for (o, row) in b.chunks_exact(rank.max(1)).enumerate().take(n_out) {
            let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            t.d[o] = d;
            for (r, &v) in row.iter().enumerate() {
                let i = t.index(o, r);
                t.q[i] = (v * id).round().clamp(-127.0, 127.0) as i8;
            }
        }
        t
    }

    /// Where code `(o, r)` is in [`Self::q`].
    pub fn index(&self, o: usize, r: usize) -> usize {
        (o / PANEL) * PANEL * self.rank + r * PANEL + o % PANEL
    }

    /// `B` dequantized, row-major (`n_out × rank`).
    pub fn to_rows(&self) -> Vec<f32> {
        let mut b = vec![0f32; self.n_out * self.rank];
        for o in 0..self.n_out {
            for r in 0..self.rank {
                b[o * self.rank + r] = self.d[o] * self.q[self.index(o, r)] as f32;
            }
        }
        b
    }

    /// Bytes held (what a pass over every column reads).
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * self.d.len()
    }

    /// Column `o`'s rank sum, before its scale: `Σ_r mid[r] · q[o][r]` in rank order.
    pub fn column(&self, o: usize, mid: &[f32]) -> f32 {
        let mut acc = 0f32;
        for (r, &m) in mid.iter().enumerate() {
            acc += m * self.q[self.index(o, r)] as f32;
        }
        acc
    }

    /// Refuses a product unless the codes and scales are whole panels of `rank` rows,
    /// `mid` is `rank` long and columns `c0 .. c0 + n` exist.
    fn check(&self, c0: usize, n: usize, mid: &[f32]) {
        let cols = self.n_out.div_ceil(PANEL) * PANEL;
        assert!(
            mid.len() == self.rank
                && self.q.len() == cols * self.rank
                && self.d.len() == cols
                && c0 + n <= self.n_out,
            "lowrank_q8: columns {c0}..{} of a {}x{} Bᵀ ({} codes, {} scales), mid of {}",
            c0 + n,
            self.rank,
            self.n_out,
            self.q.len(),
            self.d.len(),
            mid.len()
        );
    }
}

/// Scalar reference: `out[j] += scale · (d[o] · column(o))` for the columns `o = c0 + j`.
pub fn add_product_ref(bt: &Bt8, c0: usize, mid: &[f32], scale: f32, out: &mut [f32]) {
    bt.check(c0, out.len(), mid);
    for (j, v) in out.iter_mut().enumerate() {
        let o = c0 + j;
        *v += scale * (bt.d[o] * bt.column(o, mid));
    }
}

/// [`add_product_ref`] on level `isa`.
pub fn add_product_with(isa: Isa, bt: &Bt8, c0: usize, mid: &[f32], scale: f32, out: &mut [f32]) {
    bt.check(c0, out.len(), mid);
    match path(isa) {
        Path::Scalar => add_product_ref(bt, c0, mid, scale, out),
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::lowrank_q8::add_product(t, isa, bt, c0, mid, scale, out),
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => add_product_ref(bt, c0, mid, scale, out),
    }
}

/// Asks the cache for what [`add_product_with`] reads for columns `cols` (a hint, nothing
/// on the scalar level or on aarch64): a decode step's row block calls it before its base
/// rows, so its `B` slice comes in from DRAM while the base product runs.
pub fn prefetch_with(isa: Isa, bt: &Bt8, cols: std::ops::Range<usize>) {
    match path(isa) {
        Path::Scalar => {}
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::lowrank_q8::prefetch(t, bt, cols),
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => {
            let _ = (bt, cols);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::lowrank_test::{bits, config, f32s, span};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(config())]

        /// Every level equals the reference bit for bit on random shapes, any run of
        /// columns (heads and tails off the panel boundaries); the reference is the
        /// dequantized product, and the codes are within half a step of `B`.
        #[test]
        fn product_is_the_reference_bit_for_bit(
            (rank, n_out, b, mid, out) in (1usize..40, 1usize..200).prop_flat_map(|(r, n)| {
                (Just(r), Just(n), f32s(r * n, 0.05), f32s(r, 3.0), f32s(n, 1.0))
            }),
            cut in (0f64..1.0, 0f64..1.0),
            scale in -2f32..2.0,
        ) {
            let bt = Bt8::quantize(&b, n_out, rank);
            let deq = bt.to_rows();
            for (o, row) in b.chunks_exact(rank).enumerate() {
                for (r, &v) in row.iter().enumerate() {
                    prop_assert!((deq[o * rank + r] - v).abs() <= bt.d[o] * 0.5001 + 1e-9);
                }
            }
            let (c0, c1) = span(cut, n_out);
            let mut want = out[c0..c1].to_vec();
            add_product_ref(&bt, c0, &mid, scale, &mut want);
            for (j, w) in want.iter().enumerate() {
                let o = c0 + j;
                let d: f64 = (0..rank).map(|r| mid[r] as f64 * deq[o * rank + r] as f64).sum();
                let exact = out[o] as f64 + scale as f64 * d;
                prop_assert!((*w as f64 - exact).abs() <= 1e-5 * (1.0 + rank as f64));
            }
            for isa in Isa::available() {
                let mut got = out[c0..c1].to_vec();
                add_product_with(isa, &bt, c0, &mid, scale, &mut got);
                prop_assert_eq!(bits(&got), bits(&want), "{}", isa);
                prefetch_with(isa, &bt, c0..c1);
            }
        }
    }

    #[test]
    #[should_panic(expected = "lowrank_q8: columns")]
    fn columns_past_the_matrix_are_refused() {
        let bt = Bt8::quantize(&[1.0; 8], 4, 2);
        add_product_with(Isa::active(), &bt, 1, &[1.0, 1.0], 1.0, &mut [0f32; 4]);
    }

    #[test]
    fn zero_columns_stay_zero() {
        let bt = Bt8::quantize(&[0.0; 6], 3, 2);
        let mut out = [1f32; 3];
        add_product_with(Isa::active(), &bt, 0, &[5.0, -2.0], 1.0, &mut out);
        assert_eq!(out, [1.0; 3]);
    }
}
