//! Q4 codes (shared by Q4_0, Q4_1 and Q4_K) and the Q4_0 tile.
//!
//! A packed Q4 (panel, block) is 4 vectors `v` of 32 bytes; the 16 bytes at `32v + 16h`
//! hold rows `4h..4h+4`, 4 code bytes each: low nibbles are elements `4v..4v+4`, high
//! nibbles `16+4v..16+4v+4`. Nibbles are unpacked with `and #0x0F` / `ushr #4` and stay
//! unsigned (0..=15, valid as signed int8); Q4_0's `-8` is folded in as `Σwq - 8Σq`
//! (exact in int32), as the scalar reference does.

use super::cores::Codes;
use super::{f16x8, scale_add, Core, F32x8, TileRows};
use crate::matmul::QuantizedActivation;
use std::arch::aarch64::*;

/// Q4 nibble records (Q4_0, Q4_1, Q4_1x64, Q4_K): `and #0x0F` / `ushr #4`, unsigned.
pub struct Q4;

impl Codes for Q4 {
    const NARROW: bool = true;
    #[inline(always)]
    unsafe fn codes<const V: usize>(qp: *const u8, h: usize) -> (int8x16_t, int8x16_t) {
        let w = vld1q_u8(qp.add(32 * V + 16 * h));
        (
            vreinterpretq_s8_u8(vandq_u8(w, vdupq_n_u8(0x0F))),
            vreinterpretq_s8_u8(vshrq_n_u8::<4>(w)),
        )
    }
    /// Zips the raw nibble bytes, then splits nibbles: 2 decodes per zipped register pair
    /// instead of 2 per vector.
    #[inline(always)]
    unsafe fn zipped<const V0: usize, const V1: usize>(
        qp: *const u8,
        h: usize,
    ) -> ([int8x16_t; 2], [int8x16_t; 2]) {
        let m4 = vdupq_n_u8(0x0F);
        let w0 = vreinterpretq_u32_u8(vld1q_u8(qp.add(32 * V0 + 16 * h)));
        let w1 = vreinterpretq_u32_u8(vld1q_u8(qp.add(32 * V1 + 16 * h)));
        let z = [
            vreinterpretq_u8_u32(vzip1q_u32(w0, w1)),
            vreinterpretq_u8_u32(vzip2q_u32(w0, w1)),
        ];
        (
            z.map(|z| vreinterpretq_s8_u8(vandq_u8(z, m4))),
            z.map(|z| vreinterpretq_s8_u8(vshrq_n_u8::<4>(z))),
        )
    }
}

/// The 8 row outputs of one Q4_0 panel for activation rows `t0..t0+N`:
/// `acc += (dw·da) · (Σwq - 8Σq)` per block.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked: `q` must hold `blocks·128` bytes,
/// `s` `blocks·8` scales.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [F32x8; N] {
    tile_offset::<C, Q4, N, 1>(q, s, r, 128)
}

/// The tile of a symmetric format whose codes `K` carry an offset `8·Z8` (Q4_0: 8, Q5_0:
/// 16, unsigned codes; Q8_0: none, signed codes) over `rec`-byte records:
/// `acc += (dw·da) · (Σqa − 8·Z8·Σa)` per block, the offset folded in exactly in int32
/// through the activation's `8·Σa`.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked: `q` must hold `blocks·rec` bytes,
/// `s` `blocks·8` scales.)
#[inline(always)]
pub(super) unsafe fn tile_offset<C: Core, K: Codes, const N: usize, const Z8: i32>(
    q: &[u8],
    s: &[u16],
    mut r: TileRows<N>,
    rec: usize,
) -> [F32x8; N] {
    let nb = r.nb;
    assert!(q.len() >= nb * rec && s.len() >= nb * 8);
    let asum = r.per_token(QuantizedActivation::row_sum8);
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..nb {
        // b < nb: block b's record, 8 scales and each row's 32 codes are in bounds.
        let sums = C::sums::<K, N, false>(q.as_ptr().add(b * rec), &r.ap)[0];
        let i = std::array::from_fn(|t| {
            let off = vdupq_n_s32(Z8 * asum[t][b]);
            sums[t].map(|s| vsubq_s32(s, off))
        });
        scale_add(&mut acc, f16x8(s.as_ptr().add(b * 8)), &r, b, &i);
        r.advance();
    }
    acc
}
