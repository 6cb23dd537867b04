//! Q4_1 gemv/gemm tiles: `Σ(q·dw + m)(a·da) = dw·da·Σqa + m·(da·Σa)`; the nibble core is
//! `super::q4_0::block_sums`. Scales per (panel, group): `[d; 8] ++ [m; 8]` fp16.
//! [`tile_x64`] reads the merged layout with one `(d, m)` per 64-group.

use super::q4_0::{bcast_f, block_p16_il, block_sums};
use crate::arch::TileRows;
use crate::matmul::{QuantizedActivation, QK};
use std::arch::x86_64::*;

/// The 8 row outputs of one Q4_1 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], mut r: TileRows<N>) -> [__m256; N] {
    let nb = r.nb;
    assert!(q.len() >= nb * 128 && s.len() >= nb * 16);
    let ads = r.per_token(QuantizedActivation::row_ds);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        if N == 1 {
            // gemv streams the weights from DRAM: keep the loads ahead of the math.
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(q.as_ptr().wrapping_add(b * 128), 2) };
        }
        // SAFETY: b < nb: block b's codes/scales/activations are in bounds (checked above).
        unsafe {
            let sums = block_sums::<N>(q.as_ptr().add(b * 128), &r.ap);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 16) as *const __m128i));
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 16 + 8) as *const __m128i));
            super::scale_add(&mut acc, dw, &r, b, &sums);
            for t in 0..N {
                acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ads[t][b]), acc[t]);
            }
        }
        r.advance();
    }
    acc
}

/// The 8 row outputs of one merged-Q4_1 ([`crate::matmul::Layout::Q4_1x64`]) panel.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked; the block count is even.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile_x64<const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [__m256; N] {
    let TileRows { nb, mut ap, ad, .. } = r;
    let ng = nb / 2;
    assert!(nb % 2 == 0 && q.len() >= nb * 128 && s.len() >= ng * 16);
    let ads = r.per_token(QuantizedActivation::row_ds);
    let mut acc = [_mm256_setzero_ps(); N];
    for g in 0..ng {
        let (b0, b1) = (2 * g, 2 * g + 1);
        if N == 1 {
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(q.as_ptr().wrapping_add(b0 * 128), 4) };
        }
        // SAFETY: b1 < nb: both blocks' codes/activations and group g's scales are in
        // bounds (checked above).
        let (dw, mw) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(g * 16) as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(g * 16 + 8) as *const __m128i)),
            )
        };
        let s0 = unsafe { block_sums::<N>(q.as_ptr().add(b0 * 128), &ap) };
        let mut ap1 = ap;
        for p in ap1.iter_mut() {
            // SAFETY: block b1 of the activation row is in bounds.
            *p = unsafe { p.add(QK) };
        }
        // SAFETY: as above.
        let s1 = unsafe { block_sums::<N>(q.as_ptr().add(b1 * 128), &ap1) };
        for t in 0..N {
            let tmp = _mm256_mul_ps(_mm256_cvtepi32_ps(s0[t]), _mm256_set1_ps(ad[t][b0]));
            let tmp = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[t]), _mm256_set1_ps(ad[t][b1]), tmp);
            acc[t] = _mm256_fmadd_ps(tmp, dw, acc[t]);
            acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ads[t][b0] + ads[t][b1]), acc[t]);
            // SAFETY: stays within (or one past) the activation row.
            ap[t] = unsafe { ap[t].add(2 * QK) };
        }
    }
    acc
}

/// [`tile`] on an interleaved activation tile (`a`: `nb` records of `52·N` bytes, see
/// [`super::interleave`]); same arithmetic, same order.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile_il<const N: usize>(q: &[u8], s: &[u16], a: &[u8], nb: usize) -> [__m256; N] {
    let rec = N * super::IL_REC;
    assert!(q.len() >= nb * 128 && s.len() >= nb * 16 && a.len() >= nb * rec);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..nb {
        // SAFETY: block b's codes, 16 scales and record are in bounds (checked above).
        unsafe {
            let p16 = block_p16_il::<N>(qp, ap);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(sp.add(8) as *const __m128i));
            for t in 0..N {
                let sums = _mm256_madd_epi16(p16[t], ones);
                let sc = _mm256_mul_ps(dw, bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(sums), acc[t]);
                acc[t] = _mm256_fmadd_ps(mw, bcast_f(ap.add(40 * N + 4 * t)), acc[t]);
            }
        }
        // Advance to block b+1 (one past the end after the last: never dereferenced).
        qp = qp.wrapping_add(128);
        sp = sp.wrapping_add(16);
        ap = ap.wrapping_add(rec);
    }
    acc
}

/// [`tile_x64`] on an interleaved activation tile; same arithmetic, same order.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked; the block count is even.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile_x64_il<const N: usize>(q: &[u8], s: &[u16], a: &[u8], nb: usize) -> [__m256; N] {
    let rec = N * super::IL_REC;
    let ng = nb / 2;
    assert!(
        nb.is_multiple_of(2) && q.len() >= nb * 128 && s.len() >= ng * 16 && a.len() >= nb * rec
    );
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..ng {
        // SAFETY: both blocks' codes and records and the group's 16 scales are in bounds
        // (checked above; the pointers are at block 2g).
        unsafe {
            // Block 2g first, kept as one float vector per token (`Σqa·da`), so that
            // block 2g+1's sums need no extra registers.
            let p0 = block_p16_il::<N>(qp, ap);
            let mut tmp = [_mm256_setzero_ps(); N];
            for t in 0..N {
                let s0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(p0[t], ones));
                tmp[t] = _mm256_mul_ps(s0, bcast_f(ap.add(32 * N + 4 * t)));
            }
            let (q1, a1) = (qp.add(128), ap.add(rec));
            let p1 = block_p16_il::<N>(q1, a1);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(sp.add(8) as *const __m128i));
            for t in 0..N {
                let s1 = _mm256_cvtepi32_ps(_mm256_madd_epi16(p1[t], ones));
                let tm = _mm256_fmadd_ps(s1, bcast_f(a1.add(32 * N + 4 * t)), tmp[t]);
                acc[t] = _mm256_fmadd_ps(tm, dw, acc[t]);
                // `ads[b0] + ads[b1]` as the scalar path adds them.
                let ds = (ap.add(40 * N + 4 * t) as *const f32).read_unaligned()
                    + (a1.add(40 * N + 4 * t) as *const f32).read_unaligned();
                acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ds), acc[t]);
            }
        }
        qp = qp.wrapping_add(256);
        sp = sp.wrapping_add(16);
        ap = ap.wrapping_add(2 * rec);
    }
    acc
}
