//! AVX2 bodies of the bf16 low-rank products ([`crate::ops::lowrank`]), with their safe
//! wrappers. A bf16 widens to f32 by a zero-extension and a 16-bit shift. Multiplies and
//! adds stay apart and the partial sums are the references' own, so the results are
//! bit-identical to `dot_bf16_ref` / `add_bt_product_ref`; `Bᵀ`'s panels make a block
//! of columns one contiguous read.

use super::ops::Simd;
use crate::ops::lowrank::{bt_column, BtProduct, BT_PANEL};
use std::arch::x86_64::*;

/// 8 bf16 at `p` as f32.
///
/// # Safety
/// AVX2 available; `p` readable for 8 elements.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen(p: *const u16) -> __m256 {
    let h = _mm_loadu_si128(p as *const __m128i);
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
}

fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `Σ a[i] · x[i]` (lengths equal, checked by the caller).
pub fn dot_bf16(_: Simd, a: &[u16], x: &[f32]) -> f32 {
    assert_eq!(a.len(), x.len());
    // SAFETY: the token proves AVX2; both slices hold `a.len()` elements.
    unsafe { dot_body(a.as_ptr(), x.as_ptr(), a.len()) }
}

/// # Safety
/// AVX2 available; `a`, `x` readable for `n` elements.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_body(a: *const u16, x: *const f32, n: usize) -> f32 {
    // Lanes 0-7 and 8-15 of each 16-chunk: the reference's `acc[i mod 16]`.
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        if i % 32 == 0 {
            // A decode step reads `A` once, from DRAM: one line (32 bf16) requested
            // `PREFETCH_BYTES` ahead per line read (the gemv's distance). Without it the
            // loads stalled this loop at 8-11 GB/s per core against the gemv's 21.
            super::prefetch_ahead(a.add(i) as *const u8, 1);
        }
        lo = _mm256_add_ps(
            lo,
            _mm256_mul_ps(widen(a.add(i)), _mm256_loadu_ps(x.add(i))),
        );
        hi = _mm256_add_ps(
            hi,
            _mm256_mul_ps(widen(a.add(i + 8)), _mm256_loadu_ps(x.add(i + 8))),
        );
        i += 16;
    }
    let mut acc = [0f32; 16];
    _mm256_storeu_ps(acc.as_mut_ptr(), lo);
    _mm256_storeu_ps(acc.as_mut_ptr().add(8), hi);
    let mut s: f32 = acc.iter().sum();
    while i < n {
        s += bf16_to_f32(*a.add(i)) * *x.add(i);
        i += 1;
    }
    s
}

/// Requests the panels of columns `cols` of a packed `Bᵀ` of rank `rank` into the cache
/// (a hint: no memory is read, nothing past `bt` is touched).
pub fn prefetch_bt(_: Simd, bt: &[u16], rank: usize, cols: std::ops::Range<usize>) {
    if cols.is_empty() {
        return;
    }
    let pw = BT_PANEL * rank;
    let start = cols.start / BT_PANEL * pw;
    let end = (cols.end.div_ceil(BT_PANEL) * pw).min(bt.len());
    let mut i = start;
    while i < end {
        // SAFETY: the token proves SSE; `i < bt.len()`; a prefetch reads nothing.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(bt.as_ptr().add(i) as *const i8) };
        i += 32; // one 64-byte line of bf16
    }
}

/// `out[j] += scale · (B mid)[c0 + j]`, `bt` packed in panels (`ops::lowrank::pack_bt`;
/// the caller checks its size against `n_out`).
pub fn add_bt_product(_: Simd, p: &BtProduct, out: &mut [f32]) {
    let BtProduct {
        bt, c0, mid, scale, ..
    } = *p;
    let (rank, n) = (mid.len(), out.len());
    let pw = BT_PANEL * rank;
    assert!(bt.len() >= (c0 + n).div_ceil(BT_PANEL) * pw);
    let column = |j: usize| scale * bt_column(bt, c0 + j, mid);
    let mut j = 0;
    // Columns before the first panel boundary, then whole panels, then the rest.
    while j < n && !(c0 + j).is_multiple_of(BT_PANEL) {
        out[j] += column(j);
        j += 1;
    }
    // SAFETY: the token proves AVX2; a block of V panels from column c0 + j (a panel
    // boundary) reads panels (c0 + j)/8 .. (c0 + j)/8 + V, all below (c0 + n)/8 (checked
    // above), and writes out[j .. j + 8V] with j + 8V <= n.
    unsafe {
        let panel = |j: usize| bt.as_ptr().add((c0 + j) / BT_PANEL * pw);
        while j + 4 * BT_PANEL <= n {
            bt_block::<4>(panel(j), mid, scale, out.as_mut_ptr().add(j));
            j += 4 * BT_PANEL;
        }
        while j + BT_PANEL <= n {
            bt_block::<1>(panel(j), mid, scale, out.as_mut_ptr().add(j));
            j += BT_PANEL;
        }
    }
    while j < n {
        out[j] += column(j);
        j += 1;
    }
}

/// `V` consecutive panels (`8·V` columns): the rank sums in registers, then one scaled
/// add.
///
/// # Safety
/// AVX2 available; `bt` readable for `V` panels of `mid.len()` rows; `out` readable and
/// writable for `8·V`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bt_block<const V: usize>(bt: *const u16, mid: &[f32], scale: f32, out: *mut f32) {
    let pw = BT_PANEL * mid.len();
    let mut d = [_mm256_setzero_ps(); V];
    for (r, &m) in mid.iter().enumerate() {
        let mv = _mm256_set1_ps(m);
        for (v, d) in d.iter_mut().enumerate() {
            *d = _mm256_add_ps(*d, _mm256_mul_ps(mv, widen(bt.add(v * pw + r * BT_PANEL))));
        }
    }
    let s = _mm256_set1_ps(scale);
    for (v, d) in d.iter().enumerate() {
        let o = out.add(8 * v);
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(s, *d)));
    }
}
