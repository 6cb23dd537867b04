//! Q8_0 codes and tile. A packed Q8_0 (panel, block) is 8 vectors `g` of 32
//! bytes; the 16 bytes at `32g + 16h` hold rows `4h..4h+4`, elements `4g..4g+4` each
//! (signed codes, multiplied signed x signed).

use super::cores::Codes;
use super::{act_ptrs, f16x8, per_token, Core, F32x8};
use crate::matmul::{QuantizedActivation, QK};
use std::arch::aarch64::*;

/// Q8_0 records: vector `v` and vector `v + 4` are the low and high codes (signed bytes,
/// loaded as they are).
pub struct Q8;

impl Codes for Q8 {
    const NARROW: bool = false;
    #[inline(always)]
    unsafe fn codes<const V: usize>(qp: *const u8, h: usize) -> (int8x16_t, int8x16_t) {
        (
            vld1q_s8(qp.add(32 * V + 16 * h) as *const i8),
            vld1q_s8(qp.add(32 * (V + 4) + 16 * h) as *const i8),
        )
    }
}

/// The 8 row outputs of one Q8_0 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(
    q: &[u8],
    s: &[u16],
    act: &QuantizedActivation,
    t0: usize,
) -> [F32x8; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 256 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let ad = per_token::<f32, N>(act, t0, nb, QuantizedActivation::row_d);
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..nb {
        // b < nb: block b's 256 code bytes, 8 scales and each row's 32 codes are in bounds.
        let sums = C::sums::<Q8, N, false>(q.as_ptr().add(b * 256), &ap)[0];
        let dw = f16x8(s.as_ptr().add(b * 8));
        for t in 0..N {
            for h in 0..2 {
                let i = vcvtq_f32_s32(sums[t][h]);
                acc[t][h] = vfmaq_f32(acc[t][h], vmulq_n_f32(dw[h], ad[t][b]), i);
            }
            ap[t] = ap[t].add(QK);
        }
    }
    acc
}
