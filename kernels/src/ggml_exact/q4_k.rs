//! Q4_K x Q8_K as llama.cpp's x86 AVX2 build computes it. llama.cpp repacks Q4_K weights
//! with `ne[1] % 8 == 0` at load into `block_q4_Kx8` (eight rows interleaved in 8-byte
//! chunks, repack.cpp `make_block_q4_Kx8`) and multiplies them with
//! `ggml_gemv_q4_K_8x8_q8_K` (one token) and `ggml_gemm_q4_K_8x8_q8_K` (four tokens at a
//! time), arch/x86/repack.cpp. `forward_mul_mat` quantizes the tokens of each group of
//! four with `ggml_quantize_mat_q8_K_4x8`, the `n % 4` leftover tokens with
//! `quantize_row_q8_K`, runs the gemm on the groups and the gemv on each leftover token.
//!
//! Both kernels give every (row, token) output its own f32 lane, exact int32 sums of
//! `sc[s]·Σq·q8` (the i16 partial sums stay below 2^15: at most 16 products of 15·127)
//! and of `m[s]·(bsums[2s]+bsums[2s+1])`, two accumulators
//! `acc = fmadd(cvt(isum), d_w*d_a, acc)`, `acc_min = fmadd(cvt(imin), dmin_w*d_a,
//! acc_min)`, and store `acc - acc_min`. They differ in how often they fold into f32:
//! the gemv once per super-block (its int sums cover all 8 sub-blocks), the gemm once per
//! pair of sub-blocks (its `sb` loop does the `fmadd`s, 4 per super-block). So the twins
//! are dot products on the original GGUF blocks; the interleaving is data movement only.

use super::q8_k::{quantize_row_q8_k, quantize_row_q8_k_4x8};
use super::{groups_of_four, h2f, mul_mat_by_route, Route};
use crate::formats::kquant::{scale_min_k4, QK_K};
use crate::formats::q4_k::BlockQ4K;
use crate::formats::q8_k::BlockQ8K;

/// One output of the repacked Q4_K kernels: weight row `w` against one token's Q8_K
/// blocks `a`, folding the integer sums into f32 every `group` sub-blocks (8: gemv, 2:
/// gemm).
fn dot_q4_k_8x8(w: &[BlockQ4K], a: &[BlockQ8K], group: usize) -> f32 {
    assert_eq!(w.len(), a.len(), "q4_K x q8_K: block counts");
    let mut acc = 0f32;
    let mut acc_min = 0f32;
    for (bw, ba) in w.iter().zip(a) {
        // `_mm256_mul_ps(col_scale_f32, row_scale_f32)`: fp16 weight scale times the f32
        // activation scale (and the same with dmin).
        let dd = h2f(bw.d) * ba.d;
        let dm = h2f(bw.dmin) * ba.d;
        for g in (0..8).step_by(group) {
            let mut isum = 0i32;
            let mut imin = 0i32;
            for s in g..g + group {
                let (sc, m) = scale_min_k4(s, &bw.scales);
                // Sub-blocks 2i and 2i+1: low and high nibbles of qs[32i..32i+32].
                let (i, hi) = (s / 2, s % 2 == 1);
                let mut dot = 0i32;
                for l in 0..32 {
                    let byte = bw.qs[32 * i + l];
                    let q = if hi { byte >> 4 } else { byte & 0x0F };
                    dot += q as i32 * ba.qs[32 * s + l] as i32;
                }
                isum += sc as i32 * dot;
                // `_mm_hadd_epi16` of the bsums (i16; |sum of 32 codes| <= 4064, no
                // wrap), then `madd_epi16` with the mins.
                let bs = ba.bsums[2 * s].wrapping_add(ba.bsums[2 * s + 1]);
                imin += m as i32 * bs as i32;
            }
            acc = (isum as f32).mul_add(dd, acc);
            acc_min = (imin as f32).mul_add(dm, acc_min);
        }
    }
    // `_mm256_sub_ps(acc_row, acc_min_rows)`.
    acc - acc_min
}

super::fma_clone! {
    /// One output of `ggml_gemv_q4_K_8x8_q8_K` (one `fmadd` per super-block).
    pub fn gemv_q4_k_8x8_q8_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 => gemv_q4_k_8x8_q8_k_body
}

#[inline(always)]
fn gemv_q4_k_8x8_q8_k_body(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    dot_q4_k_8x8(w, a, 8)
}

super::fma_clone! {
    /// One output of `ggml_gemm_q4_K_8x8_q8_K` (one `fmadd` per pair of sub-blocks, in both
    /// the 16-token and the 4-token loops of the AVX2 code).
    pub fn gemm_q4_k_8x8_q8_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 => gemm_q4_k_8x8_q8_k_body
}

#[inline(always)]
fn gemm_q4_k_8x8_q8_k_body(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    dot_q4_k_8x8(w, a, 2)
}

/// The whole repacked `mul_mat` for `w` (rows of `k / 256` blocks each) times `x`
/// (`n_tokens` rows of `k` floats), as `forward_mul_mat` splits it: tokens in groups of
/// four through `ggml_quantize_mat_q8_K_4x8` + gemm, the rest through `quantize_row_q8_K`
/// + gemv. Returns `out[token * n_rows + row]`.
pub fn mul_mat_q4_k_repacked(w: &[BlockQ4K], n_rows: usize, x: &[f32], k: usize) -> Vec<f32> {
    let grouped = Route::new(quantize_row_q8_k_4x8, gemm_q4_k_8x8_q8_k);
    let single = Route::new(quantize_row_q8_k, gemv_q4_k_8x8_q8_k);
    mul_mat_by_route(w, n_rows, x, (k, QK_K), groups_of_four(grouped, single))
}
