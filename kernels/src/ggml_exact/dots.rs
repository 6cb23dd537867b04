//! Quantized dot products as ggml's x86 AVX2 `ggml_vec_dot_*` (and llamafile's
//! `tinyBLAS_Q0_AVX`, which sums the same way): per block, eight int32 lanes of four
//! products each (`maddubs` + `madd`), converted to f32 and fused-multiply-added into an
//! eight-lane accumulator with the block's scale product; [`hsum8`] at the end.

use super::{fma_lanes, h2f, sum_lanes, sum_lanes_q8_0};
use crate::formats::q4_1::BlockQ4_1;
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_1::BlockQ8_1;

/// `bytes_from_nibbles_32`: low nibbles are elements 0..16, high nibbles 16..32.
#[inline]
fn nibbles(qs: &[u8; 16]) -> [i32; 32] {
    let mut w = [0i32; 32];
    for k in 0..16 {
        w[k] = (qs[k] & 0x0F) as i32;
        w[k + 16] = (qs[k] >> 4) as i32;
    }
    w
}

super::fma_clone! {
    /// `ggml_vec_dot_q4_1_q8_1`.
    pub fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 => vec_dot_q4_1_q8_1_body
}

#[inline(always)]
fn vec_dot_q4_1_q8_1_body(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut summs = 0f32;
    let lanes = sum_lanes(x, y, "vec_dot_q4_1_q8_1", |bx, by, acc| {
        let (d0, d1) = (h2f(bx.d), h2f(by.d));
        // `summs += m * s`: GCC contracts it into one vfmadd231ss.
        summs = h2f(bx.m).mul_add(h2f(by.s), summs);
        let d0d1 = d0 * d1;
        // Lanes: no step saturates for these code ranges (|pair sum| <= 2·128·127 < 2^15).
        fma_lanes(acc, d0d1, &nibbles(&bx.qs), &by.qs);
    });
    lanes + summs
}

super::fma_clone! {
    /// `ggml_vec_dot_q8_0_q8_0` (and the Q8_0 x Q8_0 tiles of llamafile's sgemm).
    pub fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 => vec_dot_q8_0_q8_0_body
}

#[inline(always)]
fn vec_dot_q8_0_q8_0_body(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let codes = |b: &BlockQ8_0| std::array::from_fn(|k| b.qs[k] as i32);
    sum_lanes_q8_0(x, y, "vec_dot_q8_0_q8_0", |b| b.d, codes)
}
