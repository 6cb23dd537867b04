//! Q5_1: 32 weights in 24 bytes (6 bits per weight), asymmetric.
//!
//! Layout (`block_q5_1` in ggml-common.h): `d: f16`, `m: f16`, `qh: [u8; 4]`,
//! `qs: [u8; 16]`; the 5-bit codes are packed as in Q5_0 and decode to `q * d + m`.
//! Dot products pair it with [`BlockQ8_1`].

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q4_1::min_max;
use super::q5_0::{codes, pack_codes};
use super::q8_1::BlockQ8_1;
use super::sum_block_dots;
use super::{decode_blocks, dot_codes};

/// Elements per block.
pub const QK5_1: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK5_1 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`), as
/// `dequantize_row_q5_1`.
pub fn dequantize_row(blocks: &[BlockQ5_1], out: &mut [f32]) {
    decode_blocks(blocks, out, QK5_1, |b, y| {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (y, q) in y.iter_mut().zip(codes(b.qh, &b.qs)) {
            *y = q as f32 * d + m;
        }
    })
}

/// `quantize_row_q5_1_ref`: `m = min`, `d = (max - min) / 31`,
/// `q = trunc((x - m)/d + 0.5)`.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ5_1]) {
    assert_eq!(x.len(), out.len() * QK5_1);
    for (xb, b) in x.chunks_exact(QK5_1).zip(out.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        b.m = f16::from_f32(min);
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(xb) {
            *q = ((v - min) * id + 0.5) as u8;
        }
        (b.qh, b.qs) = pack_codes(&q);
    }
}

/// Scalar reference dot product of Q5_1 weights with Q8_1 activations
/// (`ggml_vec_dot_q5_1_q8_1_generic`): `d_w*d_a*Σ(q_w*q_a) + m*s` per block.
pub fn vec_dot(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let sumi = dot_codes(codes(x.qh, &x.qs).map(|q| q as i32), &y.qs);
        (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32()
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ5_1::zeroed();
        b.d = f16::from_f32(0.5);
        b.m = f16::from_f32(2.0);
        b.qs[0] = 0xF2;
        b.qh = (1u32 << 16).to_le_bytes(); // 5th bit of element 16
        let y = Q5_1.dequantize(&[b]);
        assert_eq!((y[0], y[16], y[1]), (3.0, 17.5, 2.0));
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ5_1, r: &mut Rng| (b.d, b.m) = (r.scale_f16(), r.scale_f16());
        assert_vec_dot_twin(Rng::new(10), 40, &Q5_1, fix, &Q8_1, vec_dot, Some(|b| b.m));
    }
}
