//! Q2_K: 256 weights in 84 bytes (2.625 bits per weight): 16 sub-blocks of 16, each with
//! a 4-bit scale and a 4-bit min.
//!
//! Layout (`block_q2_K` in ggml-common.h): `scales: [u8; 16]` (low nibble scale, high
//! nibble min, one byte per sub-block), `qs: [u8; 64]`, `d: f16`, `dmin: f16`. Each half
//! of 128 elements uses 32 bytes of `qs`: element `32j + l` (j = 0..4, l = 0..32) is bits
//! `2j..2j+2` of `qs[l]`. It decodes to `d*(sc&15) * q - dmin*(sc>>4)` with `sc` the byte
//! of its sub-block `e/16`. Pairs with [`BlockQ8K`]. (pocket reads Q2_K; it does not
//! write it.)

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::decode_blocks;
use super::kquant::QK_K;
use super::q8_k::BlockQ8K;
use super::sum_block_dots;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

/// The 256 unsigned 2-bit codes in element order.
fn codes(b: &BlockQ2K) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (e, q) in q.iter_mut().enumerate() {
        let (half, j, l) = (e / 128, (e % 128) / 32, e % 32);
        *q = (b.qs[32 * half + l] >> (2 * j)) & 3;
    }
    q
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_q2_K`.
pub fn dequantize_row(blocks: &[BlockQ2K], out: &mut [f32]) {
    decode_blocks(blocks, out, QK_K, |b, y| {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        let q = codes(b);
        for (g, &sc) in b.scales.iter().enumerate() {
            let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
            for e in 16 * g..16 * g + 16 {
                y[e] = dl * q[e] as f32 - ml;
            }
        }
    })
}

/// Scalar reference dot product of Q2_K weights with Q8_K activations
/// (`ggml_vec_dot_q2_K_q8_K_generic`): `d*d8 * Σ_g (sc&15) * Σ q*q8` minus
/// `dmin*d8 * Σ_g (sc>>4) * bsums[g]`.
pub fn vec_dot(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let q = codes(x);
        let (mut isum, mut msum) = (0i32, 0i32);
        for (g, &sc) in x.scales.iter().enumerate() {
            let dot: i32 = (16 * g..16 * g + 16)
                .map(|e| q[e] as i32 * y.qs[e] as i32)
                .sum();
            isum += (sc & 0xF) as i32 * dot;
            msum += (sc >> 4) as i32 * y.bsums[g] as i32;
        }
        let dall = y.d * x.d.to_f32();
        let dmin = y.d * x.dmin.to_f32();
        dall * isum as f32 - dmin * msum as f32
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ2K::zeroed();
        b.d = f16::from_f32(0.5);
        b.dmin = f16::from_f32(0.25);
        b.scales[11] = 0x37; // sub-block 11 = elements 176..192: scale 7, min 3
        b.qs[32 + 16] = 0b11 << 2; // second half, j = 1, l = 16: element 176, code 3
        b.qs[32 + 17] = 0b10 << 4; // second half, j = 2, l = 17: element 209, code 2
        let y = Q2_K.dequantize(&[b]);
        assert_eq!(y[176], 0.5 * 7.0 * 3.0 - 0.25 * 3.0);
        assert_eq!(y[177], -0.25 * 3.0);
        assert_eq!(y[209], 0.0); // sub-block 13 has scale 0
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ2K, r: &mut Rng| (b.d, b.dmin) = (r.scale_f16(), r.scale_f16());
        assert_vec_dot_twin(Rng::new(17), 8, &Q2_K, fix, &Q8_K, vec_dot, None);
    }
}
