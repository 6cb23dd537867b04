//! AVX2 + FMA + F16C bodies of the elementwise ops (8 f32 lanes). Tails use masked loads and
//! stores so every element goes through the same vector arithmetic.
//!
//! Every `pub unsafe fn` here shares one contract besides what its own doc adds: the CPU
//! supports AVX2, FMA and F16C (`Isa::Avx2.is_available()`), and the pointers are valid for
//! the element counts given. The safe wrappers in [`crate::arch::elementwise`] check both
//! (the CPU through the [`Simd`] token).

use crate::ops::exp_consts as k;
use crate::ops::rope::RopeMode;
use crate::Isa;
use std::arch::x86_64::*;

/// Proof that this CPU runs the AVX2 + FMA + F16C bodies: only [`Simd::detect`] makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simd(());

impl Simd {
    /// The token for `isa` if it maps to these bodies (`Avx2`) and this CPU runs them.
    pub fn detect(isa: Isa) -> Option<Simd> {
        (isa.has_avx2() && isa.is_available()).then_some(Simd(()))
    }
}

const L: usize = 8;

/// Lane mask with the first `n` (< 8) lanes set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tail_mask(n: usize) -> __m256i {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hmax(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_max_ss(s, _mm_shuffle_ps::<1>(s, s));
    _mm_cvtss_f32(s)
}

/// `exp(x)` per lane, ~2 ulp (see [`crate::ops::exp_consts`]).
///
/// # Safety
/// AVX2 + FMA available.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp(x: __m256) -> __m256 {
    let shift = _mm256_set1_ps(k::SHIFT);
    let z = _mm256_fmadd_ps(x, _mm256_set1_ps(k::LOG2E), shift);
    let n = _mm256_sub_ps(z, shift);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k::LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k::LN2_LO), r);
    // z's low mantissa bits hold n; shifted into the exponent field they scale 1.0 by 2^n.
    let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
    let scale = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f80_0000)));
    let r2 = _mm256_mul_ps(r, r);
    let p45 = _mm256_fmadd_ps(_mm256_set1_ps(k::C5), r, _mm256_set1_ps(k::C4));
    let p23 = _mm256_fmadd_ps(_mm256_set1_ps(k::C3), r, _mm256_set1_ps(k::C2));
    let p = _mm256_fmadd_ps(
        _mm256_fmadd_ps(p45, r2, p23),
        r2,
        _mm256_mul_ps(_mm256_set1_ps(k::C1), r),
    );
    let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
    let big = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(k::SPLIT));
    if _mm256_movemask_ps(big) == 0 {
        return _mm256_fmadd_ps(p, scale, scale);
    }
    // |n| > 126: 2^n = s1 * s2 with s1 = 2^127 or 2^-125 (bias 0x82000000 when n <= 0).
    let neg = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
        _mm256_set1_epi32(0x8200_0000u32 as i32),
    );
    let s1 = _mm256_castsi256_ps(_mm256_add_epi32(neg, _mm256_set1_epi32(0x7f00_0000)));
    let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, neg));
    let sat = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(k::SATURATE));
    let normal = _mm256_fmadd_ps(p, scale, scale);
    let split = _mm256_mul_ps(_mm256_fmadd_ps(s2, p, s2), s1);
    let res = _mm256_blendv_ps(normal, split, big);
    _mm256_blendv_ps(res, _mm256_mul_ps(s1, s1), sat)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn silu8(x: __m256) -> __m256 {
    let e = exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gelu8(x: __m256) -> __m256 {
    let x2 = _mm256_mul_ps(x, x);
    let t = _mm256_mul_ps(
        x,
        _mm256_fmadd_ps(_mm256_set1_ps(k::G1), x2, _mm256_set1_ps(k::G0)),
    );
    _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), exp(t)))
}

/// Sum of `x[i]²` over `n` elements (f32 lanes, 4 accumulators).
///
/// # Safety
/// Module contract; `x` readable for `n` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sum_squares(x: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 4 * L <= n {
        for (j, a) in acc.iter_mut().enumerate() {
            let v = _mm256_loadu_ps(x.add(i + j * L));
            *a = _mm256_fmadd_ps(v, v, *a);
        }
        i += 4 * L;
    }
    while i + L <= n {
        let v = _mm256_loadu_ps(x.add(i));
        acc[0] = _mm256_fmadd_ps(v, v, acc[0]);
        i += L;
    }
    if i < n {
        let v = _mm256_maskload_ps(x.add(i), tail_mask(n - i));
        acc[1] = _mm256_fmadd_ps(v, v, acc[1]);
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum(s)
}

/// RMSNorm: `out[i] = (x[i] * scale) * w[i]`, `scale = 1 / sqrt(sum(x²)/n + eps)`.
///
/// # Safety
/// Module contract; `x`, `w` readable and `out` writable for `n` elements; `out` equal to
/// `x` or not overlapping it.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rms_norm(x: *const f32, w: *const f32, eps: f32, out: *mut f32, n: usize) {
    let mean = sum_squares(x, n) / n.max(1) as f32;
    let scale = _mm256_set1_ps(1.0 / (mean + eps).sqrt());
    let mut i = 0;
    while i + L <= n {
        let v = _mm256_mul_ps(_mm256_loadu_ps(x.add(i)), scale);
        _mm256_storeu_ps(out.add(i), _mm256_mul_ps(v, _mm256_loadu_ps(w.add(i))));
        i += L;
    }
    if i < n {
        let m = tail_mask(n - i);
        let v = _mm256_mul_ps(_mm256_maskload_ps(x.add(i), m), scale);
        let r = _mm256_mul_ps(v, _mm256_maskload_ps(w.add(i), m));
        _mm256_maskstore_ps(out.add(i), m, r);
    }
}

/// Rotates one head in place: `head` holds at least `2 * cos.len()` values.
///
/// # Safety
/// Module contract; `head` valid for reads and writes of `2 * cos.len()` elements;
/// `sin.len() == cos.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rope(mode: RopeMode, head: *mut f32, cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    let (c, s) = (cos.as_ptr(), sin.as_ptr());
    match mode {
        RopeMode::Neox => {
            let (a, b) = (head, head.add(half));
            let mut i = 0;
            while i < half {
                let m = tail_mask((half - i).min(L));
                let full = i + L <= half;
                let (va, vb, vc, vs) = if full {
                    (
                        _mm256_loadu_ps(a.add(i)),
                        _mm256_loadu_ps(b.add(i)),
                        _mm256_loadu_ps(c.add(i)),
                        _mm256_loadu_ps(s.add(i)),
                    )
                } else {
                    (
                        _mm256_maskload_ps(a.add(i), m),
                        _mm256_maskload_ps(b.add(i), m),
                        _mm256_maskload_ps(c.add(i), m),
                        _mm256_maskload_ps(s.add(i), m),
                    )
                };
                let na = _mm256_fmsub_ps(va, vc, _mm256_mul_ps(vb, vs));
                let nb = _mm256_fmadd_ps(va, vs, _mm256_mul_ps(vb, vc));
                if full {
                    _mm256_storeu_ps(a.add(i), na);
                    _mm256_storeu_ps(b.add(i), nb);
                } else {
                    _mm256_maskstore_ps(a.add(i), m, na);
                    _mm256_maskstore_ps(b.add(i), m, nb);
                }
                i += L;
            }
        }
        RopeMode::Normal => {
            // 4 pairs per vector: [a0 b0 a1 b1 ..] * [c0 c0 c1 c1 ..]
            //                   + [b0 a0 b1 a1 ..] * [-s0 s0 -s1 s1 ..]
            let dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            let sign = _mm256_setr_ps(-0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0);
            let mut i = 0;
            while i < half {
                let pairs = (half - i).min(4);
                let m = tail_mask(2 * pairs);
                let m4 = _mm256_castsi256_si128(tail_mask(pairs));
                let v = _mm256_maskload_ps(head.add(2 * i), m);
                let vc = _mm256_castps128_ps256(_mm_maskload_ps(c.add(i), m4));
                let vs = _mm256_castps128_ps256(_mm_maskload_ps(s.add(i), m4));
                let cd = _mm256_permutevar8x32_ps(vc, dup);
                let sd = _mm256_xor_ps(_mm256_permutevar8x32_ps(vs, dup), sign);
                let swapped = _mm256_permute_ps::<0b10_11_00_01>(v);
                let r = _mm256_fmadd_ps(v, cd, _mm256_mul_ps(swapped, sd));
                _mm256_maskstore_ps(head.add(2 * i), m, r);
                i += 4;
            }
        }
    }
}

/// Softmax of `n` elements in place.
///
/// # Safety
/// Module contract; `x` valid for reads and writes of `n > 0` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax(x: *mut f32, n: usize) {
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut mx = ninf;
    let mut i = 0;
    while i + L <= n {
        mx = _mm256_max_ps(mx, _mm256_loadu_ps(x.add(i)));
        i += L;
    }
    if i < n {
        let m = tail_mask(n - i);
        let v = _mm256_maskload_ps(x.add(i), m);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(m)));
    }
    let max = _mm256_set1_ps(hmax(mx));
    let mut sum = _mm256_setzero_ps();
    i = 0;
    while i + L <= n {
        let e = exp(_mm256_sub_ps(_mm256_loadu_ps(x.add(i)), max));
        _mm256_storeu_ps(x.add(i), e);
        sum = _mm256_add_ps(sum, e);
        i += L;
    }
    if i < n {
        let m = tail_mask(n - i);
        let e = exp(_mm256_sub_ps(_mm256_maskload_ps(x.add(i), m), max));
        let e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x.add(i), m, e);
        sum = _mm256_add_ps(sum, e);
    }
    let inv = _mm256_set1_ps(1.0 / hsum(sum));
    i = 0;
    while i + L <= n {
        _mm256_storeu_ps(x.add(i), _mm256_mul_ps(_mm256_loadu_ps(x.add(i)), inv));
        i += L;
    }
    if i < n {
        let m = tail_mask(n - i);
        let v = _mm256_mul_ps(_mm256_maskload_ps(x.add(i), m), inv);
        _mm256_maskstore_ps(x.add(i), m, v);
    }
}

/// Applies the lane function `$f` to `$n` elements of `$x` into `$out` (inside a
/// `#[target_feature]` fn, so `$f` inlines).
macro_rules! map {
    ($x:expr, $out:expr, $n:expr, $f:ident) => {{
        let (x, out, n) = ($x, $out, $n);
        let mut i = 0;
        while i + L <= n {
            _mm256_storeu_ps(out.add(i), $f(_mm256_loadu_ps(x.add(i))));
            i += L;
        }
        if i < n {
            let m = tail_mask(n - i);
            _mm256_maskstore_ps(out.add(i), m, $f(_mm256_maskload_ps(x.add(i), m)));
        }
    }};
}

/// `out[i] = x[i] / (1 + exp(-x[i]))`.
///
/// # Safety
/// Module contract; `x` readable and `out` writable for `n` elements, equal or disjoint.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn silu(x: *const f32, out: *mut f32, n: usize) {
    map!(x, out, n, silu8)
}

/// GELU (tanh approximation) as `x / (1 + exp(-2 sqrt(2/pi) x (1 + 0.044715 x²)))`.
///
/// # Safety
/// As [`silu`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gelu(x: *const f32, out: *mut f32, n: usize) {
    map!(x, out, n, gelu8)
}

/// `out[i] = silu(g[i]) * u[i]`.
///
/// # Safety
/// Module contract; `g`, `u` readable and `out` writable for `n` elements; `out` equal to
/// `g` or `u` or disjoint from both.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn swiglu(g: *const f32, u: *const f32, out: *mut f32, n: usize) {
    let mut i = 0;
    while i + L <= n {
        let r = _mm256_mul_ps(silu8(_mm256_loadu_ps(g.add(i))), _mm256_loadu_ps(u.add(i)));
        _mm256_storeu_ps(out.add(i), r);
        i += L;
    }
    if i < n {
        let m = tail_mask(n - i);
        let r = _mm256_mul_ps(
            silu8(_mm256_maskload_ps(g.add(i), m)),
            _mm256_maskload_ps(u.add(i), m),
        );
        _mm256_maskstore_ps(out.add(i), m, r);
    }
}

/// f16 (as raw bits) to f32, `n` elements.
///
/// # Safety
/// Module contract; `src` readable and `dst` writable for `n` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_to_f32(src: *const u16, dst: *mut f32, n: usize) {
    let mut i = 0;
    while i + L <= n {
        let h = _mm_loadu_si128(src.add(i) as *const __m128i);
        _mm256_storeu_ps(dst.add(i), _mm256_cvtph_ps(h));
        i += L;
    }
    if i < n {
        let mut buf = [0u16; L];
        std::ptr::copy_nonoverlapping(src.add(i), buf.as_mut_ptr(), n - i);
        let v = _mm256_cvtph_ps(_mm_loadu_si128(buf.as_ptr() as *const __m128i));
        _mm256_maskstore_ps(dst.add(i), tail_mask(n - i), v);
    }
}

/// f32 to f16 (raw bits), round to nearest even, `n` elements.
///
/// # Safety
/// Module contract; `src` readable and `dst` writable for `n` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f32_to_f16(src: *const f32, dst: *mut u16, n: usize) {
    let mut i = 0;
    while i + L <= n {
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.add(i)));
        _mm_storeu_si128(dst.add(i) as *mut __m128i, h);
        i += L;
    }
    if i < n {
        let v = _mm256_maskload_ps(src.add(i), tail_mask(n - i));
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        let mut buf = [0u16; L];
        _mm_storeu_si128(buf.as_mut_ptr() as *mut __m128i, h);
        std::ptr::copy_nonoverlapping(buf.as_ptr(), dst.add(i), n - i);
    }
}

/// `out[i] = exp(x[i])` with the vector [`exp`] (tests compare it with `f32::exp`).
///
/// # Safety
/// As [`silu`].
#[cfg(test)]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_row(x: *const f32, out: *mut f32, n: usize) {
    map!(x, out, n, exp)
}
