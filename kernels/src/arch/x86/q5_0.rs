//! Q5_0 gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`: the Q4_0 nibble
//! record plus one 32-byte plane of 5th bits per 32-block, merged in registers (shift +
//! mask + or, shared by the N tokens) into unsigned 5-bit codes for `vpmaddubsw` (pairs
//! `<= 2·31·127`: four vectors summed in int16, then widened). The `−16` is folded
//! exactly as `Σqa − 16·Σa` in int32; one FMA per block for 8 rows.

use super::q4_0::act_ptrs;
use crate::matmul::{QuantizedActivation, QK};
use std::arch::x86_64::*;

/// Bit 4 of every byte: lo = bit `v` of `h`, hi = bit `4+v`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fifth_bits(h: __m256i, v: usize) -> (__m256i, __m256i) {
    let m10 = _mm256_set1_epi8(0x10);
    let (lo, hi) = match v {
        0 => (_mm256_slli_epi16::<4>(h), h),
        1 => (_mm256_slli_epi16::<3>(h), _mm256_srli_epi16::<1>(h)),
        2 => (_mm256_slli_epi16::<2>(h), _mm256_srli_epi16::<2>(h)),
        _ => (_mm256_slli_epi16::<1>(h), _mm256_srli_epi16::<3>(h)),
    };
    (_mm256_and_si256(lo, m10), _mm256_and_si256(hi, m10))
}

/// Vectors `2·pair`, `2·pair+1` of a Q5 record (Q5_0, Q5_K) decoded into unsigned 5-bit
/// codes (shared by the N tokens) and multiplied with each token's activation by
/// `vpmaddubsw`: per token the int16 pair sums of the 4 products (`<= 4·2·31·127`).
///
/// # Safety
/// CPU supports AVX2; `qp` valid for the 160-byte record whose plane is `h`, each `ap[t]`
/// for 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn pair_p16<const N: usize>(
    qp: *const u8,
    h: __m256i,
    pair: usize,
    ap: &[*const i8; N],
) -> [__m256i; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut lo = [_mm256_setzero_si256(); 2];
    let mut hi = [_mm256_setzero_si256(); 2];
    for u in 0..2 {
        let v = 2 * pair + u;
        // SAFETY: in bounds of the record (contract).
        let x = unsafe { _mm256_loadu_si256(qp.add(32 * v) as *const __m256i) };
        let (h0, h1) = fifth_bits(h, v);
        lo[u] = _mm256_or_si256(_mm256_and_si256(x, m4), h0);
        hi[u] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m4), h1);
    }
    let mut p = [_mm256_setzero_si256(); N];
    for t in 0..N {
        // SAFETY: within the 32-byte activation block of token t (contract).
        let a =
            |o: usize| unsafe { _mm256_set1_epi32((ap[t].add(o) as *const i32).read_unaligned()) };
        let v = 2 * pair;
        p[t] = _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(lo[0], a(4 * v)),
                _mm256_maddubs_epi16(hi[0], a(16 + 4 * v)),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(lo[1], a(4 * v + 4)),
                _mm256_maddubs_epi16(hi[1], a(20 + 4 * v)),
            ),
        );
    }
    p
}

/// The 8 row outputs of one Q5_0 panel for activation rows `t0..t0+N`.
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
    assert!(q.len() >= nb * 160 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let mut ad = [&[][..]; N];
    let mut asum = [&[][..]; N];
    for t in 0..N {
        ad[t] = &act.row_d(t0 + t)[..nb];
        asum[t] = &act.row_sum8(t0 + t)[..nb];
    }
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let qp = q.as_ptr().wrapping_add(b * 160);
        if N == 1 {
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(qp, 3) };
        }
        // SAFETY: b < nb: the 160 bytes of block b are within `q` (checked).
        let h = unsafe { _mm256_loadu_si256(qp.add(128) as *const __m256i) };
        let mut i32s = [_mm256_setzero_si256(); N];
        for pair in 0..2 {
            // SAFETY: qp points at block b's 160-byte record, ap[t] at its activations.
            let p = unsafe { pair_p16::<N>(qp, h, pair, &ap) };
            for t in 0..N {
                i32s[t] = _mm256_add_epi32(i32s[t], _mm256_madd_epi16(p[t], ones));
            }
        }
        // SAFETY: block b's 8 scales are within `s` (checked).
        let dw =
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 8) as *const __m128i)) };
        for t in 0..N {
            // 16·Σa = 2·(8·Σa).
            let i = _mm256_sub_epi32(i32s[t], _mm256_set1_epi32(2 * asum[t][b]));
            let sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b]));
            acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i), acc[t]);
            // SAFETY: stays within (or one past) the activation row.
            ap[t] = unsafe { ap[t].add(QK) };
        }
    }
    acc
}
