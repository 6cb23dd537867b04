//! Q4_1 tiles: `Σ(q·dw + m)(a·da) = dw·da·Σqa + m·(da·Σa)`; the codes are the Q4
//! ones ([`super::q4_0::Q4`]). Scales per (panel, group): `[d; 8] ++ [m; 8]` fp16. [`tile_x64`]
//! reads the merged layout with one `(d, m)` per 64-group. Float operations in the order
//! of the scalar reference.

use super::q4_0::Q4;
use super::{f16x8, scale_add, Core, F32x8, TileRows};
use crate::matmul::{QuantizedActivation, QK};
use std::arch::aarch64::*;

/// The 8 row outputs of one Q4_1 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], mut r: TileRows<N>) -> [F32x8; N] {
    let nb = r.nb;
    assert!(q.len() >= nb * 128 && s.len() >= nb * 16);
    let ads = r.per_token(QuantizedActivation::row_ds);
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..nb {
        // b < nb: block b's codes, scales and activations are in bounds (checked above).
        let sums = C::sums::<Q4, N, false>(q.as_ptr().add(b * 128), &r.ap)[0];
        scale_add(&mut acc, f16x8(s.as_ptr().add(b * 16)), &r, b, &sums);
        let mw = f16x8(s.as_ptr().add(b * 16 + 8));
        for t in 0..N {
            for h in 0..2 {
                acc[t][h] = vfmaq_n_f32(acc[t][h], mw[h], ads[t][b]);
            }
        }
        r.advance();
    }
    acc
}

/// The 8 row outputs of one merged-Q4_1 ([`crate::matmul::Layout::Q4_1x64`]) panel.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked; the block count is even.)
#[inline(always)]
pub unsafe fn tile_x64<C: Core, const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [F32x8; N] {
    let TileRows { nb, mut ap, ad, .. } = r;
    let ng = nb / 2;
    assert!(nb % 2 == 0 && q.len() >= nb * 128 && s.len() >= ng * 16);
    let ads = r.per_token(QuantizedActivation::row_ds);
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for g in 0..ng {
        let (b0, b1) = (2 * g, 2 * g + 1);
        // b1 < nb: both blocks' codes/activations and group g's scales are in bounds.
        let s0 = C::sums::<Q4, N, false>(q.as_ptr().add(b0 * 128), &ap)[0];
        let mut ap1 = ap;
        for p in ap1.iter_mut() {
            *p = p.add(QK);
        }
        let s1 = C::sums::<Q4, N, false>(q.as_ptr().add(b1 * 128), &ap1)[0];
        let dw = f16x8(s.as_ptr().add(g * 16));
        let mw = f16x8(s.as_ptr().add(g * 16 + 8));
        for t in 0..N {
            let dsum = ads[t][b0] + ads[t][b1];
            for h in 0..2 {
                let tmp = vmulq_n_f32(vcvtq_f32_s32(s0[t][h]), ad[t][b0]);
                let tmp = vfmaq_n_f32(tmp, vcvtq_f32_s32(s1[t][h]), ad[t][b1]);
                acc[t][h] = vfmaq_f32(acc[t][h], tmp, dw[h]);
                acc[t][h] = vfmaq_n_f32(acc[t][h], mw[h], dsum);
            }
            ap[t] = ap[t].add(2 * QK);
        }
    }
    acc
}
