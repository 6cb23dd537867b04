//! Q4_0: 32 weights in 18 bytes (4.5 bits per weight), symmetric.
//!
//! Layout (`block_q4_0` in ggml-common.h): `d: f16` then `qs: [u8; 16]`. Byte `j` holds
//! element `j` in its low nibble and element `j + 16` in its high nibble; a nibble `q`
//! decodes to `(q - 8) * d`. Dot products pair it with [`BlockQ8_0`] activations.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_0::BlockQ8_0;
use super::sum_block_dots;
use super::{decode_blocks, decode_nibbles, dot_nibbles};

/// Elements per block.
pub const QK4_0: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK4_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`), as
/// `dequantize_row_q4_0`.
pub fn dequantize_row(blocks: &[BlockQ4_0], out: &mut [f32]) {
    decode_blocks(blocks, out, QK4_0, |b, y| {
        let d = b.d.to_f32();
        decode_nibbles(&b.qs, y, |q| (q as i32 - 8) as f32 * d);
    })
}

/// `quantize_row_q4_0_ref`: `d = max / -8` where `max` is the element of largest
/// magnitude (so it maps to nibble 0 exactly), then `q = min(15, trunc(x/d + 8.5))`.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ4_0]) {
    assert_eq!(x.len(), out.len() * QK4_0);
    for (xb, b) in x.chunks_exact(QK4_0).zip(out.iter_mut()) {
        let d = max_by_magnitude(xb) / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        // ggml converts through int8_t: truncation toward zero, then MIN(15, ·).
        let code = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        for j in 0..QK4_0 / 2 {
            b.qs[j] = code(xb[j]) | code(xb[j + QK4_0 / 2]) << 4;
        }
    }
}

/// The element of largest magnitude (the first of equals; 0 for an empty or all-zero
/// block), with ggml's comparison (`amax < |v|`) so NaN inputs are skipped the same way.
/// Shared with Q5_0, Q8_K and the K-quants' `make_qx_quants`.
pub(crate) fn max_by_magnitude(xb: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in xb {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Scalar reference dot product of Q4_0 weights with Q8_0 activations
/// (`ggml_vec_dot_q4_0_q8_0_generic`): an exact int32 sum per block, scaled by both `d`s.
pub fn vec_dot(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let sumi = dot_nibbles(&x.qs, &y.qs, |q| q as i32 - 8);
        sumi as f32 * x.d.to_f32() * y.d.to_f32()
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ4_0::zeroed();
        b.d = f16::from_f32(0.5);
        b.qs[0] = 0xF0; // element 0 -> nibble 0, element 16 -> nibble 15
        b.qs[15] = 0x19;
        let y = Q4_0.dequantize(&[b]);
        assert_eq!(
            (y[0], y[16], y[15], y[31], y[1]),
            (-4.0, 3.5, 0.5, -3.5, -4.0)
        );
    }

    #[test]
    fn random_round_trip_error_is_at_most_one_step() {
        let x = Rng::new(1).vec(QK4_0 * 64, 3.0);
        Q4_0.assert_round_trip_within(&x, |xb| amax(xb) / 8.0 * 1.001);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        assert_vec_dot_twin(
            Rng::new(2),
            40,
            &Q4_0,
            |b, r| b.d = r.scale_f16(),
            &Q8_0,
            vec_dot,
            None,
        );
    }
}
