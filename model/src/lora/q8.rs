//! The fast path's int8 form of an adapted matrix's pair ([`PairQ8`]). A decode step
//! reads every adapter byte once, so the adapter's cost is its bytes: bf16 `A` and `B` of
//! a rank-16 adapter on all projections of the MNN-Pocket shape are 14.3 MB a token
//! beside the base's 183 MB, this form ~8.4 MB.
//!
//! Only the adapter's own elements are rounded, finely, and nothing else:
//! * `A` is `pocket_kernels::ops::lowrank_a8::A8`: int8 codes with an f32 scale per 32
//!   inputs of a row, multiplied by the layer's f32 input (not its quantized copy); the
//!   rank-long `A x` stays f32;
//! * `B` is `pocket_kernels::ops::lowrank_q8::Bt8`: int8 `Bᵀ` panels with an f32 scale per
//!   output column (that column's `rank` elements), multiplied by the f32 `A x`.
//!
//! An earlier form multiplied a Q8_0 `A` by the input's int8 activation (three roundings
//! stacked) and missed the llama.cpp parity bar (0.56 % and 1.5 % on SmolLM2).

use std::ops::Range;

use pocket_kernels::ops::lowrank_a8::{self, A8};
use pocket_kernels::ops::lowrank_q8::{self, Bt8};
use pocket_kernels::Isa;

/// `A` and `B` of a pair in int8 (see the module).
#[derive(Clone)]
pub struct PairQ8 {
    pub a: A8,
    pub bt: Bt8,
}

impl std::fmt::Debug for PairQ8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairQ8")
            .field("rank", &self.bt.rank)
            .field("n_in", &self.a.n_in)
            .field("n_out", &self.bt.n_out)
            .finish()
    }
}

impl PairQ8 {
    /// `A` (`rank × n_in`) and `B` (`n_out × rank`), row-major f32.
    pub fn new(a: &[f32], b: &[f32], rank: usize, n_in: usize, n_out: usize) -> PairQ8 {
        PairQ8 {
            a: A8::quantize(a, rank, n_in),
            bt: Bt8::quantize(b, n_out, rank),
        }
    }

    /// `mid = (A x)[rows]` for one input row `x`.
    pub fn a_product(&self, isa: Isa, x: &[f32], rows: Range<usize>, mid: &mut [f32]) {
        lowrank_a8::rows_with(isa, &self.a, rows, x, mid);
    }

    /// `out[j] += scale · (B mid)[c0 + j]`.
    pub fn add_b_product(&self, isa: Isa, mid: &[f32], scale: f32, c0: usize, out: &mut [f32]) {
        lowrank_q8::add_product_with(isa, &self.bt, c0, mid, scale, out);
    }

    /// Bytes a pass over `A` and `B` reads.
    pub fn bytes(&self) -> usize {
        self.a.bytes() + self.bt.bytes()
    }
}
