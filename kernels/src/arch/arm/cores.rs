//! The integer block cores, written once for every packed format.
//!
//! Every packed record (Q4_0/Q4_1/Q4_K nibbles, Q5_0/Q5_K nibbles + a 5th-bit plane, Q6_K
//! nibbles + two 2-bit planes, Q8_0 bytes) is, per row half `h` (rows `4h..4h+4`) and
//! vector `v = 0..4`, two registers of codes, one row per 32-bit lane: elements `4v..4v+4`
//! (the "low" half of the 32-block) and `16+4v..16+4v+4` (the "high" half). A format only
//! says how to produce those two registers ([`Codes::codes`]); the three ISA cores below
//! multiply them with the int8 activation, so the sdot / smmla / smlal schedules live in
//! one place. All sums are exact int32, hence identical on every level.
//!
//! `SPLIT` keeps the low-half and high-half sums apart (Q6_K: each half of a 32-block is
//! its own 16-element sub-block with its own scale); otherwise `[0]` holds the block sum
//! and `[1]` is zero.

use super::{dup4, sdot_lane, smmla, I32x8};
use std::arch::aarch64::*;

/// How a packed format yields its int8 codes.
pub trait Codes {
    /// Whether `8 · max|code| · 127 <= 32767`, so plain NEON may accumulate a whole block
    /// in int16 lanes before widening (Q4, Q5, Q6 codes: yes; Q8_0 bytes: no — those are
    /// widened after every 2 products).
    const NARROW: bool;
    /// The codes of vector `V` for row half `h`: (elements `4V..4V+4`, elements
    /// `16+4V..16+4V+4`) of rows `4h..4h+4`, one row per 32-bit lane.
    ///
    /// # Safety
    /// NEON; `qp` points at one whole (panel, block) record of this format; `V < 4`,
    /// `h < 2`.
    unsafe fn codes<const V: usize>(qp: *const u8, h: usize) -> (int8x16_t, int8x16_t);
    /// The `smmla` operands of vectors `V0`, `V0 + 1` for row half `h`: [`Self::codes`] of
    /// both zipped by 32-bit lanes, `([low codes of rows (4h, 4h+1), (4h+2, 4h+3)], [high
    /// codes likewise])`, 8 consecutive elements per row. A format may zip its raw bytes
    /// before decoding when that is cheaper (Q4: one decode per zipped register).
    ///
    /// # Safety
    /// As [`Self::codes`]; `V0` is 0 or 2.
    #[inline(always)]
    unsafe fn zipped<const V0: usize, const V1: usize>(
        qp: *const u8,
        h: usize,
    ) -> ([int8x16_t; 2], [int8x16_t; 2]) {
        let (l0, u0) = Self::codes::<V0>(qp, h);
        let (l1, u1) = Self::codes::<V1>(qp, h);
        let (l0, l1) = (vreinterpretq_s32_s8(l0), vreinterpretq_s32_s8(l1));
        let (u0, u1) = (vreinterpretq_s32_s8(u0), vreinterpretq_s32_s8(u1));
        (
            [
                vreinterpretq_s8_s32(vzip1q_s32(l0, l1)),
                vreinterpretq_s8_s32(vzip2q_s32(l0, l1)),
            ],
            [
                vreinterpretq_s8_s32(vzip1q_s32(u0, u1)),
                vreinterpretq_s8_s32(vzip2q_s32(u0, u1)),
            ],
        )
    }
}

/// Block sums of N tokens: `[low half (or all), high half (or zero)]`, per token 8 rows.
pub type Sums<const N: usize> = [[I32x8; N]; 2];

/// Plain NEON. Per vector, the broadcast activation group (`dup .4s`) times the codes with
/// `smlal`/`smlal2` into int16 lanes (one lane per (row, byte)); [`Codes::NARROW`] formats
/// widen once per block, Q8_0 after every vector, with `sadalp`; a final `addp .4s` leaves
/// one lane per row.
///
/// # Safety
/// NEON; `qp` valid for one record of `K`, each `ap[t]` for 32 bytes.
#[inline(always)]
pub unsafe fn sums_neon<K: Codes, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    ap: &[*const i8; N],
) -> Sums<N> {
    let z16 = vdupq_n_s16(0);
    let z32 = vdupq_n_s32(0);
    // [part][t][h] = (rows 4h, 4h+1 | rows 4h+2, 4h+3)
    let mut a16 = [[[(z16, z16); 2]; N]; 2];
    let mut a32 = [[[(z32, z32); 2]; N]; 2];
    step_neon::<K, 0, N, SPLIT>(qp, ap, &mut a16, &mut a32);
    step_neon::<K, 1, N, SPLIT>(qp, ap, &mut a16, &mut a32);
    step_neon::<K, 2, N, SPLIT>(qp, ap, &mut a16, &mut a32);
    step_neon::<K, 3, N, SPLIT>(qp, ap, &mut a16, &mut a32);
    let mut out = [[[z32; 2]; N]; 2];
    for part in 0..2 {
        for t in 0..N {
            for h in 0..2 {
                let (x, y) = a32[part][t][h];
                let (x16, y16) = a16[part][t][h];
                let (x, y) = if K::NARROW {
                    (vpadalq_s16(x, x16), vpadalq_s16(y, y16))
                } else {
                    (x, y)
                };
                out[part][t][h] = vpaddq_s32(x, y);
            }
        }
    }
    out
}

/// One vector `V` of [`sums_neon`].
///
/// # Safety
/// As [`sums_neon`].
#[inline(always)]
#[allow(clippy::type_complexity)]
unsafe fn step_neon<K: Codes, const V: usize, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    ap: &[*const i8; N],
    a16: &mut [[[(int16x8_t, int16x8_t); 2]; N]; 2],
    a32: &mut [[[(int32x4_t, int32x4_t); 2]; N]; 2],
) {
    let mut al = [vdupq_n_s8(0); N];
    let mut au = [vdupq_n_s8(0); N];
    for t in 0..N {
        al[t] = dup4(ap[t].add(4 * V));
        au[t] = dup4(ap[t].add(16 + 4 * V));
    }
    let hp = if SPLIT { 1 } else { 0 };
    for h in 0..2 {
        let (l, u) = K::codes::<V>(qp, h);
        for t in 0..N {
            if K::NARROW {
                // <= 8 products of |code| <= 32 by |a| <= 127 per lane over the block.
                let (mut x, mut y) = a16[0][t][h];
                x = vmlal_s8(x, vget_low_s8(l), vget_low_s8(al[t]));
                y = vmlal_high_s8(y, l, al[t]);
                a16[0][t][h] = (x, y);
                let (mut x, mut y) = a16[hp][t][h];
                x = vmlal_s8(x, vget_low_s8(u), vget_low_s8(au[t]));
                y = vmlal_high_s8(y, u, au[t]);
                a16[hp][t][h] = (x, y);
            } else if SPLIT {
                let (x, y) = a32[0][t][h];
                let (px, py) = (
                    vmull_s8(vget_low_s8(l), vget_low_s8(al[t])),
                    vmull_high_s8(l, al[t]),
                );
                a32[0][t][h] = (vpadalq_s16(x, px), vpadalq_s16(y, py));
                let (x, y) = a32[1][t][h];
                let (px, py) = (
                    vmull_s8(vget_low_s8(u), vget_low_s8(au[t])),
                    vmull_high_s8(u, au[t]),
                );
                a32[1][t][h] = (vpadalq_s16(x, px), vpadalq_s16(y, py));
            } else {
                // 2 products per lane (<= 2·128·127 = 32512), then widened.
                let px = vmull_s8(vget_low_s8(l), vget_low_s8(al[t]));
                let px = vmlal_s8(px, vget_low_s8(u), vget_low_s8(au[t]));
                let py = vmull_high_s8(l, al[t]);
                let py = vmlal_high_s8(py, u, au[t]);
                let (x, y) = a32[0][t][h];
                a32[0][t][h] = (vpadalq_s16(x, px), vpadalq_s16(y, py));
            }
        }
    }
}

/// One vector `V` of [`sums_dotprod`]: `sdot` by element with activation group `V` of the
/// low (elements 0..16) and high (16..32) activation registers.
///
/// # Safety
/// NEON + dotprod; `qp` valid for one record of `K`.
#[inline(always)]
unsafe fn step_dotprod<K: Codes, const V: usize, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    a: &[[int8x16_t; 2]; N],
    lo: &mut [I32x8; N],
    hi: &mut [I32x8; N],
) {
    for h in 0..2 {
        let (l, u) = K::codes::<V>(qp, h);
        for t in 0..N {
            lo[t][h] = sdot_lane::<V>(lo[t][h], l, a[t][0]);
            // One token (gemv): a second accumulator halves the dependency chain; with
            // more tokens the chains interleave and registers are scarcer.
            if SPLIT || N == 1 {
                hi[t][h] = sdot_lane::<V>(hi[t][h], u, a[t][1]);
            } else {
                lo[t][h] = sdot_lane::<V>(lo[t][h], u, a[t][1]);
            }
        }
    }
}

/// dotprod: 16 `sdot` per token and block (4 vectors x 2 row halves x low/high codes), 4
/// bytes x 4 rows each.
///
/// # Safety
/// NEON + dotprod; `qp` valid for one record of `K`, each `ap[t]` for 32 bytes.
#[inline(always)]
pub unsafe fn sums_dotprod<K: Codes, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    ap: &[*const i8; N],
) -> Sums<N> {
    let z = vdupq_n_s32(0);
    let mut a = [[vdupq_n_s8(0); 2]; N];
    for t in 0..N {
        a[t] = [vld1q_s8(ap[t]), vld1q_s8(ap[t].add(16))];
    }
    let mut lo = [[z; 2]; N];
    let mut hi = [[z; 2]; N];
    step_dotprod::<K, 0, N, SPLIT>(qp, &a, &mut lo, &mut hi);
    step_dotprod::<K, 1, N, SPLIT>(qp, &a, &mut lo, &mut hi);
    step_dotprod::<K, 2, N, SPLIT>(qp, &a, &mut lo, &mut hi);
    step_dotprod::<K, 3, N, SPLIT>(qp, &a, &mut lo, &mut hi);
    if !SPLIT && N == 1 {
        for h in 0..2 {
            lo[0][h] = vaddq_s32(lo[0][h], hi[0][h]);
            hi[0][h] = z;
        }
    }
    [lo, hi]
}

/// The 4 `smmla` activation operands of tokens `x`, `y` for one block: chunk `c` =
/// elements `8c..8c+8` of `x` (low 8 bytes) and of `y` (high 8 bytes).
///
/// # Safety
/// NEON; `x`, `y` valid for 32 bytes.
#[inline(always)]
unsafe fn act_pair(x: *const i8, y: *const i8) -> [int8x16_t; 4] {
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
unsafe fn untile(m: &[int32x4_t; 4]) -> (I32x8, I32x8) {
    (
        [vuzp1q_s32(m[0], m[1]), vuzp1q_s32(m[2], m[3])],
        [vuzp2q_s32(m[0], m[1]), vuzp2q_s32(m[2], m[3])],
    )
}

/// Vectors `V0 = 2P`, `V1 = 2P+1` of [`sums_i8mm`]: zipped by 32-bit lanes they give rows
/// `(4h, 4h+1)` (`zip1`) and `(4h+2, 4h+3)` (`zip2`) with 8 consecutive elements each: low
/// codes are elements `8P..8P+8` (activation chunk `P`), high codes `16+8P..` (chunk `2+P`).
///
/// # Safety
/// NEON + i8mm; `qp` valid for one record of `K`.
#[inline(always)]
unsafe fn step_i8mm<
    K: Codes,
    const V0: usize,
    const V1: usize,
    const N: usize,
    const SPLIT: bool,
>(
    qp: *const u8,
    a: &[[int8x16_t; 4]; N],
    m: &mut [[[int32x4_t; 4]; N]; 2],
) {
    let p = V0 / 2;
    let hp = if SPLIT { 1 } else { 0 };
    for h in 0..2 {
        let (l, u) = K::zipped::<V0, V1>(qp, h);
        for k in 0..2 {
            let r = 2 * h + k;
            for j in 0..N / 2 {
                m[0][j][r] = smmla(m[0][j][r], l[k], a[j][p]);
                m[hp][j][r] = smmla(m[hp][j][r], u[k], a[j][2 + p]);
            }
        }
    }
}

/// i8mm: tokens in pairs, 16 `smmla` per pair and block (a 2-row x 8-byte by 8-byte x
/// 2-token tile each; half the `sdot` count). An odd last token goes through
/// [`sums_dotprod`].
///
/// # Safety
/// NEON + dotprod + i8mm; `qp` valid for one record of `K`, each `ap[t]` for 32 bytes.
#[inline(always)]
pub unsafe fn sums_i8mm<K: Codes, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    ap: &[*const i8; N],
) -> Sums<N> {
    let z = vdupq_n_s32(0);
    let mut out = [[[z; 2]; N]; 2];
    if N >= 2 {
        // Pair j covers tokens 2j, 2j+1 (only j < N/2 used).
        let mut a = [[vdupq_n_s8(0); 4]; N];
        for j in 0..N / 2 {
            a[j] = act_pair(ap[2 * j], ap[2 * j + 1]);
        }
        let mut m = [[[z; 4]; N]; 2];
        step_i8mm::<K, 0, 1, N, SPLIT>(qp, &a, &mut m);
        step_i8mm::<K, 2, 3, N, SPLIT>(qp, &a, &mut m);
        for part in 0..2 {
            for j in 0..N / 2 {
                let (x, y) = untile(&m[part][j]);
                out[part][2 * j] = x;
                out[part][2 * j + 1] = y;
            }
        }
    }
    if N % 2 == 1 {
        let last = sums_dotprod::<K, 1, SPLIT>(qp, &[ap[N - 1]]);
        out[0][N - 1] = last[0][0];
        out[1][N - 1] = last[1][0];
    }
    out
}
