//! Activation quantization as ggml's AVX2 `quantize_row_q8_0` / `quantize_row_q8_1`:
//! `d = amax / 127` (stored fp16), codes `round_even(x * (127 / amax))` with the f32
//! reciprocal (not `x / d`: the two differ in the last bit, and a code at a .5 boundary
//! would flip), and for q8_1 `s = fp16(d * Σq)` with the unrounded f32 `d`.

use super::{f2h, round_even_i32};
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_1::BlockQ8_1;

fn block(x: &[f32], qs: &mut [i8; 32]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0;
    for (q, &v) in qs.iter_mut().zip(x) {
        // packs_epi32 / packs_epi16 saturate; |x * id| <= 127 (+ an ulp) never reaches it.
        let c = round_even_i32(v * id).clamp(-128, 127);
        sum += c;
        *q = c as i8;
    }
    (d, sum)
}

/// `quantize_row_q8_0` (x86 AVX2 path). `x.len() == 32 * out.len()`.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), out.len() * 32, "quantize_row_q8_0: length");
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, _) = block(xb, &mut b.qs);
        b.d = f2h(d);
    }
}

/// `quantize_row_q8_1` (x86 AVX2 path). `x.len() == 32 * out.len()`.
pub fn quantize_row_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    assert_eq!(x.len(), out.len() * 32, "quantize_row_q8_1: length");
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        let (d, sum) = block(xb, &mut b.qs);
        b.d = f2h(d);
        b.s = f2h(d * sum as f32);
    }
}
