//! Q4_K: 256 weights in 144 bytes (4.5 bits per weight): 8 sub-blocks of 32, each with
//! its own 6-bit scale and min.
//!
//! Layout (`block_q4_K` in ggml-common.h): `d: f16` and `dmin: f16` (super-block scales
//! for the sub-block scales and mins), `scales: [u8; 12]` (eight 6-bit scales and eight
//! 6-bit mins, see [`scale_min_k4`]), `qs: [u8; 128]`. Each 32-byte group of `qs` holds
//! two sub-blocks: low nibbles sub-block `2i`, high nibbles `2i + 1`. Element `l` of
//! sub-block `s` decodes to `d*sc[s] * q - dmin*m[s]`. Pairs with [`BlockQ8K`].

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant::{dequantize_row_k4, k4_nibbles, quantize_k4, vec_dot_row_k4, K4Block, QK_K};
use super::q8_k::BlockQ8K;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

impl K4Block for BlockQ4K {
    fn scales(&self) -> (f16, f16, &[u8; 12]) {
        (self.d, self.dmin, &self.scales)
    }

    /// The 256 unsigned 4-bit codes in element order.
    fn codes(&self) -> [u8; QK_K] {
        k4_nibbles(&self.qs)
    }
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_q4_K`.
pub fn dequantize_row(blocks: &[BlockQ4K], out: &mut [f32]) {
    dequantize_row_k4(blocks, out)
}

/// `quantize_row_q4_K_ref`: per sub-block an asymmetric fit weighted by
/// `sqrt(mean x²) + |x|`, then the scales and mins quantized to 6 bits against their
/// maxima, then every element re-quantized with the rounded scales.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ4K]) {
    assert_eq!(x.len(), out.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (d, dmin, scales, l) = quantize_k4(xb, 15, -1.0, 20);
        (b.d, b.dmin, b.scales) = (d, dmin, scales);
        for (i, group) in b.qs.chunks_exact_mut(32).enumerate() {
            for (k, byte) in group.iter_mut().enumerate() {
                *byte = l[64 * i + k] | (l[64 * i + 32 + k] << 4);
            }
        }
    }
}

/// Scalar reference dot product of Q4_K weights with Q8_K activations: per super-block
/// an exact integer sum `Σ_s sc[s] * Σ q*q8` scaled by `d*d8`, minus the mins applied
/// through `bsums` (`Σ_k bsums[k] * m[k/2]`) scaled by `dmin*d8`.
pub fn vec_dot(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    vec_dot_row_k4(w, a)
}

#[cfg(test)]
mod tests {
    use super::super::kquant::pack_scale_min_k4;
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ4K::zeroed();
        b.d = f16::from_f32(0.5);
        b.dmin = f16::from_f32(0.25);
        let mut ls = [1u8; 8];
        let mut lm = [0u8; 8];
        ls[5] = 40; // sub-block 5: high nibbles of qs[64..96]
        lm[5] = 33;
        b.scales = pack_scale_min_k4(&ls, &lm);
        b.qs[64 + 3] = 0x70; // element 5*32 + 3 has code 7
        let y = Q4_K.dequantize(&[b]);
        assert_eq!(y[163], 0.5 * 40.0 * 7.0 - 0.25 * 33.0);
        assert_eq!(y[160], -0.25 * 33.0);
        assert_eq!(y[131], 0.0);
    }

    #[test]
    fn random_round_trip_error_is_small() {
        let x = Rng::new(11).vec(QK_K * 16, 1.0);
        // 16 levels over a range of 2: one step is 2/15; allow it (scales are rounded).
        let y = Q4_K.assert_round_trip_within(&x, |_| 2.0 / 15.0);
        assert!(array_rmse(&x, &y) < MAX_QUANTIZATION_TOTAL_ERROR);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ4K, r: &mut Rng| (b.d, b.dmin) = (r.scale_f16(), r.scale_f16());
        assert_vec_dot_twin(Rng::new(12), 8, &Q4_K, fix, &Q8_K, vec_dot, None);
    }
}
