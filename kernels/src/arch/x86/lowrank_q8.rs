//! AVX2 and AVX-512 bodies of the int8 `B` product ([`crate::ops::lowrank_q8`]), with
//! their safe wrapper. A code widens to f32 exactly (`vpmovsxbd`, `vcvtdq2ps`); each lane
//! is one output column, its rank sum in rank order with multiplies and adds apart (no
//! FMA), then `scale · (d · acc)`: bit-identical to `add_product_ref` per column.

use super::ops::Simd;
use crate::ops::lowrank_q8::{Bt8, PANEL};
use crate::Isa;
use std::arch::x86_64::*;

/// `out[j] += scale · (B mid)[c0 + j]` (the caller checked `bt`, `mid` and the columns).
/// Runs the AVX-512 body on that level, the AVX2 one otherwise.
pub fn add_product(
    _: Simd,
    isa: Isa,
    bt: &Bt8,
    c0: usize,
    mid: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    let (rank, n) = (mid.len(), out.len());
    let pw = PANEL * rank;
    assert!(
        rank == bt.rank
            && bt.q.len() >= (c0 + n).div_ceil(PANEL) * pw
            && bt.d.len() >= (c0 + n).div_ceil(PANEL) * PANEL
    );
    let column = |j: usize| scale * (bt.d[c0 + j] * bt.column(c0 + j, mid));
    // SAFETY (of `half`): the token proves AVX2; columns c0 + j .. c0 + j + 8 are the
    // lower or upper half of one panel below (c0 + n)/16 (asserted above), whose codes
    // start at `q(j)` plus 8 for the upper half; `out[j .. j + 8]` exists (j + 8 <= n).
    let half = |j: usize, out: &mut [f32]| unsafe {
        let c = c0 + j;
        let q = bt.q.as_ptr().add(c / PANEL * pw + c % PANEL);
        block_avx2::<1, 1>(q, bt.d.as_ptr().add(c), mid, scale, out.as_mut_ptr().add(j));
    };
    let mut j = 0;
    // Columns before the first panel boundary (8 at a time from a half panel's start, the
    // usual case: row blocks start on the base's 8-row panels), then whole panels, then
    // the rest.
    while j < n && !(c0 + j).is_multiple_of(PANEL) {
        if (c0 + j).is_multiple_of(PANEL / 2) && j + PANEL / 2 <= n {
            half(j, out);
            j += PANEL / 2;
        } else {
            out[j] += column(j);
            j += 1;
        }
    }
    let wide = isa == Isa::Avx512Vnni && isa.is_available();
    // SAFETY: the token proves AVX2 (`wide`: the AVX-512 level, checked just above); a block
    // of V panels from column c0 + j (a panel boundary) reads the codes of panels
    // (c0 + j)/16 .. (c0 + j)/16 + V and their scales, all below (c0 + n)/16 (asserted
    // above), and writes out[j .. j + 16V] with j + 16V <= n.
    unsafe {
        let q = |j: usize| bt.q.as_ptr().add((c0 + j) / PANEL * pw);
        let d = |j: usize| bt.d.as_ptr().add(c0 + j);
        while j + 4 * PANEL <= n {
            let o = out.as_mut_ptr().add(j);
            if wide {
                block_avx512::<4>(q(j), d(j), mid, scale, o);
            } else {
                block_avx2::<4, 2>(q(j), d(j), mid, scale, o);
            }
            j += 4 * PANEL;
        }
        while j + PANEL <= n {
            let o = out.as_mut_ptr().add(j);
            if wide {
                block_avx512::<1>(q(j), d(j), mid, scale, o);
            } else {
                block_avx2::<1, 2>(q(j), d(j), mid, scale, o);
            }
            j += PANEL;
        }
    }
    if j + PANEL / 2 <= n {
        half(j, out);
        j += PANEL / 2;
    }
    while j < n {
        out[j] += column(j);
        j += 1;
    }
}

/// `V` consecutive panels (`16·V` columns) on AVX2, `H` halves of each (2: whole panels;
/// `V = H = 1`: the 8 columns of one half panel, `q` pointing at its codes): a `ymm` sum
/// per half, the same per-column arithmetic either way.
///
/// # Safety
/// AVX2, FMA and F16C available; `q` readable for `V` panels of `mid.len()` rows of 16
/// codes (for `H = 1`, 8 codes at `16·r` for every rank index `r`), `d` for `16·(V-1) +
/// 8·H` scales; `out` readable and writable for as many.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_avx2<const V: usize, const H: usize>(
    q: *const i8,
    d: *const f32,
    mid: &[f32],
    scale: f32,
    out: *mut f32,
) {
    let pw = PANEL * mid.len();
    let mut acc = [[_mm256_setzero_ps(); H]; V];
    for (r, &m) in mid.iter().enumerate() {
        let mv = _mm256_set1_ps(m);
        for (v, acc) in acc.iter_mut().enumerate() {
            for (h, acc) in acc.iter_mut().enumerate() {
                let p = q.add(v * pw + r * PANEL + 8 * h) as *const __m128i;
                let b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p)));
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(mv, b));
            }
        }
    }
    let s = _mm256_set1_ps(scale);
    for (v, acc) in acc.iter().enumerate() {
        for (h, acc) in acc.iter().enumerate() {
            let k = 16 * v + 8 * h;
            let t = _mm256_mul_ps(s, _mm256_mul_ps(_mm256_loadu_ps(d.add(k)), *acc));
            let o = out.add(k);
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), t));
        }
    }
}

/// `V` consecutive panels on AVX-512: one `zmm` sum per panel.
///
/// # Safety
/// AVX2, FMA, F16C and AVX-512 F available; memory as [`block_avx2`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn block_avx512<const V: usize>(
    q: *const i8,
    d: *const f32,
    mid: &[f32],
    scale: f32,
    out: *mut f32,
) {
    let pw = PANEL * mid.len();
    let mut acc = [_mm512_setzero_ps(); V];
    for (r, &m) in mid.iter().enumerate() {
        let mv = _mm512_set1_ps(m);
        for (v, acc) in acc.iter_mut().enumerate() {
            let p = q.add(v * pw + r * PANEL) as *const __m128i;
            let b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)));
            *acc = _mm512_add_ps(*acc, _mm512_mul_ps(mv, b));
        }
    }
    let s = _mm512_set1_ps(scale);
    for (v, acc) in acc.iter().enumerate() {
        let t = _mm512_mul_ps(s, _mm512_mul_ps(_mm512_loadu_ps(d.add(16 * v)), *acc));
        let o = out.add(16 * v);
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), t));
    }
}

/// Requests the codes and scales of columns `cols` into the cache (a hint: no memory is
/// read, nothing past the buffers is touched).
pub fn prefetch(t: Simd, bt: &Bt8, cols: std::ops::Range<usize>) {
    if cols.is_empty() {
        return;
    }
    let pw = PANEL * bt.rank;
    let (p0, p1) = (cols.start / PANEL, cols.end.div_ceil(PANEL));
    // Into L2 (T1), not L1: the base rows computed meanwhile stream through L1 (T0
    // measured no better, and its burst of ~100 lines a block showed as ~1 % of the
    // samples in the prefetch loop itself).
    let q: &[u8] = bytemuck::cast_slice(&bt.q);
    super::prefetch_l2(t, q, p0 * pw..(p1 * pw).min(q.len()));
    let d: &[u8] = bytemuck::cast_slice(&bt.d);
    super::prefetch_l2(t, d, p0 * PANEL * 4..(p1 * PANEL * 4).min(d.len()));
}
