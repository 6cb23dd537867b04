//! `ggml_vec_dot_q6_K_q8_K` (x86 AVX2). Q6_K is not repacked on x86 (repack.cpp offers
//! Q6_K layouts to NEON only) and llamafile's sgemm has no K-quants, so this vector dot
//! product is the Q6_K path for one token and for prompt batches alike, with the
//! activations from `quantize_row_q8_K` ([`super::q8_k::quantize_row_q8_k`]).

use super::{h2f, sum_lanes};
use crate::formats::kquant::QK_K;
use crate::formats::q6_k::BlockQ6K;
use crate::formats::q8_k::BlockQ8K;

/// The unsigned 6-bit code (0..64) of element `e`, as the AVX2 loop assembles it: in
/// half `j = e / 128`, the four 32-element quarters take the low nibbles of `ql[64j..]`,
/// the low nibbles of `ql[64j+32..]`, then the high nibbles of each, with bits 0-1, 2-3,
/// 4-5, 6-7 of `qh[32j..]` on top.
#[inline]
pub(super) fn code(b: &BlockQ6K, e: usize) -> i32 {
    let (j, quarter, l) = (e / 128, (e % 128) / 32, e % 32);
    let ql = b.ql[64 * j + 32 * (quarter % 2) + l];
    let lo = if quarter < 2 { ql & 0x0F } else { ql >> 4 };
    let hi = (b.qh[32 * j + l] >> (2 * quarter)) & 3;
    (lo | (hi << 4)) as i32
}

super::fma_clone! {
    /// `ggml_vec_dot_q6_K_q8_K`: per super-block, eight int32 lanes; lane `l` sums
    /// `code·q8·sc[e/16]` over the elements `e` with `e % 32` in `4l..4l+4` (`maddubs` of
    /// unsigned codes, `madd` with the sign-extended scales; no saturation: 2·63·127 < 2^15)
    /// and subtracts `32·(bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1])` (`q8sclsub`: the -32
    /// offset applied through the bsums, lane by lane, so a lane's value is not the sum over
    /// its own elements). Then `fmadd(d, cvt(sumi), acc)` with `d = d8 * d6` and [`hsum8`].
    pub fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 => vec_dot_q6_k_q8_k_body
}

#[inline(always)]
fn vec_dot_q6_k_q8_k_body(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    sum_lanes(x, y, "vec_dot_q6_k_q8_k", |bx, by, acc| {
        // `y[i].d * GGML_CPU_FP16_TO_FP32(x[i].d)`.
        let d = by.d * h2f(bx.d);
        let mut sumi = [0i32; 8];
        for e in 0..QK_K {
            sumi[(e % 32) / 4] += code(bx, e) * by.qs[e] as i32 * bx.scales[e / 16] as i32;
        }
        for (l, s) in sumi.iter_mut().enumerate() {
            let m = by.bsums[2 * l] as i32 * bx.scales[2 * l] as i32
                + by.bsums[2 * l + 1] as i32 * bx.scales[2 * l + 1] as i32;
            *s -= m << 5;
        }
        for (a, &s) in acc.iter_mut().zip(&sumi) {
            *a = d.mul_add(s as f32, *a);
        }
    })
}
