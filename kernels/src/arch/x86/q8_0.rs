//! Q8_0 gemv/gemm tiles. Signed x signed: `maddubs(|w|, sign(a, w))` (ggml's sign trick);
//! each product pair is `<= 2·128·127 = 32512`, so every group is widened to int32 with
//! `madd(·, 1)` before summing. `|w|` is computed once per weight vector and shared by the
//! N tokens.

use super::q4_0::act_ptrs;
use crate::matmul::{QuantizedActivation, QK};
use std::arch::x86_64::*;

/// The 8 row outputs of one Q8_0 panel for activation rows `t0..t0+N`.
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
    assert!(q.len() >= nb * 256 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let mut ad = [&[][..]; N];
    for t in 0..N {
        ad[t] = &act.row_d(t0 + t)[..nb];
    }
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        if N == 1 {
            // gemv streams the weights from DRAM: keep the loads ahead of the math.
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(q.as_ptr().wrapping_add(b * 256), 4) };
        }
        let mut i32s = [_mm256_setzero_si256(); N];
        for g in 0..8 {
            // SAFETY: b < nb: the 256 code bytes of block b are within `q` (checked).
            let x =
                unsafe { _mm256_loadu_si256(q.as_ptr().add(b * 256 + 32 * g) as *const __m256i) };
            let ax = _mm256_abs_epi8(x);
            for t in 0..N {
                // SAFETY: within the 32-byte activation block b of row t0+t.
                let a = unsafe { (ap[t].add(4 * g) as *const i32).read_unaligned() };
                let sa = _mm256_sign_epi8(_mm256_set1_epi32(a), x);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sa), ones);
                i32s[t] = _mm256_add_epi32(i32s[t], p);
            }
        }
        // SAFETY: block b's 8 scales are within `s` (checked).
        let dw =
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 8) as *const __m128i)) };
        for t in 0..N {
            let sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b]));
            acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i32s[t]), acc[t]);
            // SAFETY: stays within (or one past) the activation row.
            ap[t] = unsafe { ap[t].add(QK) };
        }
    }
    acc
}
