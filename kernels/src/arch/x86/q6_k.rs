//! Q6_K gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`. Per 32-block: the
//! 6-bit codes are rebuilt from the nibble record and the two 2-bit planes (shift + mask +
//! or, shared by the N tokens), multiplied unsigned (0..=63) by the int8 activation with
//! `vpmaddubsw` (pairs `<= 2·63·127`, so at most two vectors are summed in int16), widened
//! by `vpmaddwd` with the per-16 sub-block scale (low nibbles = sub-block `2j`, high =
//! `2j+1`), and the `−32` offset subtracted exactly as `32·(sc_lo·S_lo + sc_hi·S_hi)` with
//! one more `vpmaddwd` against the activation's half-block sums. One FMA per block.

use crate::arch::TileRows;
use crate::matmul::{Layout, QuantizedActivation};
use std::arch::x86_64::*;

/// Moves bits `2v..2v+2` of every byte of `h` to bits 4..6 (other bits garbage).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn plane_bits(h: __m256i, v: usize) -> __m256i {
    match v {
        0 => _mm256_slli_epi16::<4>(h),
        1 => _mm256_slli_epi16::<2>(h),
        2 => h,
        _ => _mm256_srli_epi16::<2>(h),
    }
}

/// The 8 row outputs of one Q6_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], mut r: TileRows<N>) -> [__m256; N] {
    let (ng, spg) = r.k_groups(Layout::Q6_K, q, 192, s);
    let s16 = r.per_token(QuantizedActivation::row_sum16);
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let dup_lo = _mm256_setr_epi8(
        0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12,
        13, 12, 13,
    );
    let dup_hi = _mm256_setr_epi8(
        2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10,
        11, 14, 15, 14, 15,
    );
    let mut acc = [_mm256_setzero_ps(); N];
    for g in 0..ng {
        // SAFETY: g < ng: the 72 u16 (144 bytes) of group g are within `s` (checked).
        let grp = unsafe { s.as_ptr().add(g * spg) };
        let dw = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(grp as *const __m128i)) };
        let bytes = grp as *const u8;
        for j in 0..8 {
            let b = 8 * g + j;
            let qp = q.as_ptr().wrapping_add(b * 192);
            if N == 1 {
                // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
                unsafe { super::prefetch_ahead(qp, 3) };
            }
            // Lane i: (sc_lo, sc_hi) of row i as int16.
            // SAFETY: bytes 16 + 16j .. +16 of the group are in bounds.
            let scp = unsafe {
                _mm256_cvtepi8_epi16(_mm_loadu_si128(bytes.add(16 + 16 * j) as *const __m128i))
            };
            let sclo = _mm256_shuffle_epi8(scp, dup_lo);
            let schi = _mm256_shuffle_epi8(scp, dup_hi);
            // SAFETY: b < nb: the 192 bytes of block b are within `q` (checked).
            let (hl, hh) = unsafe {
                (
                    _mm256_loadu_si256(qp.add(128) as *const __m256i),
                    _mm256_loadu_si256(qp.add(160) as *const __m256i),
                )
            };
            let mut i32s = [_mm256_setzero_si256(); N];
            for pair in 0..2 {
                // Decode vectors v = 2·pair, 2·pair+1 (shared by the N tokens).
                let mut lo = [_mm256_setzero_si256(); 2];
                let mut hi = [_mm256_setzero_si256(); 2];
                for u in 0..2 {
                    let v = 2 * pair + u;
                    // SAFETY: in bounds of block b's record.
                    let x = unsafe { _mm256_loadu_si256(qp.add(32 * v) as *const __m256i) };
                    lo[u] = _mm256_or_si256(
                        _mm256_and_si256(x, m4),
                        _mm256_and_si256(plane_bits(hl, v), m30),
                    );
                    hi[u] = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4),
                        _mm256_and_si256(plane_bits(hh, v), m30),
                    );
                }
                for t in 0..N {
                    // SAFETY: within the 32-byte activation block b of row t0+t.
                    let a = |o: usize| unsafe {
                        _mm256_set1_epi32((r.ap[t].add(o) as *const i32).read_unaligned())
                    };
                    let v = 2 * pair;
                    let pl = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo[0], a(4 * v)),
                        _mm256_maddubs_epi16(lo[1], a(4 * v + 4)),
                    );
                    let ph = _mm256_add_epi16(
                        _mm256_maddubs_epi16(hi[0], a(16 + 4 * v)),
                        _mm256_maddubs_epi16(hi[1], a(20 + 4 * v)),
                    );
                    let l = _mm256_madd_epi16(pl, sclo);
                    let h = _mm256_madd_epi16(ph, schi);
                    i32s[t] = _mm256_add_epi32(i32s[t], _mm256_add_epi32(l, h));
                }
            }
            // Minus 32·sc·Σa per sub-block half: the `-32` offset of the codes.
            let i: [__m256i; N] = std::array::from_fn(|t| {
                let off = _mm256_madd_epi16(scp, _mm256_set1_epi32(s16[t][b]));
                _mm256_sub_epi32(i32s[t], _mm256_slli_epi32::<5>(off))
            });
            // SAFETY: b < nb.
            unsafe { super::scale_add(&mut acc, dw, &r, b, &i) };
            r.advance();
        }
    }
    acc
}
