//! The tiled K-quant matmul of llama.cpp's x86 CPU backend (ggml-cpu/tiled/tiled.cpp +
//! tiled-kernel.cpp, AVX2 microkernel `tiled_run_microtile_avx2`), for Q6_K, Q4_K, Q5_K,
//! Q3_K, Q2_K and IQ4_XS (not the IQ2/IQ3/IQ1 grids, which the tiled path also takes).
//!
//! When it runs: `ggml_compute_forward_mul_mat` tries `ggml_compute_forward_mul_mat_tiled`
//! first (before llamafile's sgemm and the vec_dot loop). It takes the op when
//! - the build has AVX2 or AVX (or AVX512-VNNI, which has its own microkernel; not twinned
//!   here, the twin is the AVX2+FMA build),
//! - `GGML_CPU_TILED_MM` is unset or non-zero (master switch, **on by default**),
//! - the weight is not in a repack buffer (`src0->extra == NULL`: Q4_K weights that the
//!   CPU_REPACK buffer converts to `q4_K_8x8` never come here, Q6_K and Q5_K are never
//!   repacked on x86),
//! - the type is Q6_K, Q5_K, Q4_K, Q3_K, Q2_K, IQ4_XS, IQ2_XXS/XS/S, IQ3_XXS/S, IQ1_S/M,
//! - and `src1->ne[1] >= 8` ([`TILED_MIN_BATCH`]), or `GGML_CPU_TILED_MM_FORCE=1`
//!   (test/bench switch, off by default) for any batch.
//!
//! (`params->use_ref`, llama.cpp's `--use-ref`, also bails out.) The src1 type checks in
//! `ggml_tiled_supported` are unreachable (the type switch returns first), so F32
//! activations are simply quantized to Q8_K.
//!
//! What it computes, per output `(row, token)`:
//! 1. activations: `quantize_row_q8_K` (the `from_float` of Q8_K, see
//!    [`super::q8_k::quantize_row_q8_k`]), row by row, each 256-block independent (the
//!    threads split a row's blocks between them, which changes nothing);
//! 2. for each 256-element K block `b`, an exact int32 sum. Q6_K (`ACTBIAS`, `BIAS = 32`):
//!    `maddubs(q8 ^ 0x80, code - 32)` then `madd` with the int8 scale per 16 (no
//!    saturation: 2·255·32 < 2^15), minus the precomputed `128·Σ sc[s]·Σ(code - 32)`,
//!    which is exactly `isum = Σ_s sc[s] · Σ_{e∈s} (code_e - 32)·q8_e`. Q4_K/Q5_K (`BIAS =
//!    0`, `HAS_MIN`): `isum = Σ_s sc[s]·Σ_{e∈s} code_e·q8_e` and `imin = Σ_s m[s]·(bsums[2s]
//!    + bsums[2s+1])`;
//! 3. the f32 epilogue of the microkernel (checked in the disassembly of the b11434
//!    object): `res = d_w · cvt(isum)` (`vmulps`), for Q4_K/Q5_K/Q2_K then
//!    `res = fnmadd(dmin_w, cvt(imin), res)` (one rounding), and
//!    `acc = fmadd(res, d_a, acc)` into the f32 accumulator of that output;
//! 4. `acc` starts at 0 (the 256×256 window buffer is zeroed once per macrotile) and takes
//!    the K blocks in increasing order on both the narrow path (`n_src1 <= 16`: K in
//!    `ggml_tiled_narrow_k_extent` chunks of whole slabs, slabs in order) and the wide
//!    path (one slab at a time); the window is then stored as is.
//!
//! So the chunking over K, the 256-row/256-token windows, the narrow/wide choice and the
//! work split between threads (chunk sizes from `nth`, work stealing) only move whole
//! outputs around: **the result does not depend on the thread count** nor on the batch
//! size (the oracle checks 1, 2 and 3 threads, and 1..7 tokens with the tiled path
//! forced). Versus `ggml_vec_dot_q6_K_q8_K` (eight f32 lanes, `fmadd(d_w·d_a, cvt(lane),
//! lane_acc)`, then `hsum`), the tiled path folds each block into one scalar accumulator
//! with the weight scale applied first and the activation scale in the FMA, so the two
//! round differently.
//!
//! `MUL_MAT_ID` (MoE experts with >= 8 routed rows) runs the same microkernel over K in the
//! same order, so these dot products apply per expert too (not checked by the oracle).

use super::q8_k::quantize_row_q8_k;
use super::{h2f, mul_mat_by_route, Route};
use crate::formats::iq4_nl::KVALUES_IQ4NL;
use crate::formats::iq4_xs::BlockIq4Xs;
use crate::formats::kquant::{scale_min_k4, QK_K};
use crate::formats::q2_k::BlockQ2K;
use crate::formats::q3_k::BlockQ3K;
use crate::formats::q4_k::BlockQ4K;
use crate::formats::q5_k::BlockQ5K;
use crate::formats::q6_k::BlockQ6K;
use crate::formats::q8_k::BlockQ8K;

/// `ggml_tiled_min_batch`: the tiled path takes a `mul_mat` whose activations have at least
/// this many rows (tokens), unless `GGML_CPU_TILED_MM_FORCE=1`.
pub const TILED_MIN_BATCH: usize = 8;

/// Whether llama.cpp's default x86 build (no `GGML_CPU_TILED_MM*` variables set) runs a
/// non-repacked Q6_K/Q5_K/Q4_K (or other supported K/IQ-quant) `mul_mat` with `n_tokens`
/// activation rows through the tiled kernel.
pub fn takes_tiled_path(n_tokens: usize) -> bool {
    n_tokens >= TILED_MIN_BATCH
}

/// Q6_K element `e` as the tiled unpack lays it out (the same order as the reference and
/// the vector dot, [`super::q6_k::code`]), debiased.
#[inline]
fn q6_weight(b: &BlockQ6K, e: usize) -> i32 {
    super::q6_k::code(b, e) - 32
}

/// Q4_K/Q5_K element `e` (sub-block `e / 32`): low nibbles of `qs[32i..]` for sub-block
/// `2i`, high nibbles for `2i + 1`; Q5_K adds bit `e / 32` of `qh[e % 32]` as bit 4.
#[inline]
fn q4_code(qs: &[u8; QK_K / 2], e: usize) -> i32 {
    let (s, l) = (e / 32, e % 32);
    let byte = qs[32 * (s / 2) + l];
    (if s % 2 == 0 { byte & 0x0F } else { byte >> 4 }) as i32
}

/// Q4_K/Q5_K sub-block scale and min (the 12-byte kmask decode of the unpack).
#[inline]
fn q45_scale_min(scales: &[u8; 12], s: usize) -> (i32, i32) {
    let (sc, m) = scale_min_k4(s, scales);
    (sc as i32, m as i32)
}

/// One block of the microkernel for the formats without mins (Q6_K, Q3_K, IQ4_XS):
/// `isum = Σ_s scale(s)·Σ_{e∈s} weight(e)·q8_e` over sub-blocks of `subblk`, exact in
/// int32, then `d_w · cvt(isum)` (the `vmulps`).
#[inline]
fn block_sym(
    d: f32,
    subblk: usize,
    ba: &BlockQ8K,
    scale: impl Fn(usize) -> i32,
    weight: impl Fn(usize) -> i32,
) -> f32 {
    let mut isum = 0i32;
    for s in 0..QK_K / subblk {
        let mut dot = 0i32;
        for e in subblk * s..subblk * (s + 1) {
            dot += weight(e) * ba.qs[e] as i32;
        }
        isum += scale(s) * dot;
    }
    d * isum as f32
}

/// One block of the microkernel for the formats with mins (Q4_K, Q5_K, Q2_K):
/// `isum` as in [`block_sym`], `imin = Σ_s min(s)·Σ bsums` over the sub-block's
/// 16-element bsums (widened to int32 in the src1 tile), then
/// `fnmadd(dmin_w, cvt(imin), d_w · cvt(isum))` (one rounding).
#[inline]
fn block_min(
    d: f32,
    dmin: f32,
    subblk: usize,
    ba: &BlockQ8K,
    scale_min: impl Fn(usize) -> (i32, i32),
    code: impl Fn(usize) -> i32,
) -> f32 {
    let mut isum = 0i32;
    let mut imin = 0i32;
    for s in 0..QK_K / subblk {
        let (sc, m) = scale_min(s);
        let mut dot = 0i32;
        for e in subblk * s..subblk * (s + 1) {
            dot += code(e) * ba.qs[e] as i32;
        }
        isum += sc * dot;
        let bs: i32 = ba.bsums[subblk * s / 16..subblk * (s + 1) / 16]
            .iter()
            .map(|&b| b as i32)
            .sum();
        imin += m * bs;
    }
    (-dmin).mul_add(imin as f32, d * isum as f32)
}

/// Folds the per-block results into one output: `acc = fmadd(res_b, d_a[b], acc)` from
/// `acc = 0`, blocks in K order.
#[inline]
fn fold(a: &[BlockQ8K], res: impl Fn(usize) -> f32) -> f32 {
    let mut acc = 0f32;
    for (b, ba) in a.iter().enumerate() {
        acc = res(b).mul_add(ba.d, acc);
    }
    acc
}

/// [`fold`] of [`block_sym`] over the blocks of weight row `w` (of block type `B`):
/// `d(block)` its fp16 scale, `scale(block, s)` sub-block `s`'s integer scale and
/// `weight(block, e)` element `e`'s weight.
#[inline(always)]
fn dot_sym<B>(
    (w, a): (&[B], &[BlockQ8K]),
    subblk: usize,
    d: impl Fn(&B) -> half::f16,
    scale: impl Fn(&B, usize) -> i32,
    weight: impl Fn(&B, usize) -> i32,
) -> f32 {
    fold(a, |b| {
        let bw = &w[b];
        block_sym(
            h2f(d(bw)),
            subblk,
            &a[b],
            |s| scale(bw, s),
            |e| weight(bw, e),
        )
    })
}

/// [`fold`] of [`block_min`], as [`dot_sym`] for [`block_sym`]: `d(block)` its fp16
/// `(d, dmin)`, `scale_min(block, s)` sub-block `s`'s scale and min, `code(block, e)`
/// element `e`'s code.
#[inline(always)]
fn dot_min<B>(
    (w, a): (&[B], &[BlockQ8K]),
    subblk: usize,
    d: impl Fn(&B) -> (half::f16, half::f16),
    scale_min: impl Fn(&B, usize) -> (i32, i32),
    code: impl Fn(&B, usize) -> i32,
) -> f32 {
    fold(a, |b| {
        let bw = &w[b];
        let (d, dmin) = d(bw);
        block_min(
            h2f(d),
            h2f(dmin),
            subblk,
            &a[b],
            |s| scale_min(bw, s),
            |e| code(bw, e),
        )
    })
}

super::fma_clone! {
    /// One output of the tiled Q6_K matmul: weight row `w` against one token's Q8_K blocks.
    pub fn dot_tiled_q6_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 => dot_tiled_q6_k_body
}

#[inline(always)]
fn dot_tiled_q6_k_body(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "tiled q6_K x q8_K: block counts");
    dot_sym(
        (w, a),
        16,
        |bw| bw.d,
        |bw, s| bw.scales[s] as i32,
        q6_weight,
    )
}

/// One output of the tiled Q4_K matmul (non-repacked weights).
pub fn dot_tiled_q4_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "tiled q4_K x q8_K: block counts");
    dot_q45(
        (w, a),
        |bw| (bw.d, bw.dmin, &bw.scales),
        |bw, e| q4_code(&bw.qs, e),
    )
}

/// One output of the tiled Q5_K matmul.
pub fn dot_tiled_q5_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "tiled q5_K x q8_K: block counts");
    let code = |bw: &BlockQ5K, e: usize| {
        q4_code(&bw.qs, e) | ((((bw.qh[e % 32] >> (e / 32)) & 1) as i32) << 4)
    };
    dot_q45((w, a), |bw| (bw.d, bw.dmin, &bw.scales), code)
}

/// [`dot_min`] for Q4_K and Q5_K, which share the block layout of scales (`d`, `dmin`, 12
/// packed 6-bit scale/min bytes, sub-blocks of 32): `head(block)` gives them.
#[inline(always)]
fn dot_q45<B>(
    wa: (&[B], &[BlockQ8K]),
    head: impl Fn(&B) -> (half::f16, half::f16, &[u8; 12]),
    code: impl Fn(&B, usize) -> i32,
) -> f32 {
    dot_min(
        wa,
        32,
        |bw| (head(bw).0, head(bw).1),
        |bw, s| q45_scale_min(head(bw).2, s),
        code,
    )
}

/// One output of the tiled Q3_K matmul (`ACTBIAS`, `BIAS = 4`: weight `code - 4`, code =
/// 2 low bits | hmask bit << 2; scale = 6-bit value - 32).
pub fn dot_tiled_q3_k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "tiled q3_K x q8_K: block counts");
    let scale = |bw: &BlockQ3K, g: usize| crate::formats::q3_k::scale(bw, g) as i32;
    let weight = |bw: &BlockQ3K, e: usize| {
        let (half, group, l) = (e / 128, (e % 128) / 32, e % 32);
        let lo = (bw.qs[32 * half + l] >> (2 * group)) & 3;
        let hi = (bw.hmask[l] >> (4 * half + group)) & 1;
        (lo | (hi << 2)) as i32 - 4
    };
    dot_sym((w, a), 16, |bw| bw.d, scale, weight)
}

/// One output of the tiled Q2_K matmul (`HAS_MIN`, sub-blocks of 16: scale = low nibble,
/// min = high nibble of `scales[s]`).
pub fn dot_tiled_q2_k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "tiled q2_K x q8_K: block counts");
    let code = |bw: &BlockQ2K, e: usize| {
        let (half, group, l) = (e / 128, (e % 128) / 32, e % 32);
        ((bw.qs[32 * half + l] >> (2 * group)) & 3) as i32
    };
    dot_min(
        (w, a),
        16,
        |bw| (bw.d, bw.dmin),
        |bw, s| ((bw.scales[s] & 0xF) as i32, (bw.scales[s] >> 4) as i32),
        code,
    )
}

/// One output of the tiled IQ4_XS matmul (`BIAS = 128` without `ACTBIAS`: the sign trick,
/// `maddubs(|w|, sign(q8, w))`, no saturation at 2·127·127; weight = `kvalues_iq4nl`
/// level, scale = `ls - 32`).
pub fn dot_tiled_iq4_xs(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "tiled iq4_xs x q8_K: block counts");
    let scale = |bw: &BlockIq4Xs, s: usize| {
        let lo = (bw.scales_l[s / 2] >> (4 * (s % 2))) & 0xF;
        let hi = ((bw.scales_h >> (2 * s)) & 3) as u8;
        (lo | (hi << 4)) as i32 - 32
    };
    let weight = |bw: &BlockIq4Xs, e: usize| {
        let (s, j) = (e / 32, e % 32);
        let byte = bw.qs[16 * s + j % 16];
        let q = if j < 16 { byte & 0xF } else { byte >> 4 };
        KVALUES_IQ4NL[q as usize] as i32
    };
    dot_sym((w, a), 32, |bw| bw.d, scale, weight)
}

/// The whole tiled `mul_mat`: every token quantized with `quantize_row_q8_K` and every
/// output computed by `dot`. Returns `out[token * n_rows + row]`.
fn mul_mat_tiled<W>(
    w: &[W],
    n_rows: usize,
    x: &[f32],
    k: usize,
    dot: fn(&[W], &[BlockQ8K]) -> f32,
) -> Vec<f32> {
    let route = |_, _| Route::new(quantize_row_q8_k, dot);
    mul_mat_by_route(w, n_rows, x, (k, QK_K), route)
}

/// `pub fn $name(w: &[$block], n_rows, x, k) -> Vec<f32>`: `mul_mat_tiled` with `$dot`.
macro_rules! mul_mat_tiled_fns {
    ($($(#[$m:meta])* $name:ident($block:ty) => $dot:ident;)*) => {$(
        $(#[$m])*
        pub fn $name(w: &[$block], n_rows: usize, x: &[f32], k: usize) -> Vec<f32> {
            mul_mat_tiled(w, n_rows, x, k, $dot)
        }
    )*};
}

mul_mat_tiled_fns! {
    /// The tiled Q6_K `mul_mat` (what llama.cpp runs for a Q6_K weight and `n_tokens >= 8`,
    /// see [`takes_tiled_path`]; the arithmetic is the same for any `n_tokens`, thread count
    /// and shape). `x` holds `n_tokens` rows of `k` floats; returns `out[token * n_rows + row]`.
    mul_mat_tiled_q6_k(BlockQ6K) => dot_tiled_q6_k;
    /// The tiled Q4_K `mul_mat`, for Q4_K weights that were *not* repacked (a repacked Q4_K
    /// weight goes to [`super::q4_k::mul_mat_q4_k_repacked`] instead). Layout as
    /// [`mul_mat_tiled_q6_k`].
    mul_mat_tiled_q4_k(BlockQ4K) => dot_tiled_q4_k;
    /// The tiled Q5_K `mul_mat`. Layout as [`mul_mat_tiled_q6_k`].
    mul_mat_tiled_q5_k(BlockQ5K) => dot_tiled_q5_k;
    /// The tiled Q3_K `mul_mat`. Layout as [`mul_mat_tiled_q6_k`].
    mul_mat_tiled_q3_k(BlockQ3K) => dot_tiled_q3_k;
    /// The tiled Q2_K `mul_mat`. Layout as [`mul_mat_tiled_q6_k`].
    mul_mat_tiled_q2_k(BlockQ2K) => dot_tiled_q2_k;
    /// The tiled IQ4_XS `mul_mat`. Layout as [`mul_mat_tiled_q6_k`].
    mul_mat_tiled_iq4_xs(BlockIq4Xs) => dot_tiled_iq4_xs;
}
