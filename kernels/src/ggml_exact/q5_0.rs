//! `ggml_vec_dot_q5_0_q8_0` (x86 AVX2), which is also what a prompt batch gets: llamafile's
//! `tinyBLAS_Q0_AVX<block_q5_0, block_q8_0>` (sgemm.cpp, taken for `n >= 2` tokens once
//! the activations are quantized to Q8_0) builds the same signed codes (`denibble |
//! bittobyte`), the same eight int32 lanes (`updot`: `maddubs` then `madd` with ones), the
//! same per-block `fmadd(dA*dB, lanes, acc)` and the same final `hsum` (high half + low
//! half, `movehl`, `movehdup`), for every tile shape (`gemm4xN`, `gemmMx4`, `gemm<RM,RN>`:
//! the tiles only change which outputs share loads, never one output's sum order). So
//! this one function is the twin of both the decode and the prompt path.

use super::sum_lanes_q8_0;
use crate::formats::q5_0::BlockQ5_0;
use crate::formats::q8_0::BlockQ8_0;

/// The 32 signed codes of a Q5_0 block as `bytes_from_nibbles_32 | andnot(bytes_from_bits_32
/// (qh), 0xF0)`: element `j` is low nibble of `qs[j]` (`j < 16`) or high nibble of
/// `qs[j-16]`, and `0xF0` is or-ed in (i.e. `-16`) when bit `j` of `qh` is clear.
#[inline]
fn codes(b: &BlockQ5_0) -> [i32; 32] {
    let qh = u32::from_le_bytes(b.qh);
    std::array::from_fn(|j| {
        let nib = if j < 16 {
            b.qs[j] & 0x0F
        } else {
            b.qs[j - 16] >> 4
        };
        let hi = if (qh >> j) & 1 == 1 { 0 } else { 0xF0u8 };
        (nib | hi) as i8 as i32
    })
}

super::fma_clone! {
    /// `ggml_vec_dot_q5_0_q8_0`: per block, lane `l` of `mul_sum_i8_pairs_float` is the exact
    /// integer sum of the products of elements `4l..4l+4` (`sign_epi8` + `maddubs` + `madd`;
    /// |pair| <= 2·16·127, no saturation), fused-multiply-added with `d_x * d_y`
    /// (`_mm256_fmadd_ps(d, q, acc)`), then [`hsum8`].
    pub fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 => vec_dot_q5_0_q8_0_body
}

#[inline(always)]
fn vec_dot_q5_0_q8_0_body(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    sum_lanes_q8_0(x, y, "vec_dot_q5_0_q8_0", |b| b.d, codes)
}
