//! F16 x f32 gemv/gemm tiles on the packed F16 layout (`matmul/packed.rs`): per column,
//! `fcvtl`/`fcvtl2` ([`f16x8`]) widen the 8 rows' weights and one `fmla` per row half and
//! token multiplies them by the activation value (by element from a register of 4
//! activation values). Two accumulators per token (even / odd columns, added at the end)
//! as the scalar reference, so the result is bit-identical to it.

use super::{f16x8, F32x8};
use crate::matmul::{QuantizedActivation, QK};
use std::arch::aarch64::*;

/// Columns `e0 + 2J`, `e0 + 2J + 1` (lanes `2J`, `2J+1` of the activation register `xv`).
///
/// # Safety
/// NEON; `qp` valid for the 512 bytes of a block, `e0 + 2J + 1 < 32`.
#[inline(always)]
unsafe fn step<const J: i32, const N: usize>(
    qp: *const u8,
    e0: usize,
    xv: &[float32x4_t; N],
    acc: &mut [[F32x8; 2]; N],
) {
    let e = e0 + 2 * J as usize;
    let w0 = f16x8(qp.add(16 * e) as *const u16);
    let w1 = f16x8(qp.add(16 * e + 16) as *const u16);
    for t in 0..N {
        for h in 0..2 {
            acc[t][0][h] = match J {
                0 => vfmaq_laneq_f32::<0>(acc[t][0][h], w0[h], xv[t]),
                _ => vfmaq_laneq_f32::<2>(acc[t][0][h], w0[h], xv[t]),
            };
            acc[t][1][h] = match J {
                0 => vfmaq_laneq_f32::<1>(acc[t][1][h], w1[h], xv[t]),
                _ => vfmaq_laneq_f32::<3>(acc[t][1][h], w1[h], xv[t]),
            };
        }
    }
}

/// The 8 row outputs of one F16 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// NEON. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<const N: usize>(q: &[u8], act: &QuantizedActivation, t0: usize) -> [F32x8; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 512 && t0 + N <= act.rows());
    let mut x = [std::ptr::null(); N];
    for t in 0..N {
        x[t] = act.row_f32(t0 + t)[..nb * QK].as_ptr();
    }
    let z = vdupq_n_f32(0.0);
    let mut acc = [[[z; 2]; 2]; N];
    for b in 0..nb {
        // b < nb: block b's 512 bytes and each row's 32 values are in bounds (checked).
        let qp = q.as_ptr().add(b * 512);
        for e0 in (0..QK).step_by(4) {
            let mut xv = [z; N];
            for t in 0..N {
                xv[t] = vld1q_f32(x[t].add(b * QK + e0));
            }
            step::<0, N>(qp, e0, &xv, &mut acc);
            step::<1, N>(qp, e0, &xv, &mut acc);
        }
    }
    let mut out = [[z; 2]; N];
    for t in 0..N {
        for h in 0..2 {
            out[t][h] = vaddq_f32(acc[t][0][h], acc[t][1][h]);
        }
    }
    out
}
