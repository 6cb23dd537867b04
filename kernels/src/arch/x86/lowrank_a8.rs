//! AVX2 and AVX-512 bodies of the int8 `A` product ([`crate::ops::lowrank_a8`]), with
//! their safe wrapper. A code widens to f32 exactly (`vpmovsxbd`, `vcvtdq2ps`); the 16
//! partial sums are the reference's lanes (two `ymm` on AVX2, one `zmm` on AVX-512), each
//! block's two products added, scaled and accumulated with multiplies and adds apart (no
//! FMA), the lanes then summed in order: bit-identical to `row_ref` per row.

use super::ops::Simd;
use crate::ops::lowrank_a8::{tail, A8, BLOCK};
use crate::Isa;
use std::arch::x86_64::*;

/// `mid[j] = (A x)[rows.start + j]` (the caller checked the shapes). Runs the AVX-512
/// body on that level, the AVX2 one otherwise.
pub fn rows(_: Simd, isa: Isa, a: &A8, rows: std::ops::Range<usize>, x: &[f32], mid: &mut [f32]) {
    let (n_in, nb) = (a.n_in, a.blocks());
    assert!(
        x.len() == n_in
            && rows.end <= a.rank
            && a.q.len() >= a.rank * n_in
            && a.d.len() >= a.rank * nb
            && mid.len() == rows.len()
    );
    let whole = n_in / BLOCK;
    let wide = isa == Isa::Avx512Vnni && isa.is_available();
    let sum = |acc: &[f32; 16], r: usize| {
        let mut s = 0f32;
        for v in acc {
            s += v;
        }
        s + tail(a, r, x)
    };
    let (mut rows, mut mid) = (rows, mid);
    if wide {
        // Four rows at a time on AVX-512: four independent sums (one row's is a chain of
        // dependent adds, a block each), the same arithmetic per row.
        while rows.len() >= 4 {
            let r = rows.start;
            let mut acc = [[0f32; 16]; 4];
            // SAFETY: the AVX-512 level (checked above); rows r .. r + 4 <= rank hold
            // `n_in` codes each from `r·n_in` and `nb` scales each from `r·nb`, of which
            // the body reads the `whole` full blocks; `x` holds `n_in >= 32·whole` values.
            unsafe {
                let (q, d) = (a.q.as_ptr().add(r * n_in), a.d.as_ptr().add(r * nb));
                rows4_avx512(q, d, (n_in, nb), x.as_ptr(), whole, &mut acc);
            }
            for (i, acc) in acc.iter().enumerate() {
                mid[i] = sum(acc, r + i);
            }
            rows.start += 4;
            mid = &mut std::mem::take(&mut mid)[4..];
        }
    }
    for (r, m) in rows.zip(mid.iter_mut()) {
        let mut acc = [0f32; 16];
        // SAFETY: the token proves AVX2 (`wide`: the AVX-512 level, checked above); row
        // `r < rank` holds `n_in` codes from `r·n_in` and `nb` scales from `r·nb`, of which
        // the bodies read the `whole` full blocks; `x` holds `n_in >= 32·whole` values.
        unsafe {
            let (q, d) = (a.q.as_ptr().add(r * n_in), a.d.as_ptr().add(r * nb));
            if wide {
                row_avx512(q, d, x.as_ptr(), whole, &mut acc);
            } else {
                row_avx2(q, d, x.as_ptr(), whole, &mut acc);
            }
        }
        *m = sum(&acc, r);
    }
}

/// 8 codes at `p` as f32.
///
/// # Safety
/// AVX2 available; `p` readable for 8 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn code8(p: *const i8) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
}

/// 16 codes at `p` as f32.
///
/// # Safety
/// AVX-512 F available; `p` readable for 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn code16(p: *const i8) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p as *const __m128i)))
}

/// The 16 lane sums of `blocks` whole blocks on AVX2 (lanes 0-7 and 8-15 in two `ymm`).
///
/// # Safety
/// AVX2, FMA and F16C available; `q` and `x` readable for `32·blocks` elements, `d` for
/// `blocks`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_avx2(q: *const i8, d: *const f32, x: *const f32, blocks: usize, acc: &mut [f32; 16]) {
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for b in 0..blocks {
        let (qb, xb) = (q.add(b * BLOCK), x.add(b * BLOCK));
        if b % 2 == 0 {
            // A decode step reads `A` once, from DRAM: one line (two blocks of codes)
            // requested `PREFETCH_BYTES` ahead per line read, as the gemv does.
            super::prefetch_ahead(qb as *const u8, 1);
        }
        let dv = _mm256_set1_ps(*d.add(b));
        let t0 = _mm256_add_ps(
            _mm256_mul_ps(code8(qb), _mm256_loadu_ps(xb)),
            _mm256_mul_ps(code8(qb.add(16)), _mm256_loadu_ps(xb.add(16))),
        );
        let t1 = _mm256_add_ps(
            _mm256_mul_ps(code8(qb.add(8)), _mm256_loadu_ps(xb.add(8))),
            _mm256_mul_ps(code8(qb.add(24)), _mm256_loadu_ps(xb.add(24))),
        );
        lo = _mm256_add_ps(lo, _mm256_mul_ps(dv, t0));
        hi = _mm256_add_ps(hi, _mm256_mul_ps(dv, t1));
    }
    _mm256_storeu_ps(acc.as_mut_ptr(), lo);
    _mm256_storeu_ps(acc.as_mut_ptr().add(8), hi);
}

/// The 16 lane sums of `blocks` whole blocks on AVX-512 (one `zmm`).
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F available; memory as [`row_avx2`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn row_avx512(
    q: *const i8,
    d: *const f32,
    x: *const f32,
    blocks: usize,
    acc: &mut [f32; 16],
) {
    let mut s = _mm512_setzero_ps();
    for b in 0..blocks {
        let (qb, xb) = (q.add(b * BLOCK), x.add(b * BLOCK));
        if b % 2 == 0 {
            super::prefetch_ahead(qb as *const u8, 1);
        }
        let t = _mm512_add_ps(
            _mm512_mul_ps(code16(qb), _mm512_loadu_ps(xb)),
            _mm512_mul_ps(code16(qb.add(16)), _mm512_loadu_ps(xb.add(16))),
        );
        s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(*d.add(b)), t));
    }
    _mm512_storeu_ps(acc.as_mut_ptr(), s);
}

/// [`row_avx512`] for four consecutive rows, interleaved (four independent sums): row `i`'s
/// codes at `q + i·stride.0`, its scales at `d + i·stride.1`.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F available; each of the four rows readable as in
/// [`row_avx2`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn rows4_avx512(
    q: *const i8,
    d: *const f32,
    stride: (usize, usize),
    x: *const f32,
    blocks: usize,
    acc: &mut [[f32; 16]; 4],
) {
    let mut s = [_mm512_setzero_ps(); 4];
    for b in 0..blocks {
        let xb = x.add(b * BLOCK);
        let (x0, x1) = (_mm512_loadu_ps(xb), _mm512_loadu_ps(xb.add(16)));
        for (i, s) in s.iter_mut().enumerate() {
            let qb = q.add(i * stride.0 + b * BLOCK);
            if b % 2 == 0 {
                super::prefetch_ahead(qb as *const u8, 1);
            }
            let t = _mm512_add_ps(
                _mm512_mul_ps(code16(qb), x0),
                _mm512_mul_ps(code16(qb.add(16)), x1),
            );
            let dv = _mm512_set1_ps(*d.add(i * stride.1 + b));
            *s = _mm512_add_ps(*s, _mm512_mul_ps(dv, t));
        }
    }
    for (acc, s) in acc.iter_mut().zip(s) {
        _mm512_storeu_ps(acc.as_mut_ptr(), s);
    }
}
