//! Q4 integer cores (shared by Q4_0 and Q4_1) and the Q4_0 tile.
//!
//! A packed Q4 (panel, block) is 4 vectors `v` of 32 bytes; the 16 bytes at `32v + 16h`
//! hold rows `4h..4h+4`, 4 code bytes each: low nibbles are elements `4v..4v+4`, high
//! nibbles `16+4v..16+4v+4`. Nibbles are unpacked with `and #0x0F` / `ushr #4` and stay
//! unsigned (0..=15, valid as signed int8); Q4_0's `-8` is folded in as `Σwq - 8Σq`
//! (exact in int32), as the scalar reference does.

use super::{act_ptrs, dup4, f16x8, sdot_lane, smmla, Core, F32x8, I32x8};
use crate::matmul::{QuantizedActivation, QK};
use std::arch::aarch64::*;

/// Plain NEON: per row half and token, `smlal`/`smlal2` of the nibbles with the broadcast
/// activation group into two int16x8 (rows 0-1 / 2-3 of the half, one lane per (row,
/// byte)); 8 products per lane (<= 15240), `addp` pairs (<= 30480), `saddlp` to int32.
///
/// # Safety
/// NEON; `qp` valid for 128 bytes, each `ap[t]` for 32.
#[inline(always)]
pub unsafe fn sums_neon<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [I32x8; N] {
    let m4 = vdupq_n_u8(0x0F);
    let z = vdupq_n_s16(0);
    // acc[t][h] = (rows 4h+0..2, rows 4h+2..4)
    let mut acc = [[(z, z); 2]; N];
    for v in 0..4 {
        let mut al = [vdupq_n_s8(0); N];
        let mut au = [vdupq_n_s8(0); N];
        for t in 0..N {
            al[t] = dup4(ap[t].add(4 * v));
            au[t] = dup4(ap[t].add(16 + 4 * v));
        }
        for h in 0..2 {
            let w = vld1q_u8(qp.add(32 * v + 16 * h));
            let l = vreinterpretq_s8_u8(vandq_u8(w, m4));
            let u = vreinterpretq_s8_u8(vshrq_n_u8::<4>(w));
            for t in 0..N {
                let (mut a01, mut a23) = acc[t][h];
                a01 = vmlal_s8(a01, vget_low_s8(l), vget_low_s8(al[t]));
                a23 = vmlal_high_s8(a23, l, al[t]);
                a01 = vmlal_s8(a01, vget_low_s8(u), vget_low_s8(au[t]));
                a23 = vmlal_high_s8(a23, u, au[t]);
                acc[t][h] = (a01, a23);
            }
        }
    }
    let mut out = [[vdupq_n_s32(0); 2]; N];
    for t in 0..N {
        for h in 0..2 {
            let (a01, a23) = acc[t][h];
            out[t][h] = vpaddlq_s16(vpaddq_s16(a01, a23));
        }
    }
    out
}

/// One nibble vector `V` of the dotprod core: `sdot` by element with activation group `V`
/// of the low (elements 0..16) and high (16..32) activation registers.
///
/// # Safety
/// NEON + dotprod; `qp` valid for 128 bytes.
#[inline(always)]
unsafe fn step_dotprod<const V: usize, const N: usize>(
    qp: *const u8,
    a: &[[int8x16_t; 2]; N],
    lo: &mut [I32x8; N],
    hi: &mut [I32x8; N],
) {
    let m4 = vdupq_n_u8(0x0F);
    for h in 0..2 {
        let w = vld1q_u8(qp.add(32 * V + 16 * h));
        let l = vreinterpretq_s8_u8(vandq_u8(w, m4));
        let u = vreinterpretq_s8_u8(vshrq_n_u8::<4>(w));
        for t in 0..N {
            lo[t][h] = sdot_lane::<V>(lo[t][h], l, a[t][0]);
            // One token (gemv): a second accumulator halves the dependency chain; with
            // more tokens the chains interleave and registers are scarcer.
            if N == 1 {
                hi[t][h] = sdot_lane::<V>(hi[t][h], u, a[t][1]);
            } else {
                lo[t][h] = sdot_lane::<V>(lo[t][h], u, a[t][1]);
            }
        }
    }
}

/// dotprod: 16 `sdot` per token (4 vectors x 2 row halves x low/high nibbles).
///
/// # Safety
/// NEON + dotprod; `qp` valid for 128 bytes, each `ap[t]` for 32.
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

/// The 4 `smmla` activation operands of tokens `x`, `y` for one block: chunk `c` =
/// elements `8c..8c+8` of `x` (low 8 bytes) and of `y` (high 8 bytes).
///
/// # Safety
/// NEON; `x`, `y` valid for 32 bytes.
#[inline(always)]
pub unsafe fn act_pair(x: *const i8, y: *const i8) -> [int8x16_t; 4] {
    let (x0, x1) = (
        vreinterpretq_s64_s8(vld1q_s8(x)),
        vreinterpretq_s64_s8(vld1q_s8(x.add(16))),
    );
    let (y0, y1) = (
        vreinterpretq_s64_s8(vld1q_s8(y)),
        vreinterpretq_s64_s8(vld1q_s8(y.add(16))),
    );
    [
        vreinterpretq_s8_s64(vzip1q_s64(x0, y0)),
        vreinterpretq_s8_s64(vzip2q_s64(x0, y0)),
        vreinterpretq_s8_s64(vzip1q_s64(x1, y1)),
        vreinterpretq_s8_s64(vzip2q_s64(x1, y1)),
    ]
}

/// De-interleaves the 2x2 `smmla` tiles of one token pair (`m[k]` = rows `2k, 2k+1` x
/// tokens `x, y`) into per-token row vectors.
///
/// # Safety
/// NEON.
#[inline(always)]
pub unsafe fn untile(m: &[int32x4_t; 4]) -> (I32x8, I32x8) {
    (
        [vuzp1q_s32(m[0], m[1]), vuzp1q_s32(m[2], m[3])],
        [vuzp2q_s32(m[0], m[1]), vuzp2q_s32(m[2], m[3])],
    )
}

/// i8mm: tokens in pairs, 16 `smmla` per pair. Vectors `2p` and `2p+1` zipped by 32-bit
/// lanes give rows `(4h, 4h+1)` (`zip1`) and `(4h+2, 4h+3)` (`zip2`) with 8 consecutive
/// elements each: low nibbles are elements `8p..8p+8` (activation chunk `p`), high
/// nibbles `16+8p..` (chunk `2+p`). An odd last token goes through [`sums_dotprod`].
///
/// # Safety
/// NEON + dotprod + i8mm; `qp` valid for 128 bytes, each `ap[t]` for 32.
#[inline(always)]
pub unsafe fn sums_i8mm<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [I32x8; N] {
    let z = vdupq_n_s32(0);
    let mut out = [[z; 2]; N];
    if N >= 2 {
        let m4 = vdupq_n_u32(0x0F0F_0F0F);
        // Pair j covers tokens 2j, 2j+1 (only j < N/2 used).
        let mut a = [[vdupq_n_s8(0); 4]; N];
        for j in 0..N / 2 {
            a[j] = act_pair(ap[2 * j], ap[2 * j + 1]);
        }
        let mut m = [[z; 4]; N];
        for p in 0..2 {
            for h in 0..2 {
                let w0 = vreinterpretq_u32_u8(vld1q_u8(qp.add(64 * p + 16 * h)));
                let w1 = vreinterpretq_u32_u8(vld1q_u8(qp.add(64 * p + 32 + 16 * h)));
                for (k, zz) in [vzip1q_u32(w0, w1), vzip2q_u32(w0, w1)]
                    .into_iter()
                    .enumerate()
                {
                    let l = vreinterpretq_s8_u32(vandq_u32(zz, m4));
                    let u = vreinterpretq_s8_u8(vshrq_n_u8::<4>(vreinterpretq_u8_u32(zz)));
                    for j in 0..N / 2 {
                        let r = 2 * h + k;
                        m[j][r] = smmla(m[j][r], l, a[j][p]);
                        m[j][r] = smmla(m[j][r], u, a[j][2 + p]);
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

/// The 8 row outputs of one Q4_0 panel for activation rows `t0..t0+N`:
/// `acc += (dw·da) · (Σwq - 8Σq)` per block.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked: `q` must hold `blocks·128` bytes,
/// `s` `blocks·8` scales, `act` rows `t0..t0+N`.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(
    q: &[u8],
    s: &[u16],
    act: &QuantizedActivation,
    t0: usize,
) -> [F32x8; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 128 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let mut ad = [&[][..]; N];
    let mut asum = [&[][..]; N];
    for t in 0..N {
        ad[t] = &act.row_d(t0 + t)[..nb];
        asum[t] = &act.row_sum8(t0 + t)[..nb];
    }
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..nb {
        // b < nb: block b's 128 code bytes, 8 scales and each row's 32 codes are in bounds.
        let sums = C::q4::<N>(q.as_ptr().add(b * 128), &ap);
        let dw = f16x8(s.as_ptr().add(b * 8));
        for t in 0..N {
            let off = vdupq_n_s32(asum[t][b]);
            for h in 0..2 {
                let i = vcvtq_f32_s32(vsubq_s32(sums[t][h], off));
                acc[t][h] = vfmaq_f32(acc[t][h], vmulq_n_f32(dw[h], ad[t][b]), i);
            }
            ap[t] = ap[t].add(QK);
        }
    }
    acc
}
