//! Q4_1: 32 weights in 20 bytes (5 bits per weight), asymmetric.
//!
//! Layout (`block_q4_1` in ggml-common.h): `d: f16`, `m: f16`, then `qs: [u8; 16]`.
//! Byte `j` holds element `j` in its low nibble and element `j + 16` in its high
//! nibble; a nibble `q` decodes to `q * d + m`. Dot products pair it with [`BlockQ8_1`].

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_1::BlockQ8_1;
use super::sum_block_dots;
use super::{decode_blocks, decode_nibbles, dot_nibbles};

/// Elements per block.
pub const QK4_1: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK4_1 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`), as
/// `dequantize_row_q4_1`.
pub fn dequantize_row(blocks: &[BlockQ4_1], out: &mut [f32]) {
    decode_blocks(blocks, out, QK4_1, |b, y| {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        decode_nibbles(&b.qs, y, |q| q as f32 * d + m);
    })
}

/// `quantize_row_q4_1_ref`: `m = min`, `d = (max - min) / 15`,
/// `q = min(15, trunc((x - m)/d + 0.5))`.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ4_1]) {
    assert_eq!(x.len(), out.len() * QK4_1);
    for (xb, b) in x.chunks_exact(QK4_1).zip(out.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        b.m = f16::from_f32(min);
        let code = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
        for j in 0..QK4_1 / 2 {
            b.qs[j] = code(xb[j]) | code(xb[j + QK4_1 / 2]) << 4;
        }
    }
}

/// The block's min and max, with ggml's comparisons (`v < min`, `v > max`) so NaN
/// inputs are skipped the same way.
pub(crate) fn min_max(xb: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in xb {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// Scalar reference dot product of Q4_1 weights with Q8_1 activations
/// (`ggml_vec_dot_q4_1_q8_1_generic`): `d_w*d_a*Σ(q_w*q_a) + m*s` per block.
pub fn vec_dot(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let sumi = dot_nibbles(&x.qs, &y.qs, |q| q as i32);
        (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32()
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ4_1::zeroed();
        b.d = f16::from_f32(0.25);
        b.m = f16::from_f32(-1.0);
        b.qs[3] = 0x4F;
        let y = Q4_1.dequantize(&[b]);
        assert_eq!((y[3], y[19], y[0]), (2.75, 0.0, -1.0));
    }

    #[test]
    fn random_round_trip_error_is_at_most_one_step() {
        let x: Vec<f32> = Rng::new(6)
            .vec(QK4_1 * 64, 3.0)
            .iter()
            .map(|v| v + 1.0)
            .collect();
        Q4_1.assert_round_trip_within(&x, |xb| {
            let (min, max) = min_max(xb);
            (max - min) / 15.0 + min.abs() / 1024.0
        });
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ4_1, r: &mut Rng| (b.d, b.m) = (r.scale_f16(), r.scale_f16());
        assert_vec_dot_twin(Rng::new(7), 40, &Q4_1, fix, &Q8_1, vec_dot, Some(|b| b.m));
    }
}
