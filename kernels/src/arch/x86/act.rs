//! AVX2 activation quantization (q8_0-style, symmetric per 32). Bit-identical to the
//! scalar path in [`crate::matmul::act`]: same `amax / 127`, same `1 / d`, same product,
//! round-half-to-even, same clamp.

use std::arch::x86_64::*;

/// Safe entry point: [`quantize`] after checking the CPU (panics without AVX2/FMA/F16C).
pub fn quantize_checked(x: &[f32], qs: &mut [i8], d: &mut [f32], sum: &mut [i32], ds: &mut [f32]) {
    assert!(
        crate::Isa::Avx2.is_available(),
        "AVX2 kernels requested on a CPU without AVX2/FMA/F16C"
    );
    // SAFETY: the CPU supports avx2, fma and f16c (checked just above).
    unsafe { quantize(x, qs, d, sum, ds) }
}

/// Quantizes `x` (a multiple of 32 long) into `qs`, and per block `d`, `Σq`, `d·Σq`.
///
/// # Safety
/// CPU supports AVX2 and FMA. (All lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize(x: &[f32], qs: &mut [i8], d: &mut [f32], sum: &mut [i32], ds: &mut [f32]) {
    let nb = x.len() / 32;
    assert!(x.len().is_multiple_of(32) && qs.len() == x.len());
    assert!(d.len() == nb && sum.len() == nb && ds.len() == nb);
    let sign = _mm256_set1_ps(-0.0);
    let lim = _mm256_set1_ps(127.0);
    for b in 0..nb {
        let xb = &x[b * 32..b * 32 + 32];
        // SAFETY: `xb` holds 32 f32 (4 vectors).
        let v: [__m256; 4] = unsafe {
            [
                _mm256_loadu_ps(xb.as_ptr()),
                _mm256_loadu_ps(xb.as_ptr().add(8)),
                _mm256_loadu_ps(xb.as_ptr().add(16)),
                _mm256_loadu_ps(xb.as_ptr().add(24)),
            ]
        };
        // amax. `max_ps` returns its second operand when either is NaN: keeping the running
        // max second skips NaN inputs, as `f32::max` does in the scalar path.
        let mut m = _mm256_setzero_ps();
        for vi in v {
            m = _mm256_max_ps(_mm256_andnot_ps(sign, vi), m);
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m1 = _mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2));
        let amax = _mm_cvtss_f32(m1);
        let dd = amax / 127.0;
        let id = if dd > 0.0 { 1.0 / dd } else { 0.0 };
        let idv = _mm256_set1_ps(id);
        let mut ints = [_mm256_setzero_si256(); 4];
        for (k, vi) in v.into_iter().enumerate() {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(vi, idv),
            );
            // A NaN input (NaN·id) becomes 0, as the scalar `NaN as i8`.
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
            let r = _mm256_max_ps(
                _mm256_min_ps(r, lim),
                _mm256_sub_ps(_mm256_setzero_ps(), lim),
            );
            ints[k] = _mm256_cvtps_epi32(r);
        }
        // Pack 32 int32 -> 32 int8 in element order.
        let p01 = _mm256_packs_epi32(ints[0], ints[1]); // lanes: 0-3,8-11 | 4-7,12-15
        let p23 = _mm256_packs_epi32(ints[2], ints[3]);
        let p = _mm256_packs_epi16(p01, p23); // 0-3,8-11,16-19,24-27 | 4-7,12-15,20-23,28-31
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: `qs[b*32..b*32+32]` is in bounds (lengths checked).
        unsafe { _mm256_storeu_si256(qs.as_mut_ptr().add(b * 32) as *mut __m256i, p) };
        // Σq: maddubs(1, q) then madd(1).
        let s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), p);
        let s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
        let s4 = _mm_add_epi32(
            _mm256_castsi256_si128(s32),
            _mm256_extracti128_si256::<1>(s32),
        );
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2));
        let s = _mm_cvtsi128_si32(s1);
        d[b] = dd;
        sum[b] = s;
        ds[b] = dd * s as f32;
    }
}

/// Safe entry point: [`quantize_avx512`] after checking the CPU (panics without AVX-512
/// F/BW/VL and AVX2/FMA/F16C).
pub fn quantize_avx512_checked(x: &[f32], out: Blocks) {
    assert!(
        crate::Isa::Avx512Vnni.is_available(),
        "AVX-512 kernels requested on a CPU without AVX-512"
    );
    // SAFETY: the CPU supports the AVX-512 level (checked just above).
    unsafe { quantize_avx512(x, out) }
}

/// Where [`quantize_avx512`] writes: per 32-block of the input, 32 codes, `d`, `Σq`,
/// `d·Σq` and the half-block sums.
pub struct Blocks<'a> {
    pub qs: &'a mut [i8],
    pub d: &'a mut [f32],
    pub sum: &'a mut [i32],
    pub ds: &'a mut [f32],
    pub sum16: &'a mut [i32],
}

/// [`quantize`] with 16-lane vectors, a block being two of them, which also writes each
/// block's half-block code sums (`sum16`, [`crate::matmul::QuantizedActivation::row_sum16`]'s
/// packing), the two vectors' own sums, where the common path adds 32 bytes one by one.
/// Sixteen blocks at a time ([`group16`]): their maxima and sums are reduced together
/// ([`fold16`]) and their scales divided in one vector, where one block at a time spent
/// most of its instructions on horizontal reductions and two scalar divisions. The same
/// bits as [`quantize`]: the same `amax / 127`, `1 / d` and products; the clamp to ±127
/// comes before the round-to-nearest-even conversion instead of after the rounding (the
/// same integers: a value within ±127 rounds within ±127, one beyond clamps to ±127 either
/// way), and a NaN product is masked to 0.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C and AVX-512 F/BW/VL. (All lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize_avx512(x: &[f32], out: Blocks) {
    let Blocks {
        qs,
        d,
        sum,
        ds,
        sum16,
    } = out;
    let nb = x.len() / 32;
    assert!(x.len().is_multiple_of(32) && qs.len() == x.len());
    assert!(d.len() == nb && sum.len() == nb && ds.len() == nb && sum16.len() == nb);
    let mut b = 0;
    while b + 16 <= nb {
        let out = Blocks {
            qs: &mut qs[32 * b..32 * (b + 16)],
            d: &mut d[b..b + 16],
            sum: &mut sum[b..b + 16],
            ds: &mut ds[b..b + 16],
            sum16: &mut sum16[b..b + 16],
        };
        // SAFETY: in this function's features (contract); lengths as `group16` asks.
        unsafe { group16(&x[32 * b..32 * (b + 16)], out) };
        b += 16;
    }
    let (lim, nlim) = (_mm512_set1_ps(127.0), _mm512_set1_ps(-127.0));
    for b in b..nb {
        let (xb, qb) = (&x[32 * b..32 * b + 32], &mut qs[32 * b..32 * b + 32]);
        // SAFETY: `xb` holds 32 f32 (two vectors).
        let v = unsafe {
            [
                _mm512_loadu_ps(xb.as_ptr()),
                _mm512_loadu_ps(xb.as_ptr().add(16)),
            ]
        };
        let amax = _mm512_reduce_max_ps(abs_max(v));
        let dd = amax / 127.0;
        let id = if dd > 0.0 { 1.0 / dd } else { 0.0 };
        let idv = _mm512_set1_ps(id);
        let mut half = [0i32; 2];
        for (k, vi) in v.into_iter().enumerate() {
            // SAFETY: in this function's features; 16 code bytes at `qb[16k..]` (of 32).
            let ints = unsafe { codes(vi, idv, lim, nlim, qb.as_mut_ptr().add(16 * k)) };
            half[k] = _mm512_reduce_add_epi32(ints);
        }
        let s = half[0] + half[1];
        d[b] = dd;
        sum[b] = s;
        ds[b] = dd * s as f32;
        sum16[b] = (half[0] as i16 as u16 as u32 | (half[1] as i16 as u16 as u32) << 16) as i32;
    }
}

/// `max(|v₀|, |v₁|, 0)` per lane, the running max second (`max_ps` returns its second
/// operand when either is NaN: NaN inputs are skipped, as `f32::max` does in the scalar
/// path, and no NaN reaches the reductions after it).
///
/// # Safety
/// Inside [`quantize_avx512`]'s features.
#[inline(always)]
unsafe fn abs_max(v: [__m512; 2]) -> __m512 {
    let mut m = _mm512_setzero_ps();
    for vi in v {
        m = _mm512_max_ps(_mm512_abs_ps(vi), m);
    }
    m
}

/// One vector's codes: `v·id` clamped to ±127, NaN to 0, rounded to nearest even; stores
/// the 16 int8 codes at `q` and returns them as int32.
///
/// # Safety
/// Inside [`quantize_avx512`]'s features; `q` writable for 16 bytes.
#[inline(always)]
unsafe fn codes(v: __m512, id: __m512, lim: __m512, nlim: __m512, q: *mut i8) -> __m512i {
    let r = _mm512_mul_ps(v, id);
    let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(r, r);
    let r = _mm512_min_ps(_mm512_max_ps(r, nlim), lim);
    let ints = _mm512_maskz_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        ordered, r,
    );
    // SAFETY: contract (the values are within ±127: truncating to bytes is exact).
    unsafe { _mm_storeu_si128(q as *mut __m128i, _mm512_cvtepi32_epi8(ints)) };
    ints
}

/// Quantizes 16 blocks (`x`: 512 f32; `out` 512 codes and 16 of each per-block value).
///
/// # Safety
/// Inside [`quantize_avx512`]'s features. (Lengths are checked.)
#[inline(always)]
unsafe fn group16(x: &[f32], out: Blocks) {
    assert!(x.len() == 512 && out.qs.len() == 512);
    assert!(out.d.len() == 16 && out.sum.len() == 16 && out.ds.len() == 16);
    assert!(out.sum16.len() == 16);
    let (lim, nlim) = (_mm512_set1_ps(127.0), _mm512_set1_ps(-127.0));
    // Vector i < 32 of `x`, inside an `unsafe` block (`x` holds 512 f32, checked). A
    // macro, not a closure: a closure is compiled without the features.
    macro_rules! load {
        ($i:expr) => {
            _mm512_loadu_ps(x.as_ptr().add(16 * $i))
        };
    }
    let mut m = [_mm512_setzero_ps(); 16];
    for (j, m) in m.iter_mut().enumerate() {
        // SAFETY: inside the features (contract); vectors 2j, 2j + 1 < 32 of `x`.
        *m = unsafe { abs_max([load!(2 * j), load!(2 * j + 1)]) };
    }
    // SAFETY: inside the features (contract).
    let amax = unsafe { fold16::<Max>(m) };
    let dv = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
    // `1 / d` where `d > 0`, else 0 (as the scalar path's `if`).
    let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(dv, _mm512_setzero_ps());
    let idv = _mm512_maskz_div_ps(positive, _mm512_set1_ps(1.0), dv);
    let mut id = [0f32; 16];
    // SAFETY: 16 f32 each.
    unsafe {
        _mm512_storeu_ps(id.as_mut_ptr(), idv);
        _mm512_storeu_ps(out.d.as_mut_ptr(), dv);
    }
    let mut halves = [[_mm512_setzero_ps(); 16]; 2];
    for j in 0..16 {
        let idj = _mm512_set1_ps(id[j]);
        for k in 0..2 {
            // SAFETY: inside the features; vector 2j + k < 32 of `x`, codes `32j + 16k
            // ..+16` of the 512 (checked).
            let ints = unsafe {
                codes(
                    load!(2 * j + k),
                    idj,
                    lim,
                    nlim,
                    out.qs.as_mut_ptr().add(32 * j + 16 * k),
                )
            };
            halves[k][j] = _mm512_castsi512_ps(ints);
        }
    }
    // SAFETY: inside the features (contract).
    let (lo, hi) = unsafe {
        (
            _mm512_castps_si512(fold16::<AddI32>(halves[0])),
            _mm512_castps_si512(fold16::<AddI32>(halves[1])),
        )
    };
    let s = _mm512_add_epi32(lo, hi);
    // `d·Σq` as the scalar `dd * s as f32` (the conversion rounds to nearest even, as `as`).
    let dsv = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(s));
    let packed = _mm512_or_si512(
        _mm512_and_si512(lo, _mm512_set1_epi32(0xffff)),
        _mm512_slli_epi32::<16>(hi),
    );
    // SAFETY: 16 values each (checked).
    unsafe {
        _mm512_storeu_si512(out.sum.as_mut_ptr() as *mut __m512i, s);
        _mm512_storeu_ps(out.ds.as_mut_ptr(), dsv);
        _mm512_storeu_si512(out.sum16.as_mut_ptr() as *mut __m512i, packed);
    }
}

/// An associative, commutative lane-wise operation for [`fold16`] (a trait, not a closure:
/// a closure is compiled without the caller's target features).
trait Lanewise {
    /// # Safety
    /// Inside [`quantize_avx512`]'s features.
    unsafe fn op(a: __m512, b: __m512) -> __m512;
}

/// `max` of f32 lanes (no NaN reaches it: [`abs_max`]).
struct Max;

impl Lanewise for Max {
    #[inline(always)]
    unsafe fn op(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
}

/// Sum of int32 lanes (held in f32 vectors; exact).
struct AddI32;

impl Lanewise for AddI32 {
    #[inline(always)]
    unsafe fn op(a: __m512, b: __m512) -> __m512 {
        let s = _mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b));
        _mm512_castsi512_ps(s)
    }
}

/// Lane `j` of the result = `O` over all 16 lanes of `v[j]`: a transposing reduction in 45
/// shuffles and operations for 16 vectors (one vector's own reduction takes 8). Each level
/// pairs vectors and halves the lanes per vector that still need combining: 256-bit halves,
/// then 128-bit quarters, then pairs, then single lanes; lane `4k + r` then holds vector
/// `4r + k`, which the last permutation puts in place.
///
/// # Safety
/// Inside [`quantize_avx512`]'s features.
#[inline(always)]
unsafe fn fold16<O: Lanewise>(v: [__m512; 16]) -> __m512 {
    // SAFETY: inside the features (contract).
    unsafe {
        // One level: out[i] = O(lo-shuffle, hi-shuffle) of the pair v[2i], v[2i + 1].
        macro_rules! level {
            ($v:expr, $n:literal, $shuffle:ident, $lo:literal, $hi:literal) => {{
                let mut out = [_mm512_setzero_ps(); $n];
                for i in 0..$n {
                    let (a, b) = ($v[2 * i], $v[2 * i + 1]);
                    out[i] = O::op($shuffle::<$lo>(a, b), $shuffle::<$hi>(a, b));
                }
                out
            }};
        }
        // Lanes 0-7 of c[i] combine v[2i]'s halves, lanes 8-15 v[2i+1]'s.
        let c = level!(v, 8, _mm512_shuffle_f32x4, 0x44, 0xEE);
        // Quarter k of e[i] holds vector 4i + k (4 lanes to combine).
        let e = level!(c, 4, _mm512_shuffle_f32x4, 0x88, 0xDD);
        // In quarter k of g[i], lanes 0-1 hold vector 8i + k, lanes 2-3 8i + 4 + k.
        let g = level!(e, 2, _mm512_shuffle_ps, 0x44, 0xEE);
        // Lane 4k + r holds vector 4r + k.
        let f = level!(g, 1, _mm512_shuffle_ps, 0x88, 0xDD)[0];
        let lane_of = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(lane_of, f)
    }
}
