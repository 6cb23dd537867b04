//! AVX2 and AVX-512 bodies of the int8 `A` product ([`crate::ops::lowrank_a8`]), with
//! their safe wrapper: the rows of a panel together, a block of all of them at a time, so
//! the panel's codes are read front to back. A code widens to f32 exactly (`vpmovsxbd`, `vcvtdq2ps`); the 16
//! partial sums are the reference's lanes (two `ymm` on AVX2, one `zmm` on AVX-512), each
//! block's two products added, scaled and accumulated with multiplies and adds apart (no
//! FMA), the lanes then summed in order: bit-identical to `row_ref` per row.

use super::ops::Simd;
use crate::ops::lowrank_a8::{tail, A8, BLOCK};
use crate::Isa;
use std::arch::x86_64::*;

/// `mid[j] = (A x)[rows.start + j]` (the caller checked the shapes). Runs the rows of a
/// panel together, as many as the body holds in registers (AVX-512: 16, 8, 4 or 1 at a
/// time; AVX2: 4 or 1): one pass over the panel's blocks, one sum per row.
pub fn rows(_: Simd, isa: Isa, a: &A8, rows: std::ops::Range<usize>, x: &[f32], mid: &mut [f32]) {
    let nb = a.blocks();
    assert!(
        x.len() == a.n_in
            && rows.end <= a.rank
            && a.q.len() >= a.rank * nb * BLOCK
            && a.d.len() >= a.rank * nb
            && mid.len() == rows.len()
    );
    let whole = a.n_in / BLOCK;
    let wide = isa == Isa::Avx512Vnni && isa.is_available();
    let (mut r, mut mid) = (rows.start, mid);
    while r < rows.end {
        let at = a.at(r);
        let left = (at.height - at.row).min(rows.end - r);
        let n = match (wide, left) {
            (true, 16..) => 16,
            (true, 8..) => 8,
            (_, 4..) => 4,
            _ => 1,
        };
        let mut acc = [[0f32; 16]; 16];
        // SAFETY: `wide` is the AVX-512 level (checked above), the token proves AVX2; rows
        // `r .. r + n` lie in one panel (`n <= height - row`), whose block `b < whole <=
        // nb` holds the rows' codes at `code(0) + 32·(b·height + j)` and scales at
        // `scale(0) + b·height + j` inside `q` and `d` (their lengths checked above); `x`
        // holds `n_in >= 32·whole` values.
        unsafe {
            let body = Body {
                q: a.q.as_ptr().add(at.code(0)),
                d: a.d.as_ptr().add(at.scale(0)),
                x: x.as_ptr(),
                height: at.height,
                blocks: whole,
            };
            match (wide, n) {
                (true, 16) => panel_avx512::<16>(body, &mut acc),
                (true, 8) => panel_avx512::<8>(body, &mut acc),
                (true, 4) => panel_avx512::<4>(body, &mut acc),
                (true, _) => panel_avx512::<1>(body, &mut acc),
                (false, 4) => panel_avx2::<4>(body, &mut acc),
                (false, _) => panel_avx2::<1>(body, &mut acc),
            }
        }
        for (j, acc) in acc[..n].iter().enumerate() {
            let mut s = 0f32;
            for v in acc {
                s += v;
            }
            mid[j] = s + tail(a, r + j, x);
        }
        r += n;
        mid = &mut std::mem::take(&mut mid)[n..];
    }
}

/// The first of the rows a panel body runs: block `b` of row `j` has its 32 codes at `q +
/// 32·(b·height + j)`, its scale at `d + b·height + j`; `x` is the input; `blocks` whole
/// blocks.
#[derive(Clone, Copy)]
struct Body {
    q: *const i8,
    d: *const f32,
    x: *const f32,
    height: usize,
    blocks: usize,
}

impl Body {
    /// Block `b`'s first code, scale and input of the body's first row, with the `rows`
    /// rows' codes of the block `PREFETCH_BYTES` ahead requested (a decode step reads `A`
    /// once, from DRAM, and a panel's blocks follow each other).
    ///
    /// # Safety
    /// AVX2 available; `b < blocks`, the body's pointers valid as its callers state.
    #[inline(always)]
    unsafe fn block(&self, b: usize, rows: usize) -> (*const i8, *const f32, *const f32) {
        let qb = self.q.add(BLOCK * b * self.height);
        super::prefetch_ahead(qb as *const u8, (rows * BLOCK).div_ceil(64));
        (qb, self.d.add(b * self.height), self.x.add(b * BLOCK))
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

/// The 16 lane sums of `N` rows of a panel on AVX2 (lanes 0-7 and 8-15 of a row in two
/// `ymm`), each row's `t0`, `t1` as the reference pairs them.
///
/// # Safety
/// AVX2, FMA and F16C available; for `j < N` and `b < body.blocks`, `body.q` readable for
/// 32 codes from `32·(b·height + j)`, `body.d` at `b·height + j`; `body.x` for `32·blocks`
/// values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_avx2<const N: usize>(body: Body, acc: &mut [[f32; 16]; 16]) {
    let mut lo = [_mm256_setzero_ps(); N];
    let mut hi = [_mm256_setzero_ps(); N];
    for b in 0..body.blocks {
        let (qb, db, xb) = body.block(b, N);
        let x = [
            _mm256_loadu_ps(xb),
            _mm256_loadu_ps(xb.add(8)),
            _mm256_loadu_ps(xb.add(16)),
            _mm256_loadu_ps(xb.add(24)),
        ];
        for j in 0..N {
            let qj = qb.add(BLOCK * j);
            let dv = _mm256_set1_ps(*db.add(j));
            let t0 = _mm256_add_ps(
                _mm256_mul_ps(code8(qj), x[0]),
                _mm256_mul_ps(code8(qj.add(16)), x[2]),
            );
            let t1 = _mm256_add_ps(
                _mm256_mul_ps(code8(qj.add(8)), x[1]),
                _mm256_mul_ps(code8(qj.add(24)), x[3]),
            );
            lo[j] = _mm256_add_ps(lo[j], _mm256_mul_ps(dv, t0));
            hi[j] = _mm256_add_ps(hi[j], _mm256_mul_ps(dv, t1));
        }
    }
    for j in 0..N {
        _mm256_storeu_ps(acc[j].as_mut_ptr(), lo[j]);
        _mm256_storeu_ps(acc[j].as_mut_ptr().add(8), hi[j]);
    }
}

/// The 16 lane sums of `N` rows of a panel on AVX-512 (one `zmm` a row; `N` independent
/// sums, where one row's is a chain of dependent adds, a block each).
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F available; memory as [`panel_avx2`].
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn panel_avx512<const N: usize>(body: Body, acc: &mut [[f32; 16]; 16]) {
    let mut s = [_mm512_setzero_ps(); N];
    for b in 0..body.blocks {
        let (qb, db, xb) = body.block(b, N);
        let (x0, x1) = (_mm512_loadu_ps(xb), _mm512_loadu_ps(xb.add(16)));
        for (j, s) in s.iter_mut().enumerate() {
            let qj = qb.add(BLOCK * j);
            let t = _mm512_add_ps(
                _mm512_mul_ps(code16(qj), x0),
                _mm512_mul_ps(code16(qj.add(16)), x1),
            );
            *s = _mm512_add_ps(*s, _mm512_mul_ps(_mm512_set1_ps(*db.add(j)), t));
        }
    }
    for (acc, s) in acc.iter_mut().zip(s) {
        _mm512_storeu_ps(acc.as_mut_ptr(), s);
    }
}
