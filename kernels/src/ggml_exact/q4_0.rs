//! Q4_0 x Q8_0 as llama.cpp's x86 AVX2 build computes it, on both of its paths.
//!
//! **Repacked (`ne[1] % 8 == 0`, every Q4_0 matmul weight of the usual models).** With AVX2
//! `ggml_repack_get_optimal_repack_type` picks `q4_0_8x8_q8_0`: at load, `make_block_q4_0x8`
//! interleaves eight rows' blocks in 8-byte chunks and XORs every byte with `0x88`, so a
//! nibble `q` becomes `q ^ 8`, which read as a signed 4-bit value is `q - 8` (the `-8`
//! offset is folded into the codes; no separate subtraction or bias term). The kernels
//! (arch/x86/repack.cpp `gemv_q4_b32_8x8_q8_0_lut_avx` / `gemm_q4_b32_8x8_q8_0_lut_avx`)
//! sign-extend them with a `pshufb` table (`0..7, -8..-1`) and form, per (row, token) and
//! per block, the exact int32 sum of all 32 products `(q - 8) · a` (`sign_epi8` +
//! `maddubs` + `madd`; |pair| <= 2·8·127, no saturation, and Q8_0 codes never reach -128),
//! then one `acc = fmadd(cvt(isum), d_w * d_a, acc)` per block in that output's own f32
//! lane, stored as is (no horizontal sum). gemv and gemm differ only in which outputs share
//! registers, not in any output's arithmetic. `forward_mul_mat` quantizes each group of four
//! tokens with `ggml_quantize_mat_q8_0_4x8` and the `n % 4` leftovers with
//! `quantize_row_q8_0`; the two AVX2 quantizers are the same arithmetic (max |x| via
//! `max_ps`, `d = max / 127` stored fp16, codes `round_even(x * (127 / max))`, `packs`),
//! the 4x8 one only interleaves its output rows, so [`quantize_row_q8_0_4x8`] is
//! [`quantize_row_q8_0`]. Hence every token of a repacked Q4_0 matmul gets the same
//! arithmetic, whatever its group.
//!
//! **Not repacked (`ne[1] % 8 != 0`).** `ggml_vec_dot_q4_0_q8_0` (one token) and llamafile's
//! `tinyBLAS_Q0_AVX<block_q4_0, block_q8_0>` (sgemm.cpp, batches): both build the codes
//! `nibble - 8` (`sub_epi8(bytes_from_nibbles_32 / denibble, 8)`), eight int32 lanes of four
//! products, `acc = fmadd(d_w * d_a, lanes, acc)` per block and [`hsum8`] at the end
//! (sgemm's `hsum`: high + low half, `movehl`, `movehdup`; the same adds). That is
//! [`vec_dot_q4_0_q8_0`], a different rounding from the repacked kernels (eight partial
//! accumulators and a horizontal sum instead of one accumulator of whole-block sums).

use super::{groups_of_four, h2f, mul_mat_by_route, sum_lanes_q8_0, Route};
use crate::formats::q4_0::{BlockQ4_0, QK4_0};
use crate::formats::q8_0::BlockQ8_0;

pub use super::quantize::quantize_row_q8_0;

/// `ggml_quantize_mat_q8_0_4x8` (AVX2) for one of its four rows, de-interleaved: the same
/// maximum, scale, reciprocal, rounding and saturating packs as `quantize_row_q8_0`, so the
/// same blocks (the oracle test checks this bit for bit).
pub fn quantize_row_q8_0_4x8(x: &[f32], out: &mut [BlockQ8_0]) {
    quantize_row_q8_0(x, out);
}

/// The 32 codes of a Q4_0 block as signed values `nibble - 8`: element `j` is the low nibble
/// of `qs[j]` (`j < 16`) or the high nibble of `qs[j - 16]`. (The repacked layout stores
/// `nibble ^ 8` and sign-extends it: the same value.)
#[inline]
fn codes(b: &BlockQ4_0) -> [i32; 32] {
    std::array::from_fn(|j| {
        let nib = if j < 16 {
            b.qs[j] & 0x0F
        } else {
            b.qs[j - 16] >> 4
        };
        nib as i32 - 8
    })
}

/// One output of the repacked kernels: one f32 accumulator, one `fmadd` of the exact
/// whole-block integer sum per block.
#[inline(always)]
fn dot_q4_0_8x8(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    assert_eq!(w.len(), a.len(), "q4_0 x q8_0: block counts");
    let mut acc = 0f32;
    for (bw, ba) in w.iter().zip(a) {
        let q = codes(bw);
        let isum: i32 = q.iter().zip(&ba.qs).map(|(&c, &y)| c * y as i32).sum();
        // `_mm256_mul_ps(col_scale_f32, row_scale_f32)`: fp16 weight scale times the fp16
        // activation scale, both widened to f32.
        let d = h2f(bw.d) * h2f(ba.d);
        acc = (isum as f32).mul_add(d, acc);
    }
    acc
}

super::fma_clone! {
    /// One output of `ggml_gemv_q4_0_8x8_q8_0` (weight row `w`, one token's Q8_0 blocks `a`).
    pub fn gemv_q4_0_8x8_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 => gemv_q4_0_8x8_q8_0_body
}

#[inline(always)]
fn gemv_q4_0_8x8_q8_0_body(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    dot_q4_0_8x8(w, a)
}

super::fma_clone! {
    /// One output of `ggml_gemm_q4_0_8x8_q8_0` (its 16-token and 4-token loops alike): the
    /// same arithmetic as the gemv.
    pub fn gemm_q4_0_8x8_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 => gemm_q4_0_8x8_q8_0_body
}

#[inline(always)]
fn gemm_q4_0_8x8_q8_0_body(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    dot_q4_0_8x8(w, a)
}

super::fma_clone! {
    /// `ggml_vec_dot_q4_0_q8_0` (and the Q4_0 tiles of llamafile's `tinyBLAS_Q0_AVX`): per
    /// block, lane `l` is the exact sum of the products of elements `4l..4l+4`,
    /// fused-multiply-added with `d_x * d_y`; [`hsum8`] at the end.
    pub fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 => vec_dot_q4_0_q8_0_body
}

#[inline(always)]
fn vec_dot_q4_0_q8_0_body(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    sum_lanes_q8_0(x, y, "vec_dot_q4_0_q8_0", |b| b.d, codes)
}

/// The whole repacked `mul_mat` for `w` (`n_rows` rows of `k / 32` blocks, `n_rows % 8 ==
/// 0` for llama.cpp to repack it) times `x` (`n_tokens` rows of `k` floats), as
/// `forward_mul_mat` splits it: tokens in groups of four through
/// `ggml_quantize_mat_q8_0_4x8` + gemm, the rest through `quantize_row_q8_0` + gemv.
/// Returns `out[token * n_rows + row]`.
pub fn mul_mat_q4_0_repacked(w: &[BlockQ4_0], n_rows: usize, x: &[f32], k: usize) -> Vec<f32> {
    let grouped = Route::new(quantize_row_q8_0_4x8, gemm_q4_0_8x8_q8_0);
    let single = Route::new(quantize_row_q8_0, gemv_q4_0_8x8_q8_0);
    mul_mat_by_route(w, n_rows, x, (k, QK4_0), groups_of_four(grouped, single))
}

/// The non-repacked `mul_mat` (`n_rows % 8 != 0`): every token through `quantize_row_q8_0`
/// and every output through [`vec_dot_q4_0_q8_0`] (one token: `ggml_vec_dot`; more:
/// llamafile's sgemm tiles, the same per-output sum). Returns `out[token * n_rows + row]`.
pub fn mul_mat_q4_0_plain(w: &[BlockQ4_0], n_rows: usize, x: &[f32], k: usize) -> Vec<f32> {
    let route = |_, _| Route::new(quantize_row_q8_0, vec_dot_q4_0_q8_0);
    mul_mat_by_route(w, n_rows, x, (k, QK4_0), route)
}
