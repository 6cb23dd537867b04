//! One query row of ggml's CPU flash attention with an f16 KV cache
//! (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`, the path llama.cpp takes for
//! decode and for batches of fewer than 32 rows while the cache holds < 512 cells):
//! Q rounded to fp16, scores by [`vec_dot_f16`], an online softmax in f32 with libm `expf`,
//! and the V sum kept in an fp16 accumulator that is rounded after every key.

use half::f16;

use super::vec::{vec_dot_f16, vec_mad_f16, vec_scale_f16};
use super::{f2h, h2f};

/// Attends query `q` (`DK` values) over the visible keys `keys(i)` / values `values(i)`
/// for `i in 0..n`, in cache order; writes `DV` outputs. `scale` multiplies each score.
pub fn flash_attn_row<'a>(
    q: &[f32],
    n: usize,
    keys: impl Fn(usize) -> &'a [f16],
    values: impl Fn(usize) -> &'a [f16],
    scale: f32,
    out: &mut [f32],
) {
    let qh: Vec<f16> = q.iter().map(|&v| f2h(v)).collect();
    let mut acc = vec![f16::ZERO; out.len()];
    let (mut s_sum, mut m) = (0.0f32, f32::NEG_INFINITY);
    for i in 0..n {
        let s = vec_dot_f16(keys(i), &qh) * scale;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if s > m {
            let m_old = m;
            m = s;
            ms = (m_old - m).exp();
            vec_scale_f16(&mut acc, ms);
        } else {
            vs = (s - m).exp();
        }
        vec_mad_f16(&mut acc, values(i), vs);
        // `S = S*ms + vs`: contracted by GCC into one fused multiply-add.
        s_sum = s_sum.mul_add(ms, vs);
    }
    let inv = if s_sum == 0.0 { 0.0 } else { 1.0 / s_sum };
    for (o, &a) in out.iter_mut().zip(&acc) {
        *o = h2f(a) * inv;
    }
}
