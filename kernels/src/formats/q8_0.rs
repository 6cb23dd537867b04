//! Q8_0: 32 values in 34 bytes (8.5 bits per value), symmetric. Both a weight format
//! and the activation format paired with Q4_0, Q5_0, Q8_0 and IQ4_NL weights.
//!
//! Layout (`block_q8_0` in ggml-common.h): `d: f16` then `qs: [i8; 32]`, value `q * d`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::sum_block_dots;
use super::{decode_blocks, dot_codes};

/// Elements per block.
pub const QK8_0: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK8_0],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`), as
/// `dequantize_row_q8_0`.
pub fn dequantize_row(blocks: &[BlockQ8_0], out: &mut [f32]) {
    decode_blocks(blocks, out, QK8_0, |b, y| {
        decode_codes(b.d, &b.qs, y);
    })
}

/// `y = q * d` for one block of 8-bit codes (Q8_0 and Q8_1 alike).
pub(crate) fn decode_codes(d: f16, qs: &[i8; QK8_0], y: &mut [f32]) {
    let d = d.to_f32();
    for (y, &q) in y.iter_mut().zip(qs) {
        *y = q as f32 * d;
    }
}

/// `quantize_row_q8_0_ref`: `d = amax / 127`, `q = round(x / d)` (half away from zero).
/// Used for weights and, on the fly, for activations.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), out.len() * QK8_0);
    for (xb, b) in x.chunks_exact(QK8_0).zip(out.iter_mut()) {
        let (d, qs) = quantize_block(xb);
        b.d = f16::from_f32(d);
        b.qs = qs;
    }
}

/// One block of `quantize_row_q8_0_ref` (and of Q8_1's): the scale `d = amax / 127` in
/// f32, before its rounding to fp16, and the codes `round(x / d)`.
pub(crate) fn quantize_block(xb: &[f32]) -> (f32, [i8; QK8_0]) {
    let amax = xb.iter().fold(0.0f32, |m, v| c_max(m, v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK8_0];
    for (q, &v) in qs.iter_mut().zip(xb) {
        *q = (v * id).round() as i8;
    }
    (d, qs)
}

/// ggml's `MAX(a, b)` macro, `a > b ? a : b`, which differs from `f32::max` on NaN.
fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Scalar reference dot product of Q8_0 weights with Q8_0 activations
/// (`ggml_vec_dot_q8_0_q8_0_generic`).
pub fn vec_dot(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let sumi = dot_codes(x.qs.map(|p| p as i32), &y.qs);
        sumi as f32 * (x.d.to_f32() * y.d.to_f32())
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn quantizes_a_known_block() {
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = -63.5; // a tie: rounds away from zero
        x[2] = 0.49;
        let q = Q8_0.quantize(&x);
        assert_eq!(q[0].d.to_f32(), 1.0);
        assert_eq!(&q[0].qs[..3], &[127, -64, 0]);
    }

    #[test]
    fn random_round_trip_error_is_at_most_half_a_step() {
        let x = Rng::new(3).vec(QK8_0 * 64, 5.0);
        // half a step, plus the fp16 rounding of d (2^-11 relative) times 127 steps
        Q8_0.assert_round_trip_within(&x, |xb| amax(xb) / 127.0 * (0.5 + 127.0 / 2048.0) * 1.001);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let mut rng = Rng::new(4);
        let n = QK8_0 * 40;
        let (w, a) = (
            Q8_0.quantize(&rng.vec(n, 2.0)),
            Q8_0.quantize(&rng.vec(n, 1.0)),
        );
        let (wf, af) = (Q8_0.dequantize(&w), Q8_0.dequantize(&a));
        assert_dot_matches_dequantized(vec_dot(&w, &a), &wf, &af, 1e-5);
    }
}
