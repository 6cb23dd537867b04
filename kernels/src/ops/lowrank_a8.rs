//! A LoRA adapter's `A` in int8 ([`A8`]): `mid[r] = A[r] · x` for the f32 input row `x`
//! (the layer's exact input, not a quantized copy) over any run of rows
//! ([`rows_with`]). A decode step reads every adapter byte once, so its cost is the
//! bytes: int8 codes with an f32 scale per 32 inputs are 1.125 bytes an element against
//! bf16's 2, and only `A`'s own rounding is added (the input stays f32, the rank-long
//! result stays f32).
//!
//! Layout: rows in panels of [`PANEL`] (16; the last panel may be shorter), and inside a
//! panel block by block: block `b` of a panel of `h` rows is `h` runs of 32 codes (row 0's
//! first), its `h` scales likewise; a short last block is padded with zero codes. Row
//! `r`'s block `b`: `q[r][32b + i] = round(A[r][32b + i] / d)`, `d = max |A| / 127` over
//! the block. So the `A x` of a whole panel (a rank-16 pair is one) reads the codes as
//! one sequential stream and the scales as another, which the hardware prefetcher
//! follows from the first lines, where a row-major `A` was 16 short streams, each
//! waiting on DRAM anew.
//!
//! Row `r` of the product, on every level: 16 partial sums `acc[l]`; for each whole block
//! `b` (inputs `32b ..`), `acc[l] += d_b · ((q[32b+l]·x[32b+l]) + (q[32b+16+l]·x[32b+16+l]))`
//! (each code widened to f32 exactly; multiplies and adds apart, no FMA); then
//! `s = acc[0] + acc[1] + … + acc[15]` left to right, and a short last block adds
//! `d · (Σ q·x in order)` to `s`. The SIMD bodies (`arch::x86::lowrank_a8`: AVX2 with two
//! 8-lane sums, AVX-512 with one 16-lane sum) compute exactly that, so they are
//! bit-identical to [`row_ref`] whichever rows a call takes. On aarch64 the reference
//! runs (the compiler vectorizes its lane loop).

use super::{path, Path};
use crate::Isa;

/// Inputs per scale.
pub const BLOCK: usize = 32;

/// Rows interleaved block by block (see the module).
pub const PANEL: usize = 16;

/// `A` (`rank × n_in`) as int8 codes with a scale per 32 inputs of a row, in panels of
/// [`PANEL`] rows (see the module).
#[derive(Clone, Debug, Default)]
pub struct A8 {
    pub rank: usize,
    pub n_in: usize,
    /// `rank × blocks × 32` codes, panel by panel, block by block, row by row.
    pub q: Vec<i8>,
    /// `rank × blocks` scales, in the same order.
    pub d: Vec<f32>,
}

/// Where a row's blocks are: block `b`'s codes at `q + 32·(b·height + row)`, its scale at
/// `d + b·height + row` ([`A8::at`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PanelRow {
    /// The panel's first code (its first scale is at `q / 32`).
    pub q: usize,
    /// Rows in the panel.
    pub height: usize,
    /// The row's place in the panel.
    pub row: usize,
}

impl PanelRow {
    /// Index of block `b`'s first code.
    pub fn code(&self, b: usize) -> usize {
        self.q + BLOCK * (b * self.height + self.row)
    }

    /// Index of block `b`'s scale.
    pub fn scale(&self, b: usize) -> usize {
        self.q / BLOCK + b * self.height + self.row
    }
}

impl A8 {
    /// Quantizes `A` (`rank × n_in`, row-major f32).
    pub fn quantize(a: &[f32], rank: usize, n_in: usize) -> A8 {
        assert_eq!(a.len(), rank * n_in, "lowrank_a8: A is not {rank}x{n_in}");
        let nb = n_in.div_ceil(BLOCK);
        let mut t = A8 {
            rank,
            n_in,
            q: vec![0; rank * nb * BLOCK],
            d: vec![0.0; rank * nb],
        };
        for r in 0..rank {
            let at = t.at(r);
            let src = &a[r * n_in..(r + 1) * n_in];
            for (b, s) in src.chunks(BLOCK).enumerate() {
                let amax = s.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                for (q, &v) in t.q[at.code(b)..].iter_mut().zip(s) {
                    *q = (v * id).round().clamp(-127.0, 127.0) as i8;
                }
                t.d[at.scale(b)] = d;
            }
        }
        t
    }

    /// Scales per row.
    pub fn blocks(&self) -> usize {
        self.n_in.div_ceil(BLOCK)
    }

    /// Where row `r`'s blocks are.
    pub fn at(&self, r: usize) -> PanelRow {
        let p0 = r / PANEL * PANEL;
        PanelRow {
            q: p0 * self.blocks() * BLOCK,
            height: PANEL.min(self.rank - p0),
            row: r - p0,
        }
    }

    /// `A` dequantized, row-major (`rank × n_in`).
    pub fn to_rows(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rank * self.n_in];
        for r in 0..self.rank {
            let at = self.at(r);
            let row = &mut out[r * self.n_in..(r + 1) * self.n_in];
            for (b, o) in row.chunks_mut(BLOCK).enumerate() {
                let d = self.d[at.scale(b)];
                for (o, &q) in o.iter_mut().zip(&self.q[at.code(b)..]) {
                    *o = d * q as f32;
                }
            }
        }
        out
    }

    /// Bytes held (what a pass over every row reads).
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * self.d.len()
    }

    /// Refuses a product unless the codes and scales fit the shape, `x` is `n_in` long
    /// and rows `rows` exist, `mid` one value each.
    fn check(&self, rows: &std::ops::Range<usize>, x: &[f32], mid: &[f32]) {
        assert!(
            self.q.len() == self.rank * self.blocks() * BLOCK
                && self.d.len() == self.rank * self.blocks()
                && x.len() == self.n_in
                && rows.start <= rows.end
                && rows.end <= self.rank
                && mid.len() == rows.len(),
            "lowrank_a8: rows {rows:?} of a {}x{} A ({} codes, {} scales), x of {}, mid of {}",
            self.rank,
            self.n_in,
            self.q.len(),
            self.d.len(),
            x.len(),
            mid.len()
        );
    }
}

/// The short last block of row `r` (if `n_in % 32 != 0`): `d · Σ q·x` in order.
pub fn tail(a: &A8, r: usize, x: &[f32]) -> f32 {
    let whole = a.n_in / BLOCK;
    if whole * BLOCK == a.n_in {
        return 0.0;
    }
    let at = a.at(r);
    let q = &a.q[at.code(whole)..][..a.n_in - whole * BLOCK];
    let mut t = 0f32;
    for (&c, &v) in q.iter().zip(&x[whole * BLOCK..]) {
        t += c as f32 * v;
    }
    a.d[at.scale(whole)] * t
}

/// Scalar reference: row `r` of `A x` (see the module for the order).
pub fn row_ref(a: &A8, r: usize, x: &[f32]) -> f32 {
    let at = a.at(r);
    let mut acc = [0f32; 16];
    for b in 0..a.n_in / BLOCK {
        let d = a.d[at.scale(b)];
        let (qb, xb) = (&a.q[at.code(b)..][..BLOCK], &x[b * BLOCK..][..BLOCK]);
        for (l, acc) in acc.iter_mut().enumerate() {
            let t = qb[l] as f32 * xb[l] + qb[16 + l] as f32 * xb[16 + l];
            *acc += d * t;
        }
    }
    let mut s = 0f32;
    for v in acc {
        s += v;
    }
    s + tail(a, r, x)
}

/// `mid[j] = (A x)[rows.start + j]` on level `isa` ([`row_ref`]'s arithmetic).
pub fn rows_with(isa: Isa, a: &A8, rows: std::ops::Range<usize>, x: &[f32], mid: &mut [f32]) {
    a.check(&rows, x, mid);
    match path(isa) {
        Path::Scalar => rows
            .zip(mid.iter_mut())
            .for_each(|(r, m)| *m = row_ref(a, r, x)),
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::lowrank_a8::rows(t, isa, a, rows, x, mid),
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => rows
            .zip(mid.iter_mut())
            .for_each(|(r, m)| *m = row_ref(a, r, x)),
    }
}

/// Asks the cache (L2) for the share `part` of `of` of `A`'s codes and of its scales (of
/// each, the bytes from `len·part.start/of` to `len·part.end/of`; a hint, nothing on the
/// scalar level or on aarch64): the row blocks of a decode product call it for the next
/// product's `A`, each for its share of the rows, so that product's `A x`, the first thing
/// its job does, reads L2 instead of waiting on DRAM.
pub fn prefetch_part_with(isa: Isa, a: &A8, part: std::ops::Range<usize>, of: usize) {
    match path(isa) {
        Path::Scalar => {}
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => {
            let of = of.max(1);
            let part = |len: usize| len * part.start / of..len * part.end / of;
            crate::arch::x86::prefetch_l2(t, bytemuck::cast_slice(&a.q), part(a.q.len()));
            crate::arch::x86::prefetch_l2(t, bytemuck::cast_slice(&a.d), part(4 * a.d.len()));
        }
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => {
            let _ = (a, part, of);
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

        /// Every level equals the reference bit for bit on random shapes (widths with and
        /// without a short last block), any run of rows; the reference is the dequantized
        /// product, and the codes are within half a step of `A`.
        #[test]
        fn rows_are_the_reference_bit_for_bit(
            (rank, n_in, a, x) in (1usize..40, 1usize..300).prop_flat_map(|(r, n)| {
                (Just(r), Just(n), f32s(r * n, 0.08), f32s(n, 3.0))
            }),
            cut in (0f64..1.0, 0f64..1.0),
        ) {
            let a8 = A8::quantize(&a, rank, n_in);
            let deq = a8.to_rows();
            for (k, (&w, &v)) in deq.iter().zip(&a).enumerate() {
                let d = a8.d[a8.at(k / n_in).scale(k % n_in / BLOCK)];
                prop_assert!((w - v).abs() <= d * 0.5001 + 1e-12);
            }
            let (u, v) = span(cut, rank);
            let rows = u..v + 1;
            let want: Vec<f32> = rows.clone().map(|r| row_ref(&a8, r, &x)).collect();
            for (j, w) in want.iter().enumerate() {
                let r = rows.start + j;
                let exact: f64 = (0..n_in).map(|i| deq[r * n_in + i] as f64 * x[i] as f64).sum();
                prop_assert!((*w as f64 - exact).abs() <= 1e-5 * (1.0 + n_in as f64 * 0.1));
            }
            for isa in Isa::available() {
                let mut got = vec![0f32; rows.len()];
                rows_with(isa, &a8, rows.clone(), &x, &mut got);
                prefetch_part_with(isa, &a8, rows.clone(), rank);
                prop_assert_eq!(bits(&got), bits(&want), "{}", isa);
            }
        }
    }

    #[test]
    #[should_panic(expected = "lowrank_a8: rows")]
    fn rows_past_the_matrix_are_refused() {
        let a = A8::quantize(&[1.0; 64], 2, 32);
        rows_with(Isa::active(), &a, 1..3, &[1.0; 32], &mut [0f32; 2]);
    }

    /// A panel's codes are one run, block by block and inside a block row by row; a short
    /// last panel follows the full ones.
    #[test]
    fn panels_are_read_in_one_run() {
        let a = A8::quantize(&[0.5; 20 * 70], 20, 70);
        let mut order = Vec::new();
        for (p0, h) in [(0, 16), (16, 4)] {
            for b in 0..a.blocks() {
                for r in p0..p0 + h {
                    assert_eq!(a.at(r).scale(b), order.len());
                    order.push(a.at(r).code(b));
                }
            }
        }
        let runs: Vec<usize> = (0..order.len()).map(|i| i * BLOCK).collect();
        assert_eq!(order, runs);
        assert_eq!(a.q.len(), 20 * 3 * BLOCK);
    }

    #[test]
    fn zero_blocks_stay_zero() {
        let a = A8::quantize(&[0.0; 40], 1, 40);
        let mut mid = [7f32];
        rows_with(Isa::active(), &a, 0..1, &[3.0; 40], &mut mid);
        assert_eq!(mid, [0.0]);
    }
}
