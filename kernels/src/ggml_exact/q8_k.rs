//! Q8_K activation quantization as llama.cpp's x86 build does it. Two quantizers feed the
//! K-quant matmuls:
//!
//! - `quantize_row_q8_K` (the `from_float` of Q8_K): on x86 it is `quantize_row_q8_K_ref`
//!   (arch/x86/quants.c), compiled in ggml-base without `-march=native` (plain SSE2, no
//!   FMA to contract into): `max` = the first element of largest magnitude, `iscale =
//!   -127/max`, codes `nearest_int(iscale*x)` (round half to even through the `+1.5·2^23`
//!   trick), `MIN(127, q)`, `d = 1/iscale`.
//! - `ggml_quantize_mat_q8_K_4x8` (arch/x86/repack.cpp, AVX2), which the repacked Q4_K
//!   matmul uses for each group of four tokens; its rows are independent. It takes
//!   `maxScalar = max |x|` and picks the sign of `iscale` by whether a *positive* element
//!   reaches `maxScalar` (the reference takes the sign of the first such element, so the
//!   two differ only when both `+m` and `-m` occur: codes and `d` are then negated, and
//!   every product `d·q` is the same). Codes are `_mm256_round_ps(x*iscale)` (ties to
//!   even) packed with saturation. [`quantize_row_q8_k_4x8`] returns each row's values in
//!   plain `block_q8_K` layout (the kernel interleaves them in 8-byte chunks across the
//!   four rows; the interleaving moves bytes only).

use super::round_even_i32;
use crate::formats::kquant::QK_K;
use crate::formats::q8_k::BlockQ8K;

fn bsums(qs: &[i8; QK_K]) -> [i16; QK_K / 16] {
    std::array::from_fn(|j| qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum())
}

/// `quantize_row_q8_K` (x86: `quantize_row_q8_K_ref`). `x.len() == 256 * out.len()`.
/// An all-zero block gets `d = 0` and zero codes; ggml leaves its `bsums` unwritten
/// (they only ever meet `d = 0`), here they are zero.
pub fn quantize_row_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(x.len(), out.len() * QK_K, "quantize_row_q8_k: length");
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            // `if (ax > amax)`: strict, so the first element of largest magnitude wins.
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            b.d = 0.0;
            b.qs = [0; QK_K];
            b.bsums = [0; QK_K / 16];
            continue;
        }
        let iscale = -127.0f32 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            // `nearest_int(iscale*x[j])`: `mulps` then `addps 1.5*2^23` (no FMA in
            // ggml-base), i.e. round half to even of the rounded product.
            *q = round_even_i32(iscale * v).min(127) as i8;
        }
        b.bsums = bsums(&b.qs);
        b.d = 1.0 / iscale;
    }
}

/// One row of `ggml_quantize_mat_q8_K_4x8` (AVX2), de-interleaved into `block_q8_K`
/// layout. `x.len() == 256 * out.len()`.
pub fn quantize_row_q8_k_4x8(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(x.len(), out.len() * QK_K, "quantize_row_q8_k_4x8: length");
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        // `_mm256_max_ps` of `andnot(-0.0, v)` over the block, then the 8-lane max.
        let max_scalar = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        // `maskAbs`/`finalMask`: some element compares equal (signed) to the maximum of
        // the absolute values, i.e. a positive element attains it.
        let positive_max = xb.contains(&max_scalar);
        let iscale = if max_scalar == 0.0 {
            0.0
        } else if positive_max {
            -127.0f32 / max_scalar
        } else {
            127.0f32 / max_scalar
        };
        b.d = if max_scalar != 0.0 { 1.0 / iscale } else { 0.0 };
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            // `_mm256_mul_ps`, `_mm256_round_ps(_MM_ROUND_NEAREST)`, `cvtps_epi32`, then
            // `packs_epi32`/`packs_epi16` (saturating; |x*iscale| <= 127 + an ulp).
            *q = round_even_i32(v * iscale).clamp(-128, 127) as i8;
        }
        // The kernel's shuffled `maddubs(1, q)` bsums are exact 16-element sums.
        b.bsums = bsums(&b.qs);
    }
}
