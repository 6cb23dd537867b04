//! IQ4_NL: 32 weights in 18 bytes (4.5 bits per weight), non-linear: each nibble
//! indexes a fixed table of 16 int8 levels spaced more densely near zero.
//!
//! Layout (`block_iq4_nl` in ggml-common.h): `d: f16` then `qs: [u8; 16]`, nibbles placed
//! as in Q4_0 (low nibbles elements 0-15, high 16-31). A nibble `q` decodes to
//! `d * KVALUES_IQ4NL[q]`. Pairs with [`BlockQ8_0`]. (pocket reads IQ4_NL only.)

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_0::BlockQ8_0;
use super::sum_block_dots;
use super::{decode_blocks, decode_nibbles, dot_nibbles};

/// Elements per block.
pub const QK4_NL: usize = 32;

/// The 16 levels (`kvalues_iq4nl` in ggml-common.h), shared with IQ4_XS.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq4Nl {
    pub d: f16,
    pub qs: [u8; QK4_NL / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`), as
/// `dequantize_row_iq4_nl`.
pub fn dequantize_row(blocks: &[BlockIq4Nl], out: &mut [f32]) {
    decode_blocks(blocks, out, QK4_NL, |b, y| {
        let d = b.d.to_f32();
        decode_nibbles(&b.qs, y, |q| d * KVALUES_IQ4NL[q as usize] as f32);
    })
}

/// Scalar reference dot product of IQ4_NL weights with Q8_0 activations
/// (`ggml_vec_dot_iq4_nl_q8_0_generic`).
pub fn vec_dot(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let d = y.d.to_f32() * x.d.to_f32();
        let sumi = dot_nibbles(&x.qs, &y.qs, |q| KVALUES_IQ4NL[q as usize] as i32);
        d * sumi as f32
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockIq4Nl::zeroed();
        b.d = f16::from_f32(0.5);
        b.qs[4] = 0xF8;
        let y = IQ4_NL.dequantize(&[b]);
        assert_eq!((y[4], y[20], y[0]), (0.5, 56.5, -63.5));
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockIq4Nl, r: &mut Rng| b.d = r.scale_f16();
        assert_vec_dot_twin(Rng::new(19), 40, &IQ4_NL, fix, &Q8_0, vec_dot, None);
    }
}
