//! Q6_K codes and tile. A record is the Q4 nibble record plus two 32-byte planes `H_lo`
//! (at 128) and `H_hi` (at 160), rows `4h..4h+4` at `+16h`: bits `2v..2v+2` of byte `k`
//! are the top 2 bits of element `4v+k` (`H_lo`) / `16+4v+k` (`H_hi`). They are shifted to
//! bits 4..6 and or-ed onto the nibbles: unsigned 6-bit codes (0..=63). The low and high
//! halves of a 32-block are separate 16-element sub-blocks with their own int8 scale, so
//! the cores keep the two sums apart (`SPLIT`; plain NEON: 4 products per int16 lane,
//! `4·63·127 = 32004`). The `−32` is folded exactly as `32·(sc_lo·S_lo + sc_hi·S_hi)`
//! with the activation's half-block sums; one FMA per block for 4 rows.

use super::cores::Codes;
use super::{f16x8, scale_add, Core, F32x8, TileRows};
use crate::matmul::{Layout, QuantizedActivation};
use std::arch::aarch64::*;

/// Q6_K records.
pub struct Q6;

impl Codes for Q6 {
    const NARROW: bool = true;
    #[inline(always)]
    unsafe fn codes<const V: usize>(qp: *const u8, h: usize) -> (int8x16_t, int8x16_t) {
        let w = vld1q_u8(qp.add(32 * V + 16 * h));
        let hl = vld1q_u8(qp.add(128 + 16 * h));
        let hh = vld1q_u8(qp.add(160 + 16 * h));
        let m30 = vdupq_n_u8(0x30);
        // bits 2V..2V+2 -> bits 4..6: shift by 4 − 2V (negative = right).
        let sh = vdupq_n_s8(4 - 2 * V as i8);
        let lo6 = vandq_u8(vshlq_u8(hl, sh), m30);
        let hi6 = vandq_u8(vshlq_u8(hh, sh), m30);
        (
            vreinterpretq_s8_u8(vorrq_u8(vandq_u8(w, vdupq_n_u8(0x0F)), lo6)),
            vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(w), hi6)),
        )
    }
}

/// The 8 row outputs of one Q6_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], mut r: TileRows<N>) -> [F32x8; N] {
    let (ng, spg) = r.k_groups(Layout::Q6_K, q, 192, s);
    let s16 = r.per_token(QuantizedActivation::row_sum16);
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for g in 0..ng {
        // g < ng: the 144 bytes of group g ([d; 8], then per block 8 x (sc_lo, sc_hi)) are
        // in `s` (checked above).
        let grp = s.as_ptr().add(g * spg);
        let dw = f16x8(grp);
        let bytes = grp as *const i8;
        for j in 0..8 {
            let b = 8 * g + j;
            // `ld2`: even bytes sc_lo of rows 0..8, odd bytes sc_hi.
            let sc = vld2_s8(bytes.add(16 + 16 * j));
            let (lo16, hi16) = (vmovl_s8(sc.0), vmovl_s8(sc.1));
            let sclo = [vmovl_s16(vget_low_s16(lo16)), vmovl_high_s16(lo16)];
            let schi = [vmovl_s16(vget_low_s16(hi16)), vmovl_high_s16(hi16)];
            // b < nb: block b's 192 record bytes and each row's 32 codes are in bounds.
            let [lo, hi] = C::sums::<Q6, N, true>(q.as_ptr().add(b * 192), &r.ap);
            // Minus 32·(sc_lo·S_lo + sc_hi·S_hi): the `-32` offset of the codes.
            let i = std::array::from_fn(|t| {
                let (alo, ahi) = (s16[t][b] as i16 as i32, (s16[t][b] >> 16) as i16 as i32);
                std::array::from_fn(|h| {
                    let off = vmlaq_n_s32(vmulq_n_s32(sclo[h], alo), schi[h], ahi);
                    let i = vmlaq_s32(vmulq_s32(lo[t][h], sclo[h]), hi[t][h], schi[h]);
                    vsubq_s32(i, vshlq_n_s32::<5>(off))
                })
            });
            scale_add(&mut acc, dw, &r, b, &i);
            r.advance();
        }
    }
    acc
}
