//! Q4_K gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`: each 32-element
//! sub-block is a Q4_0-style nibble record (core `super::q4_0::block_p16`); the 6-bit
//! sub-block scale widens the int16 pair sums in `vpmaddwd` (exact int32 `sc·Σqa`), one
//! FMA per sub-block applies the activation scale, one more the min term
//! `(dmin·m)·(da·Σa)`. (Accumulating per super-block and applying `d`, `dmin` once needs
//! two more accumulators per token: register spills in the 4-token gemm tile, ~10% slower.)

use super::q4_0::{bcast_f, block_p16, block_p16_il};
use crate::arch::TileRows;
use crate::matmul::{Layout, QuantizedActivation};
use std::arch::x86_64::*;

/// The super-block scales `d` and `dmin` of a Q4_K/Q5_K group's 8 rows (the first 16
/// fp16 of the group), as floats.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C; `grp` is valid for 16 u16.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn group_d_dmin(grp: *const u16) -> (__m256, __m256) {
    // SAFETY: contract.
    unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(grp as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(grp.add(8) as *const __m128i)),
        )
    }
}

/// Sub-block `j`'s scales in a Q4_K/Q5_K group (bytes 32..160 of the group hold sc[8][8]
/// and m[8][8]): `sc16`, each 32-bit lane the row's 6-bit scale as two int16 (the
/// `vpmaddwd` multiplier of its int16 pair sums), and `dmin·m` per row.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C; `grp` is valid for the group's 160 bytes; `j < 8`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn sub_scales(grp: *const u16, dmin: __m256, j: usize) -> (__m256i, __m256) {
    let bytes = grp as *const u8;
    // SAFETY: bytes 32 + 8j.. and 96 + 8j.. (8 each) are within the group (contract).
    let (sc, mf) = unsafe {
        (
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(bytes.add(32 + 8 * j) as *const __m128i)),
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                bytes.add(96 + 8 * j) as *const __m128i
            ))),
        )
    };
    let sc16 = _mm256_or_si256(sc, _mm256_slli_epi32::<16>(sc));
    (sc16, _mm256_mul_ps(dmin, mf))
}

/// The 8 row outputs of one Q4_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [__m256; N] {
    // SAFETY: CPU features as this fn's; the closure reads block b's 128 code bytes and
    // each row's 32 codes of it, where `tile_with` points `qp` and `ap` (in bounds).
    unsafe {
        tile_with::<N>(q, s, r, (Layout::Q4_K, 128, 2), |qp, ap, sc16| {
            block_p16::<N>(qp, ap).map(|p| _mm256_madd_epi16(p, sc16))
        })
    }
}

/// The Q4_K scale/min arithmetic shared with Q5_K, which differ only in their block
/// records (`qb` bytes each, `lines` cache lines prefetched ahead in gemv): per block,
/// `isum(qp, ap, sc16)` returns each token's exact int32 `sc·Σqa` for the 8 rows (`qp`:
/// the block's record, `ap[t]`: row t's 32 codes of it, `sc16`: the sub-block scales as
/// [`sub_scales`] gives them); one FMA applies `d·da`, one more the min term
/// `(dmin·m)·(da·Σa)`, in the scalar reference's order.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C; `isum` reads no more than the `qb` bytes at `qp` and the
/// 32 at each `ap[t]`. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn tile_with<const N: usize>(
    q: &[u8],
    s: &[u16],
    mut r: TileRows<N>,
    (layout, qb, lines): (Layout, usize, usize),
    isum: impl Fn(*const u8, &[*const i8; N], __m256i) -> [__m256i; N],
) -> [__m256; N] {
    let (ng, spg) = r.k_groups(layout, q, qb, s);
    let ads = r.per_token(QuantizedActivation::row_ds);
    let mut acc = [_mm256_setzero_ps(); N];
    for g in 0..ng {
        // SAFETY: g < ng: the 80 u16 (160 bytes) of group g are within `s` (checked).
        let grp = unsafe { s.as_ptr().add(g * spg) };
        let (dw, dmin) = unsafe { group_d_dmin(grp) };
        for j in 0..8 {
            let b = 8 * g + j;
            let qp = q.as_ptr().wrapping_add(b * qb);
            if N == 1 {
                // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
                unsafe { super::prefetch_ahead(qp, lines) };
            }
            // SAFETY: grp is group g's 160 bytes, j < 8; b < nb: block b's record and
            // each row's 32 codes of it are in bounds (checked).
            unsafe {
                let (sc16, dm) = sub_scales(grp, dmin, j);
                let i = isum(qp, &r.ap, sc16);
                super::scale_add(&mut acc, dw, &r, b, &i);
                for t in 0..N {
                    acc[t] = _mm256_fnmadd_ps(dm, _mm256_set1_ps(ads[t][b]), acc[t]);
                }
            }
            r.advance();
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
    let ng = nb / 8;
    let spg = Layout::Q4_K.scales_per_group();
    assert!(
        nb.is_multiple_of(8) && q.len() >= nb * 128 && s.len() >= ng * spg && a.len() >= nb * rec
    );
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap) = (q.as_ptr(), a.as_ptr());
    for g in 0..ng {
        // SAFETY: g < ng: the 80 u16 (160 bytes) of group g are within `s` (checked).
        let grp = unsafe { s.as_ptr().add(g * spg) };
        let (dw, dmin) = unsafe { group_d_dmin(grp) };
        for j in 0..8 {
            // SAFETY: block 8g+j's codes and record are in bounds (checked; the pointers
            // are at that block); grp is group g's 160 bytes, j < 8.
            unsafe {
                let p16 = block_p16_il::<N>(qp, ap);
                let (sc16, dm) = sub_scales(grp, dmin, j);
                for t in 0..N {
                    let isum = _mm256_madd_epi16(p16[t], sc16);
                    let sc = _mm256_mul_ps(dw, bcast_f(ap.add(32 * N + 4 * t)));
                    acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(isum), acc[t]);
                    acc[t] = _mm256_fnmadd_ps(dm, bcast_f(ap.add(40 * N + 4 * t)), acc[t]);
                }
            }
            qp = qp.wrapping_add(128);
            ap = ap.wrapping_add(rec);
        }
    }
    acc
}
