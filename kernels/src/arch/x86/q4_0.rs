//! Q4_0 gemv/gemm tiles (the nibble core is shared with Q4_1).
//!
//! Per (panel, block): 4 loads of 32 bytes; `x & 0xF` holds elements `4v..4v+4` of the 8
//! rows, `(x >> 4) & 0xF` elements `16+4v..`. `maddubs(nibbles, broadcast(a[4 bytes]))`
//! gives int16 pair sums `<= 2·15·127`; the 8 of a block sum to `<= 30480 < 2^15`, so they
//! are accumulated in int16 and widened once with `madd(·, 1)`. Q4_0's `-8` offset is
//! folded in exactly as `Σwq - 8·Σq` in int32.

use crate::matmul::{QuantizedActivation, QK};
use std::arch::x86_64::*;

/// `Σ nibble·q` per row (int32 lanes) of one packed Q4 block for N tokens.
///
/// # Safety
/// CPU supports AVX2; `qp` is valid for 128 bytes and every `ap[t]` for 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn block_sums<const N: usize>(
    qp: *const u8,
    ap: &[*const i8; N],
) -> [__m256i; N] {
    // SAFETY: same contract.
    let p16 = unsafe { block_p16::<N>(qp, ap) };
    let ones = _mm256_set1_epi16(1);
    let mut r = [_mm256_setzero_si256(); N];
    for t in 0..N {
        r[t] = _mm256_madd_epi16(p16[t], ones);
    }
    r
}

/// The int16 pair sums of [`block_sums`] before widening (each lane: two int16 of one
/// row, `|·| <= 30480`), for kernels that widen with a per-row scale (`vpmaddwd`).
///
/// # Safety
/// As [`block_sums`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn block_p16<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [__m256i; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut p16 = [_mm256_setzero_si256(); N];
    for v in 0..4 {
        // SAFETY: in bounds of the 128-byte block (contract).
        let x = unsafe { _mm256_loadu_si256(qp.add(32 * v) as *const __m256i) };
        let lo = _mm256_and_si256(x, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
        for t in 0..N {
            // SAFETY: in bounds of the 32-byte activation block (contract).
            let (alo, ahi) = unsafe {
                (
                    (ap[t].add(4 * v) as *const i32).read_unaligned(),
                    (ap[t].add(16 + 4 * v) as *const i32).read_unaligned(),
                )
            };
            let s = _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, _mm256_set1_epi32(alo)),
                _mm256_maddubs_epi16(hi, _mm256_set1_epi32(ahi)),
            );
            p16[t] = _mm256_add_epi16(p16[t], s);
        }
    }
    p16
}

/// Pointers to the codes of activation rows `t0..t0+N` (checked in bounds).
pub(super) fn act_ptrs<const N: usize>(act: &QuantizedActivation, t0: usize) -> [*const i8; N] {
    let mut ap = [std::ptr::null(); N];
    for (t, p) in ap.iter_mut().enumerate() {
        *p = act.row_qs(t0 + t).as_ptr();
    }
    ap
}

/// The 8 row outputs of one Q4_0 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked: `q` must hold `blocks·128` bytes,
/// `s` `blocks·8` scales, `act` rows `t0..t0+N`.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(
    q: &[u8],
    s: &[u16],
    act: &QuantizedActivation,
    t0: usize,
) -> [__m256; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 128 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let mut ad = [&[][..]; N];
    let mut asum = [&[][..]; N];
    for t in 0..N {
        ad[t] = &act.row_d(t0 + t)[..nb];
        asum[t] = &act.row_sum8(t0 + t)[..nb];
    }
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        if N == 1 {
            // gemv streams the weights from DRAM: keep the loads ahead of the math.
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(q.as_ptr().wrapping_add(b * 128), 2) };
        }
        // SAFETY: b < nb, so the 128 code bytes and 8 scales of block b are within `q`, `s`
        // and the 32 codes of block b within each activation row (checked above).
        let (sums, dw) = unsafe {
            (
                block_sums::<N>(q.as_ptr().add(b * 128), &ap),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 8) as *const __m128i)),
            )
        };
        for t in 0..N {
            let i = _mm256_sub_epi32(sums[t], _mm256_set1_epi32(asum[t][b]));
            let sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b]));
            acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i), acc[t]);
            // SAFETY: stays within (or one past) the activation row.
            ap[t] = unsafe { ap[t].add(QK) };
        }
    }
    acc
}
