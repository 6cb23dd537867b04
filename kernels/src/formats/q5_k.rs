//! Q5_K: 256 weights in 176 bytes (5.5 bits per weight): Q4_K plus a fifth bit.
//!
//! Layout (`block_q5_K` in ggml-common.h): `d: f16`, `dmin: f16`, `scales: [u8; 12]`
//! (as Q4_K, see [`scale_min_k4`]), `qh: [u8; 32]`, `qs: [u8; 128]`. The low 4 bits are
//! placed as in Q4_K; the 5th bit of element `l` of sub-block `s` is bit `s` of
//! `qh[l]`. Element decodes to `d*sc[s] * q - dmin*m[s]`. Pairs with [`BlockQ8K`].

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant::{dequantize_row_k4, k4_nibbles, quantize_k4, vec_dot_row_k4, K4Block, QK_K};
use super::q8_k::BlockQ8K;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

impl K4Block for BlockQ5K {
    fn scales(&self) -> (f16, f16, &[u8; 12]) {
        (self.d, self.dmin, &self.scales)
    }

    /// The 256 unsigned 5-bit codes in element order.
    /// The nibbles of [`k4_nibbles`], each with its 5th bit from `qh` (bit `2i` of
    /// `qh[l]` for element `64i + l`, bit `2i + 1` for element `64i + 32 + l`).
    fn codes(&self) -> [u8; QK_K] {
        let mut q = k4_nibbles(&self.qs);
        for i in 0..QK_K / 64 {
            for (l, &qh) in self.qh.iter().enumerate() {
                let h = qh >> (2 * i);
                q[64 * i + l] |= (h & 1) << 4;
                q[64 * i + 32 + l] |= (h & 2) << 3;
            }
        }
        q
    }
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_q5_K`.
pub fn dequantize_row(blocks: &[BlockQ5K], out: &mut [f32]) {
    dequantize_row_k4(blocks, out)
}

/// `quantize_row_q5_K_ref`: as Q4_K with 32 levels and a narrower scale search
/// (`make_qkx2_quants(31, .., -0.5, 0.1, 15)`).
pub fn quantize_row(x: &[f32], out: &mut [BlockQ5K]) {
    assert_eq!(x.len(), out.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (d, dmin, scales, l) = quantize_k4(xb, 31, -0.5, 15);
        (b.d, b.dmin, b.scales) = (d, dmin, scales);
        b.qh = [0; 32];
        for (i, group) in b.qs.chunks_exact_mut(32).enumerate() {
            for (k, byte) in group.iter_mut().enumerate() {
                let (l1, l2) = (l[64 * i + k], l[64 * i + 32 + k]);
                b.qh[k] |= ((l1 >> 4) << (2 * i)) | ((l2 >> 4) << (2 * i + 1));
                *byte = (l1 & 0xF) | ((l2 & 0xF) << 4);
            }
        }
    }
}

/// Scalar reference dot product of Q5_K weights with Q8_K activations, as Q4_K's.
pub fn vec_dot(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    vec_dot_row_k4(w, a)
}

#[cfg(test)]
mod tests {
    use super::super::kquant::pack_scale_min_k4;
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ5K::zeroed();
        b.d = f16::from_f32(1.0);
        b.dmin = f16::from_f32(1.0);
        b.scales = pack_scale_min_k4(&[2; 8], &[3; 8]);
        b.qs[96 + 4] = 0x05; // sub-block 6 (low nibbles of group 3), element 196
        b.qh[4] = 1 << 6 | 1 << 7; // 5th bits of sub-blocks 6 and 7 at l = 4
        let y = Q5_K.dequantize(&[b]);
        assert_eq!(y[196], 2.0 * 21.0 - 3.0);
        assert_eq!(y[228], 2.0 * 16.0 - 3.0);
        assert_eq!(y[4], -3.0);
    }

    #[test]
    fn random_round_trip_error_is_small() {
        let x = Rng::new(13).vec(QK_K * 16, 1.0);
        Q5_K.assert_round_trip_within(&x, |_| 2.0 / 31.0);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ5K, r: &mut Rng| (b.d, b.dmin) = (r.scale_f16(), r.scale_f16());
        assert_vec_dot_twin(Rng::new(14), 8, &Q5_K, fix, &Q8_K, vec_dot, None);
    }
}
