//! Q5_K gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`: the Q5_0 record
//! decode of [`super::q5_0`] (nibbles + the 5th-bit plane, unsigned 5-bit codes into
//! `vpmaddubsw`; four vectors summed in int16, `<= 4·2·31·127 = 31496`) with the Q4_K
//! scale arithmetic of [`super::q4_k`]: the 6-bit sub-block scale widens the int16 sums
//! in `vpmaddwd` (exact int32 `sc·Σqa`), one FMA per sub-block applies `d·da`, one more
//! the min term `(dmin·m)·(da·Σa)` — the scalar reference's order, bit for bit.

use super::q4_0::act_ptrs;
use super::q5_0::fifth_bits;
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
    let mut ad = [&[][..]; N];
    let mut ads = [&[][..]; N];
    for t in 0..N {
        ad[t] = &act.row_d(t0 + t)[..nb];
        ads[t] = &act.row_ds(t0 + t)[..nb];
    }
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); N];
    for g in 0..ng {
        // SAFETY: g < ng: the 80 u16 (160 bytes) of group g are within `s` (checked).
        let grp = unsafe { s.as_ptr().add(g * spg) };
        let (dw, dmin) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(grp as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(grp.add(8) as *const __m128i)),
            )
        };
        let bytes = grp as *const u8;
        for j in 0..8 {
            let b = 8 * g + j;
            let qp = q.as_ptr().wrapping_add(b * 160);
            if N == 1 {
                // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
                unsafe { super::prefetch_ahead(qp, 3) };
            }
            // SAFETY: bytes 32..160 of the group hold sc[8][8] and m[8][8].
            let (sc, mf) = unsafe {
                (
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(bytes.add(32 + 8 * j) as *const __m128i)),
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        bytes.add(96 + 8 * j) as *const __m128i,
                    ))),
                )
            };
            // Each 32-bit lane: (sc, sc) as int16.
            let sc16 = _mm256_or_si256(sc, _mm256_slli_epi32::<16>(sc));
            let dm = _mm256_mul_ps(dmin, mf);
            // SAFETY: b < nb: the 160 bytes of block b are within `q` (checked).
            let h = unsafe { _mm256_loadu_si256(qp.add(128) as *const __m256i) };
            let mut p16 = [_mm256_setzero_si256(); N];
            for pair in 0..2 {
                // Decode vectors v = 2·pair, 2·pair+1 (shared by the N tokens).
                let mut lo = [_mm256_setzero_si256(); 2];
                let mut hi = [_mm256_setzero_si256(); 2];
                for u in 0..2 {
                    let v = 2 * pair + u;
                    // SAFETY: in bounds of block b's record.
                    let x = unsafe { _mm256_loadu_si256(qp.add(32 * v) as *const __m256i) };
                    let (h0, h1) = fifth_bits(h, v);
                    lo[u] = _mm256_or_si256(_mm256_and_si256(x, m4), h0);
                    hi[u] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m4), h1);
                }
                for t in 0..N {
                    // SAFETY: within the 32-byte activation block b of row t0+t.
                    let a = |o: usize| unsafe {
                        _mm256_set1_epi32((ap[t].add(o) as *const i32).read_unaligned())
                    };
                    let v = 2 * pair;
                    let p = _mm256_add_epi16(
                        _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo[0], a(4 * v)),
                            _mm256_maddubs_epi16(hi[0], a(16 + 4 * v)),
                        ),
                        _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo[1], a(4 * v + 4)),
                            _mm256_maddubs_epi16(hi[1], a(20 + 4 * v)),
                        ),
                    );
                    p16[t] = _mm256_add_epi32(p16[t], _mm256_madd_epi16(p, sc16));
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
