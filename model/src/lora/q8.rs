//! The fast path's int8 form of an adapted matrix's pair ([`PairQ8`]). A decode step
//! reads every adapter byte once, so the adapter's cost is its bytes: bf16 `A` and `B` of
//! a rank-16 adapter on all projections of the MNN-Pocket shape are 14.3 MB a token
//! beside the base's 183 MB, int8 ~7.8 MB.
//!
//! * `A` (`rank × n_in`) is a Q8_0 matrix in the base's packed panels, multiplied by the
//!   layer input's own quantized activation (the one the base product reads) through the
//!   same int8 gemv/gemm kernels; each row first divided by a power of two near its
//!   largest magnitude (exact), so the Q8_0 block scales stay normal fp16 whatever the
//!   adapter's magnitudes, and `A x`'s row multiplied back by it.
//! * `B` is `pocket_kernels::ops::lowrank_q8::Bt8`: int8 `Bᵀ` panels with an f32 scale per
//!   output column.

use std::ops::Range;

use pocket_kernels::formats::q8_0::{quantize_row, BlockQ8_0};
use pocket_kernels::matmul::{self, PackedMatrix, QuantizedActivation, QK};
use pocket_kernels::ops::lowrank_q8::{self, Bt8};
use pocket_kernels::{GgmlType, Isa};

/// `A` and `B` of a pair in int8 (see the module).
#[derive(Clone)]
pub struct PairQ8 {
    /// Row `r` of `A` divided by `a_scale[r]`, Q8_0, packed.
    pub a: PackedMatrix,
    /// A power of two per row of `A`.
    pub a_scale: Vec<f32>,
    pub bt: Bt8,
}

impl std::fmt::Debug for PairQ8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairQ8")
            .field("rank", &self.bt.rank)
            .field("n_in", &self.a.cols)
            .field("n_out", &self.bt.n_out)
            .finish()
    }
}

/// The power of two at or above `amax` (1 for 0 or a non-finite value).
fn pow2_above(amax: f32) -> f32 {
    if amax > 0.0 && amax.is_finite() {
        2f32.powi((amax.log2().ceil() as i32).clamp(-120, 120))
    } else {
        1.0
    }
}

impl PairQ8 {
    /// `A` (`rank × n_in`) and `B` (`n_out × rank`), row-major f32; `None` when `n_in` is
    /// not a multiple of 32 (no Q8_0 rows: the pair keeps its bf16 form).
    pub fn new(a: &[f32], b: &[f32], rank: usize, n_in: usize, n_out: usize) -> Option<PairQ8> {
        if rank == 0 || n_in == 0 || !n_in.is_multiple_of(QK) || a.len() != rank * n_in {
            return None;
        }
        let mut blocks: Vec<BlockQ8_0> = vec![bytemuck::Zeroable::zeroed(); rank * n_in / QK];
        let mut a_scale = Vec::with_capacity(rank);
        let mut row = vec![0f32; n_in];
        for (r, (src, dst)) in a
            .chunks_exact(n_in)
            .zip(blocks.chunks_exact_mut(n_in / QK))
            .enumerate()
        {
            let s = pow2_above(src.iter().fold(0f32, |m, v| m.max(v.abs())));
            row.iter_mut().zip(src).for_each(|(y, v)| *y = v / s);
            quantize_row(&row, dst);
            debug_assert_eq!(a_scale.len(), r);
            a_scale.push(s);
        }
        let bytes: &[u8] = bytemuck::cast_slice(&blocks);
        let a = PackedMatrix::pack(GgmlType::Q8_0, bytes, rank, n_in).ok()?;
        Some(PairQ8 {
            a,
            a_scale,
            bt: Bt8::quantize(b, n_out, rank),
        })
    }

    /// The panels of `A` (8 rows each): the units a decode step splits `A x` in.
    pub fn a_panels(&self) -> usize {
        self.a.panels()
    }

    /// `mid = (A x)[rows of panels]` for activation row `t` (`mid.len()`: the panels'
    /// rows, from row `8·panels.start`).
    pub fn a_product(
        &self,
        isa: Isa,
        act: &QuantizedActivation,
        t: usize,
        panels: Range<usize>,
        mid: &mut [f32],
    ) {
        let r0 = panels.start * matmul::PANEL;
        let n = self.a.rows_in(panels.clone());
        matmul::gemm_tokens(&self.a, act, t..t + 1, &mut mid[..n], n, panels, isa);
        mid[..n]
            .iter_mut()
            .zip(&self.a_scale[r0..])
            .for_each(|(m, s)| *m *= s);
    }

    /// `out[j] += scale · (B mid)[c0 + j]`.
    pub fn add_b_product(&self, isa: Isa, mid: &[f32], scale: f32, c0: usize, out: &mut [f32]) {
        lowrank_q8::add_product_with(isa, &self.bt, c0, mid, scale, out);
    }

    /// Bytes a pass over `A` and `B` reads.
    pub fn bytes(&self) -> usize {
        self.a.bytes() + self.bt.bytes() + 4 * self.a_scale.len()
    }
}
