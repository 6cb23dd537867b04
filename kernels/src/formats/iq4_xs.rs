//! IQ4_XS: 256 weights in 136 bytes (4.25 bits per weight): IQ4_NL's non-linear levels
//! with 8 sub-blocks of 32 sharing one fp16 scale through 6-bit sub-block scales.
//!
//! Layout (`block_iq4_xs` in ggml-common.h): `d: f16`, `scales_h: u16` (2 high bits per
//! sub-block), `scales_l: [u8; 4]` (4 low bits per sub-block, two per byte, low nibble
//! first), `qs: [u8; 128]` (16 bytes per sub-block, nibbles as in IQ4_NL). Sub-block `s`
//! has scale `ls - 32`; element decodes to `d * (ls - 32) * KVALUES_IQ4NL[q]`.
//! Pairs with [`BlockQ8K`]. (pocket reads IQ4_XS only.)

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::decode_blocks;
use super::iq4_nl::KVALUES_IQ4NL;
use super::kquant::QK_K;
use super::q8_k::BlockQ8K;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIq4Xs {
    pub d: f16,
    pub scales_h: u16,
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);

/// The scale of sub-block `s` (0..8), offset to -32..=31.
pub fn sub_scale(b: &BlockIq4Xs, s: usize) -> i32 {
    let low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF;
    let high = ((b.scales_h >> (2 * s)) & 3) as u8;
    (low | (high << 4)) as i32 - 32
}

/// The 256 table levels in element order.
fn levels(b: &BlockIq4Xs) -> [i8; QK_K] {
    std::array::from_fn(|e| {
        let (s, j) = (e / 32, e % 32);
        let byte = b.qs[16 * s + j % 16];
        KVALUES_IQ4NL[if j < 16 { byte & 0xF } else { byte >> 4 } as usize]
    })
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_iq4_xs`.
pub fn dequantize_row(blocks: &[BlockIq4Xs], out: &mut [f32]) {
    decode_blocks(blocks, out, QK_K, |b, y| {
        let d = b.d.to_f32();
        let v = levels(b);
        for s in 0..8 {
            let dl = d * sub_scale(b, s) as f32;
            for e in 32 * s..32 * s + 32 {
                y[e] = dl * v[e] as f32;
            }
        }
    })
}

/// Scalar reference dot product of IQ4_XS weights with Q8_K activations
/// (`ggml_vec_dot_iq4_xs_q8_K_generic`): per sub-block an exact integer sum, scaled by
/// `d*d8*(ls - 32)`.
pub fn vec_dot(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len());
    let mut sumf = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let d4d8 = x.d.to_f32() * y.d;
        let v = levels(x);
        for s in 0..8 {
            let sumi: i32 = (32 * s..32 * s + 32)
                .map(|e| v[e] as i32 * y.qs[e] as i32)
                .sum();
            sumf += d4d8 * sub_scale(x, s) as f32 * sumi as f32;
        }
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockIq4Xs::zeroed();
        b.d = f16::from_f32(0.5);
        b.scales_l = [0x00, 0x00, 0x00, 0x50]; // sub-block 7: low bits 5
        b.scales_h = 0b10 << 14; // sub-block 7: high bits 2 -> ls = 37, scale 5
        b.qs[16 * 7 + 3] = 0x9F; // element 227: level 113; element 243: level 13
        let y = IQ4_XS.dequantize(&[b]);
        assert_eq!(y[227], 0.5 * 5.0 * 113.0);
        assert_eq!(y[243], 0.5 * 5.0 * 13.0);
        assert_eq!(y[0], 0.5 * -32.0 * -127.0);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockIq4Xs, r: &mut Rng| b.d = r.scale_f16();
        assert_vec_dot_twin(Rng::new(20), 8, &IQ4_XS, fix, &Q8_K, vec_dot, None);
    }
}
