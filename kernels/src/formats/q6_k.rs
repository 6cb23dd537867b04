//! Q6_K: 256 weights in 210 bytes (6.5625 bits per weight): 16 sub-blocks of 16, each
//! with a signed 8-bit scale; symmetric.
//!
//! Layout (`block_q6_K` in ggml-common.h): `ql: [u8; 128]` (low 4 bits), `qh: [u8; 64]`
//! (high 2 bits), `scales: [i8; 16]`, `d: f16`. Each half of 128 elements uses 64 bytes
//! of `ql` and 32 of `qh`: element `32k + l` (k = 0..4, l = 0..32) takes its low bits from
//! `ql[l + 32*(k%2)]` (low nibble for k < 2, high for k >= 2) and its high bits from
//! bits `2k..2k+2` of `qh[l]`. A 6-bit `q` decodes to `d * scales[e/16] * (q - 32)`.
//! Pairs with [`BlockQ8K`].

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::decode_blocks;
use super::kquant::{make_qx_quants, nearest_int, GROUP_MAX_EPS, QK_K};
use super::q8_k::BlockQ8K;
use super::sum_block_dots;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

/// The 256 signed codes (-32..=31) in element order.
fn codes(b: &BlockQ6K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for half in 0..2 {
        let ql = &b.ql[64 * half..64 * half + 64];
        let qh = &b.qh[32 * half..32 * half + 32];
        for l in 0..32 {
            let e = 128 * half + l;
            q[e] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
            q[e + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            q[e + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            q[e + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    q
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_q6_K`.
pub fn dequantize_row(blocks: &[BlockQ6K], out: &mut [f32]) {
    decode_blocks(blocks, out, QK_K, |b, y| {
        let d = b.d.to_f32();
        for (e, q) in codes(b).into_iter().enumerate() {
            y[e] = d * b.scales[e / 16] as f32 * q as f32;
        }
    })
}

/// `quantize_row_q6_K_ref`: per 16-element sub-block a symmetric fit
/// (`make_qx_quants(32, .., rmse_type 1)`), the scales quantized to int8 against the
/// largest, then every element re-quantized with the rounded scales.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ6K]) {
    assert_eq!(x.len(), out.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let mut l = [0i8; QK_K];
        let mut scales = [0.0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for (ib, scale) in scales.iter_mut().enumerate() {
            let r = 16 * ib..16 * ib + 16;
            *scale = make_qx_quants(32, &xb[r.clone()], &mut l[r], 1);
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = *scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *b = BlockQ6K::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        b.d = f16::from_f32(1.0 / iscale);
        for (q, &scale) in b.scales.iter_mut().zip(&scales) {
            *q = nearest_int(iscale * scale).min(127) as i8;
        }
        for j in 0..16 {
            let d = b.d.to_f32() * b.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 16 * j..16 * j + 16 {
                l[ii] = (nearest_int(xb[ii] / d).clamp(-32, 31) + 32) as i8;
            }
        }
        for half in 0..2 {
            let lh = &l[128 * half..128 * half + 128];
            for k in 0..32 {
                let q = [lh[k], lh[k + 32], lh[k + 64], lh[k + 96]].map(|v| v as u8);
                b.ql[64 * half + k] = (q[0] & 0xF) | ((q[2] & 0xF) << 4);
                b.ql[64 * half + k + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4);
                b.qh[32 * half + k] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
}

/// Scalar reference dot product of Q6_K weights with Q8_K activations: an exact integer
/// sum `Σ_g scales[g] * Σ q*q8` over the 16 sub-blocks, scaled by `d*d8`.
pub fn vec_dot(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let q = codes(x);
        let mut isum = 0i32;
        for g in 0..16 {
            let dot: i32 = (16 * g..16 * g + 16)
                .map(|e| q[e] as i32 * y.qs[e] as i32)
                .sum();
            isum += x.scales[g] as i32 * dot;
        }
        x.d.to_f32() * y.d * isum as f32
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ6K::zeroed();
        b.d = f16::from_f32(0.5);
        b.scales = [2; 16];
        b.scales[14] = -3; // the scale of elements 224..240
                           // element 128 + 96 + 5 = 229 (k = 3 of the second half): high nibble of
                           // ql[64 + 32 + 5], bits 6-7 of qh[32 + 5]
        b.ql[101] = 0x90;
        b.qh[37] = 0b10 << 6;
        let y = Q6_K.dequantize(&[b]);
        assert_eq!(y[229], 0.5 * -3.0 * (9.0 + 32.0 - 32.0));
        assert_eq!(y[0], 0.5 * 2.0 * -32.0);
    }

    #[test]
    fn random_round_trip_error_is_small() {
        let x = Rng::new(15).vec(QK_K * 16, 1.0);
        Q6_K.assert_round_trip_within(&x, |_| 1.0 / 31.0);
    }

    #[test]
    fn zero_input_gives_a_zero_block() {
        assert_eq!(Q6_K.quantize(&[0.0; QK_K])[0], BlockQ6K::zeroed());
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        let fix = |b: &mut BlockQ6K, r: &mut Rng| b.d = r.scale_f16();
        assert_vec_dot_twin(Rng::new(16), 8, &Q6_K, fix, &Q8_K, vec_dot, None);
    }
}
