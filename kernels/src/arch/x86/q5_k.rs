//! Q5_K gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`: the Q5_0 record
//! decode of [`super::q5_0::pair_p16`] (nibbles + the 5th-bit plane, unsigned 5-bit codes into
//! `vpmaddubsw`; four vectors summed in int16, `<= 4·2·31·127 = 31496`) with the Q4_K
//! scale arithmetic of [`super::q4_k`]: the 6-bit sub-block scale widens the int16 sums
//! in `vpmaddwd` (exact int32 `sc·Σqa`), one FMA per sub-block applies `d·da`, one more
//! the min term `(dmin·m)·(da·Σa)` — the scalar reference's order, bit for bit.

use super::q4_k::{group_d_dmin, sub_scales};
use super::q5_0::pair_p16;
use crate::arch::{act_ptrs, per_token};
use crate::matmul::{Layout, QuantizedActivation, QK};
use std::arch::x86_64::*;

/// The 8 row outputs of one Q5_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(
    q: &[u8],
    s: &[u16],
    act: &QuantizedActivation,
    t0: usize,
) -> [__m256; N] {
    let nb = act.blocks();
    let ng = nb / 8;
    let spg = Layout::Q5_K.scales_per_group();
    assert!(nb % 8 == 0 && q.len() >= nb * 160 && s.len() >= ng * spg && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let ad = per_token::<_, N>(act, t0, nb, QuantizedActivation::row_d);
    let ads = per_token::<_, N>(act, t0, nb, QuantizedActivation::row_ds);
    let mut acc = [_mm256_setzero_ps(); N];
    for g in 0..ng {
        // SAFETY: g < ng: the 80 u16 (160 bytes) of group g are within `s` (checked).
        let grp = unsafe { s.as_ptr().add(g * spg) };
        let (dw, dmin) = unsafe { group_d_dmin(grp) };
        for j in 0..8 {
            let b = 8 * g + j;
            let qp = q.as_ptr().wrapping_add(b * 160);
            if N == 1 {
                // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
                unsafe { super::prefetch_ahead(qp, 3) };
            }
            // SAFETY: grp is group g's 160 bytes, j < 8.
            let (sc16, dm) = unsafe { sub_scales(grp, dmin, j) };
            // SAFETY: b < nb: the 160 bytes of block b are within `q` (checked).
            let h = unsafe { _mm256_loadu_si256(qp.add(128) as *const __m256i) };
            let mut p16 = [_mm256_setzero_si256(); N];
            for pair in 0..2 {
                // SAFETY: qp points at block b's record, ap[t] at its activations.
                let p = unsafe { pair_p16::<N>(qp, h, pair, &ap) };
                for t in 0..N {
                    p16[t] = _mm256_add_epi32(p16[t], _mm256_madd_epi16(p[t], sc16));
                }
            }
            for t in 0..N {
                let sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b]));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p16[t]), acc[t]);
                acc[t] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(ads[t][b]), acc[t]);
                // SAFETY: stays within (or one past) the activation row.
                ap[t] = unsafe { ap[t].add(QK) };
            }
        }
    }
    acc
}
