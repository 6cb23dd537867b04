//! Q8_0 integer cores and tile. A packed Q8_0 (panel, block) is 8 vectors `g` of 32
//! bytes; the 16 bytes at `32g + 16h` hold rows `4h..4h+4`, elements `4g..4g+4` each
//! (signed codes, multiplied signed x signed).

use super::q4_0::{act_pair, untile};
use super::{act_ptrs, dup4, f16x8, sdot_lane, smmla, Core, F32x8, I32x8};
use crate::matmul::{QuantizedActivation, QK};
use std::arch::aarch64::*;

/// Plain NEON: for each pair of vectors, `smull` + `smlal` (2 products per int16 lane,
/// <= 2·128·127 = 32512), then `sadalp` into int32 (rows 0-1 / 2-3 of the half, one lane
/// per (row, byte pair)); a final `addp` gives one lane per row.
///
/// # Safety
/// NEON; `qp` valid for 256 bytes, each `ap[t]` for 32.
#[inline(always)]
pub unsafe fn sums_neon<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [I32x8; N] {
    let z = vdupq_n_s32(0);
    let mut acc = [[(z, z); 2]; N];
    for gp in 0..4 {
        let (g0, g1) = (2 * gp, 2 * gp + 1);
        let mut a0 = [vdupq_n_s8(0); N];
        let mut a1 = [vdupq_n_s8(0); N];
        for t in 0..N {
            a0[t] = dup4(ap[t].add(4 * g0));
            a1[t] = dup4(ap[t].add(4 * g1));
        }
        for h in 0..2 {
            let w0 = vld1q_s8(qp.add(32 * g0 + 16 * h) as *const i8);
            let w1 = vld1q_s8(qp.add(32 * g1 + 16 * h) as *const i8);
            for t in 0..N {
                let p01 = vmull_s8(vget_low_s8(w0), vget_low_s8(a0[t]));
                let p01 = vmlal_s8(p01, vget_low_s8(w1), vget_low_s8(a1[t]));
                let p23 = vmull_high_s8(w0, a0[t]);
                let p23 = vmlal_high_s8(p23, w1, a1[t]);
                let (x, y) = acc[t][h];
                acc[t][h] = (vpadalq_s16(x, p01), vpadalq_s16(y, p23));
            }
        }
    }
    let mut out = [[z; 2]; N];
    for t in 0..N {
        for h in 0..2 {
            let (x, y) = acc[t][h];
            out[t][h] = vpaddq_s32(x, y);
        }
    }
    out
}

/// Vectors `G` and `G + 4` of the dotprod core (activation group `G` of the low and the
/// high activation register).
///
/// # Safety
/// NEON + dotprod; `qp` valid for 256 bytes.
#[inline(always)]
unsafe fn step_dotprod<const G: usize, const N: usize>(
    qp: *const u8,
    a: &[[int8x16_t; 2]; N],
    lo: &mut [I32x8; N],
    hi: &mut [I32x8; N],
) {
    for h in 0..2 {
        let w0 = vld1q_s8(qp.add(32 * G + 16 * h) as *const i8);
        let w1 = vld1q_s8(qp.add(32 * (G + 4) + 16 * h) as *const i8);
        for t in 0..N {
            lo[t][h] = sdot_lane::<G>(lo[t][h], w0, a[t][0]);
            if N == 1 {
                hi[t][h] = sdot_lane::<G>(hi[t][h], w1, a[t][1]);
            } else {
                lo[t][h] = sdot_lane::<G>(lo[t][h], w1, a[t][1]);
            }
        }
    }
}

/// dotprod: 16 `sdot` per token.
///
/// # Safety
/// NEON + dotprod; `qp` valid for 256 bytes, each `ap[t]` for 32.
#[inline(always)]
pub unsafe fn sums_dotprod<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [I32x8; N] {
    let z = vdupq_n_s32(0);
    let mut a = [[vdupq_n_s8(0); 2]; N];
    for t in 0..N {
        a[t] = [vld1q_s8(ap[t]), vld1q_s8(ap[t].add(16))];
    }
    let mut lo = [[z; 2]; N];
    let mut hi = [[z; 2]; N];
    step_dotprod::<0, N>(qp, &a, &mut lo, &mut hi);
    step_dotprod::<1, N>(qp, &a, &mut lo, &mut hi);
    step_dotprod::<2, N>(qp, &a, &mut lo, &mut hi);
    step_dotprod::<3, N>(qp, &a, &mut lo, &mut hi);
    if N == 1 {
        for h in 0..2 {
            lo[0][h] = vaddq_s32(lo[0][h], hi[0][h]);
        }
    }
    lo
}

/// i8mm: tokens in pairs, 16 `smmla` per pair. Vectors `2c`, `2c+1` zipped by 32-bit lanes
/// give rows `(4h, 4h+1)` / `(4h+2, 4h+3)` with elements `8c..8c+8` (activation chunk
/// `c`). An odd last token goes through [`sums_dotprod`].
///
/// # Safety
/// NEON + dotprod + i8mm; `qp` valid for 256 bytes, each `ap[t]` for 32.
#[inline(always)]
pub unsafe fn sums_i8mm<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [I32x8; N] {
    let z = vdupq_n_s32(0);
    let mut out = [[z; 2]; N];
    if N >= 2 {
        let mut a = [[vdupq_n_s8(0); 4]; N];
        for j in 0..N / 2 {
            a[j] = act_pair(ap[2 * j], ap[2 * j + 1]);
        }
        let mut m = [[z; 4]; N];
        for c in 0..4 {
            for h in 0..2 {
                let w0 = vreinterpretq_s32_u8(vld1q_u8(qp.add(64 * c + 16 * h)));
                let w1 = vreinterpretq_s32_u8(vld1q_u8(qp.add(64 * c + 32 + 16 * h)));
                for (k, zz) in [vzip1q_s32(w0, w1), vzip2q_s32(w0, w1)]
                    .into_iter()
                    .enumerate()
                {
                    let zz = vreinterpretq_s8_s32(zz);
                    for j in 0..N / 2 {
                        let r = 2 * h + k;
                        m[j][r] = smmla(m[j][r], zz, a[j][c]);
                    }
                }
            }
        }
        for j in 0..N / 2 {
            let (x, y) = untile(&m[j]);
            out[2 * j] = x;
            out[2 * j + 1] = y;
        }
    }
    if N % 2 == 1 {
        out[N - 1] = sums_dotprod::<1>(qp, &[ap[N - 1]])[0];
    }
    out
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
    let mut ad = [&[][..]; N];
    for t in 0..N {
        ad[t] = &act.row_d(t0 + t)[..nb];
    }
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..nb {
        // b < nb: block b's 256 code bytes, 8 scales and each row's 32 codes are in bounds.
        let sums = C::q8::<N>(q.as_ptr().add(b * 256), &ap);
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
