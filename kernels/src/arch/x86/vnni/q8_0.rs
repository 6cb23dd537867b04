//! Q8_0 tiles on interleaved activation records with `vpdpbusd`. The weights are signed and
//! `vpdpbusd` multiplies unsigned by signed bytes, so each weight vector is flipped to
//! `w + 128` (`xor 0x80`, once per vector for all N tokens) and the excess `128·Σa` is taken
//! off with the record's `8·Σa`: `Σ(w+128)·a - 16·(8·Σa) = Σw·a`, exact in int32
//! (`|Σ| <= 32·255·128`). Vectors `g` and `g+4` of a block meet token `t`'s 8 bytes at
//! `record + 8Ng + 8t` ([`super::super::interleave`]).

use super::q4::bcast;
use super::Dp;
use crate::arch::x86::q4_0::bcast_f;
use crate::arch::x86::IL_REC;
use std::arch::x86_64::*;

/// The 8 row outputs of one Q8_0 panel for the N tokens of an interleaved tile: per block
/// `(dw·da)·Σwa`, the float operations of the AVX2 tiles.
///
/// # Safety
/// Runs inside `D`'s `#[target_feature]` root ([`super::Dp::drive`]): the CPU has AVX2,
/// FMA, F16C and `D`'s VNNI. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile_il<D: Dp, const N: usize>(
    q: &[u8],
    s: &[u16],
    a: &[u8],
    nb: usize,
) -> [__m256; N] {
    let rec = N * IL_REC;
    assert!(q.len() >= nb * 256 && s.len() >= nb * 8 && a.len() >= nb * rec);
    let flip = _mm256_set1_epi8(-128);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..nb {
        // SAFETY: block b's 256 code bytes, 8 scales and record are in bounds (checked
        // above; the pointers are at block b).
        unsafe {
            let mut lo = [_mm256_setzero_si256(); N];
            let mut hi = [_mm256_setzero_si256(); N];
            for g in 0..4 {
                let x0 =
                    _mm256_xor_si256(_mm256_loadu_si256(qp.add(32 * g) as *const __m256i), flip);
                let x1 = _mm256_xor_si256(
                    _mm256_loadu_si256(qp.add(128 + 32 * g) as *const __m256i),
                    flip,
                );
                for t in 0..N {
                    let o = ap.add(8 * N * g + 8 * t);
                    lo[t] = D::dpbusd(lo[t], x0, bcast(o));
                    hi[t] = D::dpbusd(hi[t], x1, bcast(o.add(4)));
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            for t in 0..N {
                let sum8 = _mm256_slli_epi32::<4>(bcast(ap.add(36 * N + 4 * t)));
                let i = _mm256_sub_epi32(_mm256_add_epi32(lo[t], hi[t]), sum8);
                let sc = _mm256_mul_ps(dw, bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i), acc[t]);
            }
        }
        qp = qp.wrapping_add(256);
        sp = sp.wrapping_add(8);
        ap = ap.wrapping_add(rec);
    }
    acc
}
