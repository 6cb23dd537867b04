//! F16 x f32 gemv/gemm tiles on the packed F16 layout (`matmul/packed.rs`): per column,
//! one `vcvtph2ps` widens the 8 rows' weights and one FMA per token multiplies them by
//! the broadcast activation value. Two accumulators per token (even / odd columns, added
//! at the end) as the scalar reference, so the result is bit-identical to it.

use crate::matmul::{QuantizedActivation, QK};
use std::arch::x86_64::*;

/// The 8 row outputs of one F16 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], act: &QuantizedActivation, t0: usize) -> [__m256; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 512 && t0 + N <= act.rows());
    let mut x = [&[][..]; N];
    for t in 0..N {
        x[t] = &act.row_f32(t0 + t)[..nb * QK];
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; N];
    for b in 0..nb {
        let qp = q.as_ptr().wrapping_add(b * 512);
        if N == 1 {
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(qp, 8) };
        }
        for e in (0..QK).step_by(2) {
            // SAFETY: b < nb: columns e, e+1 of block b (32 bytes) are within `q` (checked).
            let (w0, w1) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(qp.add(16 * e) as *const __m128i)),
                    _mm256_cvtph_ps(_mm_loadu_si128(qp.add(16 * e + 16) as *const __m128i)),
                )
            };
            for t in 0..N {
                let c = b * QK + e;
                acc[t][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[t][c]), acc[t][0]);
                acc[t][1] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[t][c + 1]), acc[t][1]);
            }
        }
    }
    let mut out = [_mm256_setzero_ps(); N];
    for t in 0..N {
        out[t] = _mm256_add_ps(acc[t][0], acc[t][1]);
    }
    out
}
