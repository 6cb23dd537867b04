//! Q4_K tiles (and, through [`tile_with`], Q5_K's) on the packed layout of
//! `matmul/packed_k.rs`: each 32-element sub-block is a Q4_0-style nibble record (codes
//! [`Q4`]), its 6-bit scale multiplies the exact int32 block sum per row (`mul .4s`, still
//! exact: `|sc·Σqa| <= 63·32·15·127`), then per sub-block one FMA applies `d·da` and one
//! fused multiply-subtract the min term `(dmin·m)·(da·Σa)` — the scalar reference's order,
//! so the result is bit-identical to it.

use super::cores::Codes;
use super::q4_0::Q4;
use super::{f16x8, scale_add, Core, F32x8, TileRows};
use crate::matmul::{Layout, QuantizedActivation};
use std::arch::aarch64::*;

/// The 8 row outputs of one Q4_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [F32x8; N] {
    tile_with::<C, Q4, N>(q, s, r, Layout::Q4_K)
}

/// Widens 8 `u8` (one per row) at `p` to `[rows 0-3, rows 4-7]` as int32.
///
/// # Safety
/// NEON; `p` valid for 8 bytes.
#[inline(always)]
unsafe fn u8x8_to_i32(p: *const u8) -> [int32x4_t; 2] {
    let w = vmovl_u8(vld1_u8(p));
    [
        vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w))),
        vreinterpretq_s32_u32(vmovl_high_u16(w)),
    ]
}

/// A K-quant tile with 6-bit scales and mins per 32-element sub-block (Q4_K, Q5_K: the
/// scale group of `layout`, codes `K` unsigned, records of `layout`'s size).
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile_with<C: Core, K: Codes, const N: usize>(
    q: &[u8],
    s: &[u16],
    mut r: TileRows<N>,
    layout: Layout,
) -> [F32x8; N] {
    let qb = layout.quant_bytes_per_block();
    let (ng, spg) = r.k_groups(layout, q, qb, s);
    let ads = r.per_token(QuantizedActivation::row_ds);
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for g in 0..ng {
        // g < ng: the 160 bytes of group g ([d; 8], [dmin; 8], sc[8][8], m[8][8]) are in
        // `s` (checked above).
        let grp = s.as_ptr().add(g * spg);
        let (dw, dmin) = (f16x8(grp), f16x8(grp.add(8)));
        let bytes = grp as *const u8;
        for j in 0..8 {
            let b = 8 * g + j;
            let sc = u8x8_to_i32(bytes.add(32 + 8 * j));
            let m = u8x8_to_i32(bytes.add(96 + 8 * j));
            let dm = [
                vmulq_f32(dmin[0], vcvtq_f32_s32(m[0])),
                vmulq_f32(dmin[1], vcvtq_f32_s32(m[1])),
            ];
            // b < nb: block b's record and each row's 32 activation codes are in bounds.
            let sums = C::sums::<K, N, false>(q.as_ptr().add(b * qb), &r.ap)[0];
            let i = sums.map(|s| [vmulq_s32(s[0], sc[0]), vmulq_s32(s[1], sc[1])]);
            scale_add(&mut acc, dw, &r, b, &i);
            for t in 0..N {
                let da = vdupq_n_f32(ads[t][b]);
                for h in 0..2 {
                    acc[t][h] = vfmsq_f32(acc[t][h], dm[h], da);
                }
            }
            r.advance();
        }
    }
    acc
}
