//! Q3_K: 256 weights in 110 bytes (3.4375 bits per weight): 16 sub-blocks of 16, each
//! with a 6-bit signed scale; symmetric.
//!
//! Layout (`block_q3_K` in ggml-common.h): `hmask: [u8; 32]`, `qs: [u8; 64]`,
//! `scales: [u8; 12]`, `d: f16`. Element `e = 128h + 32j + l` (h = 0..2, j = 0..4,
//! l = 0..32) takes its low 2 bits from bits `2j..2j+2` of `qs[32h + l]` and its high bit
//! from bit `4h + j` of `hmask[l]`; the code is `low - 4` when that bit is clear, `low`
//! when set. Sub-block scale `g` is 4 low bits (byte `g` low nibble for g < 8, byte `g-8`
//! high nibble otherwise) plus 2 high bits (bits `2(g/4)..` of byte `8 + g%4`), minus 32.
//! Value `d * scale[e/16] * code`. Pairs with [`BlockQ8K`]. (pocket reads Q3_K only.)

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::decode_blocks;
use super::kquant::QK_K;
use super::q8_k::BlockQ8K;
use super::sum_block_dots;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

/// The 16 sub-block scales, already offset to -32..=31.
pub fn scales(b: &BlockQ3K) -> [i8; 16] {
    std::array::from_fn(|g| scale(b, g))
}

/// Sub-block `g`'s scale (`g < 16`), offset to -32..=31: 4 low bits from `scales[g % 8]`
/// (low nibble for `g < 8`), 2 high bits from `scales[8 + g % 4]`.
pub fn scale(b: &BlockQ3K, g: usize) -> i8 {
    let low = if g < 8 {
        b.scales[g] & 0xF
    } else {
        b.scales[g - 8] >> 4
    };
    let high = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    (low | (high << 4)) as i8 - 32
}

/// The 256 signed codes (-4..=3) in element order.
fn codes(b: &BlockQ3K) -> [i8; QK_K] {
    std::array::from_fn(|e| {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = ((b.qs[32 * h + l] >> (2 * j)) & 3) as i8;
        let high_set = b.hmask[l] & (1 << (4 * h + j)) != 0;
        if high_set {
            low
        } else {
            low - 4
        }
    })
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_q3_K`.
pub fn dequantize_row(blocks: &[BlockQ3K], out: &mut [f32]) {
    decode_blocks(blocks, out, QK_K, |b, y| {
        let d_all = b.d.to_f32();
        let (sc, q) = (scales(b), codes(b));
        for e in 0..QK_K {
            y[e] = d_all * sc[e / 16] as f32 * q[e] as f32;
        }
    })
}

/// Scalar reference dot product of Q3_K weights with Q8_K activations: an exact integer
/// sum `Σ_g scale[g] * Σ q*q8`, scaled by `d*d8`.
pub fn vec_dot(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let (sc, q) = (scales(x), codes(x));
        let mut isum = 0i32;
        for (g, &scale) in sc.iter().enumerate() {
            let dot: i32 = (16 * g..16 * g + 16)
                .map(|e| q[e] as i32 * y.qs[e] as i32)
                .sum();
            isum += scale as i32 * dot;
        }
        x.d.to_f32() * y.d * isum as f32
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn unpacks_every_scale_position() {
        let mut b = BlockQ3K::zeroed();
        // scale g = g + 1 (stored +32): low nibble and high 2 bits per the layout above
        for g in 0..16 {
            let v = (g as u8 + 1 + 32) & 63;
            if g < 8 {
                b.scales[g] |= v & 0xF;
            } else {
                b.scales[g - 8] |= (v & 0xF) << 4;
            }
            b.scales[8 + g % 4] |= (v >> 4) << (2 * (g / 4));
        }
        let want: [i8; 16] = std::array::from_fn(|g| g as i8 + 1);
        assert_eq!(scales(&b), want);
    }

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ3K::zeroed();
        b.d = f16::from_f32(0.5);
        // every low nibble 2 and every high pair 0b10: each scale is 34 - 32 = 2
        b.scales = [
            0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0xAA, 0xAA, 0xAA, 0xAA,
        ];
        b.qs[32 + 7] = 0b01 << 6; // h = 1, j = 3, l = 7: element 231, low bits 1
        b.hmask[7] = 1 << 7; // ... and its high bit set: code 1
        let y = Q3_K.dequantize(&[b]);
        assert_eq!(y[231], 0.5 * 2.0 * 1.0);
        assert_eq!(y[0], 0.5 * 2.0 * -4.0);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ3K, r: &mut Rng| b.d = r.scale_f16();
        assert_vec_dot_twin(Rng::new(18), 8, &Q3_K, fix, &Q8_K, vec_dot, None);
    }
}
