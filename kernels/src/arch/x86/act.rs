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
pub fn quantize_avx512_checked(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    sum: &mut [i32],
    ds: &mut [f32],
    sum16: &mut [i32],
) {
    assert!(
        crate::Isa::Avx512Vnni.is_available(),
        "AVX-512 kernels requested on a CPU without AVX-512"
    );
    // SAFETY: the CPU supports the AVX-512 level (checked just above).
    unsafe { quantize_avx512(x, qs, d, sum, ds, sum16) }
}

/// [`quantize`] with 16-lane vectors, a block being two of them, which also writes each
/// block's half-block code sums (`sum16`, [`crate::matmul::QuantizedActivation::row_sum16`]'s
/// packing): the two vectors' own sums, where the common path adds 32 bytes one by one.
/// The same bits as [`quantize`]: the same `amax / 127`, `1 / d` and products; the clamp to
/// ±127 comes before the round-to-nearest-even conversion instead of after the rounding
/// (the same integers: a value within ±127 rounds within ±127, one beyond clamps to ±127
/// either way), and a NaN product is masked to 0. Measured: ~5 % of a one-thread SmolLM2
/// pp512 went to quantization with the 8-lane body and the byte-wise `sum16` (perf).
///
/// # Safety
/// CPU supports AVX2, FMA, F16C and AVX-512 F/BW/VL. (All lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub unsafe fn quantize_avx512(
    x: &[f32],
    qs: &mut [i8],
    d: &mut [f32],
    sum: &mut [i32],
    ds: &mut [f32],
    sum16: &mut [i32],
) {
    let nb = x.len() / 32;
    assert!(x.len().is_multiple_of(32) && qs.len() == x.len());
    assert!(d.len() == nb && sum.len() == nb && ds.len() == nb && sum16.len() == nb);
    let (lim, nlim) = (_mm512_set1_ps(127.0), _mm512_set1_ps(-127.0));
    for (b, (xb, qb)) in x.chunks_exact(32).zip(qs.chunks_exact_mut(32)).enumerate() {
        // SAFETY: `xb` holds 32 f32 (two vectors).
        let v = unsafe { [_mm512_loadu_ps(xb.as_ptr()), _mm512_loadu_ps(xb.as_ptr().add(16))] };
        // amax, the running max second (`max_ps` returns its second operand when either is
        // NaN: NaN inputs are skipped, as `f32::max` does in the scalar path; none reaches
        // the reduction).
        let mut m = _mm512_setzero_ps();
        for vi in v {
            m = _mm512_max_ps(_mm512_abs_ps(vi), m);
        }
        let amax = _mm512_reduce_max_ps(m);
        let dd = amax / 127.0;
        let id = if dd > 0.0 { 1.0 / dd } else { 0.0 };
        let idv = _mm512_set1_ps(id);
        let mut half = [0i32; 2];
        for (k, vi) in v.into_iter().enumerate() {
            let r = _mm512_mul_ps(vi, idv);
            let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(r, r);
            let r = _mm512_min_ps(_mm512_max_ps(r, nlim), lim);
            let ints = _mm512_maskz_cvt_roundps_epi32::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(ordered, r);
            // SAFETY: 16 code bytes at `qb[16k..]` are in bounds (`qb` holds 32).
            unsafe {
                _mm_storeu_si128(
                    qb.as_mut_ptr().add(16 * k) as *mut __m128i,
                    _mm512_cvtepi32_epi8(ints),
                )
            };
            half[k] = _mm512_reduce_add_epi32(ints);
        }
        let s = half[0] + half[1];
        d[b] = dd;
        sum[b] = s;
        ds[b] = dd * s as f32;
        sum16[b] = (half[0] as i16 as u16 as u32 | (half[1] as i16 as u16 as u32) << 16) as i32;
    }
}
