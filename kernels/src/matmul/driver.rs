//! The one gemm/gemv driver (gemv = one token): token chunks × output panels × token
//! tiles, generic over a per-ISA [`TileKernel`] (the tile of one layout, the SwiGLU
//! epilogue, the store). The layout dispatch is written here once.
//!
//! The SIMD kernels call [`drive`] from their `#[target_feature]` roots in `crate::arch`:
//! it and [`TileKernel`]'s methods are `#[inline(always)]`, so each root compiles into one
//! function with its features (a kernel value exists only once its ISA was checked, which
//! is what makes the methods safe). The scalar reference ([`super::scalar::Scalar`])
//! goes through the same loop.

use super::{Layout, PackedMatrix, QuantizedActivation, PANEL};
use std::ops::Range;

/// Activation rows whose codes stay cache-resident while all panels of the range are swept
/// (a multiple of every tile size; AVX2: 8..128 measured within noise, 512 ~8% slower).
const TOKEN_CHUNK: usize = 24;

/// The activation rows `t..t+N` a tile reads, with the kernel's rewrite of the chunk of
/// rows starting at `chunk` ([`TileKernel::prepare`]).
pub(crate) struct TileRows<'a, P> {
    pub act: &'a QuantizedActivation,
    pub t: usize,
    pub chunk: usize,
    pub prep: &'a P,
}

/// One ISA's tile kernels on the packed layout. `q`, `s`: the panel's codes and scales
/// ([`PackedMatrix::panel_quants`], [`PackedMatrix::panel_scales`]); every method returns
/// the panel's 8 outputs for each of the `N` tokens, and may panic on short slices (the
/// driver's shapes are validated by `super::check`), never read out of bounds.
pub(crate) trait TileKernel: Copy {
    /// The 8 outputs of one panel for one token.
    type Acc: Copy;
    /// A per-chunk rewrite of the activation rows (AVX2: interleaved records; else `()`).
    type Prep;
    /// The widest tile, so that wider ones are never instantiated.
    const MAX_TILE: usize;

    /// Tokens per tile for a gemm of `tokens` rows on `layout` (at most `MAX_TILE`), and
    /// the empty rewrite state for it.
    fn plan(self, layout: Layout, tokens: usize) -> (usize, Self::Prep);
    /// Rewrites the activation rows `rows` (one chunk, tiles of `tile`) before its tiles run.
    fn prepare(self, act: &QuantizedActivation, rows: Range<usize>, tile: usize, prep: &mut Self::Prep);

    fn q4_0<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    fn q4_1<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    /// Q4_1 with (d, m) shared by 64-element groups.
    fn q4_1x64<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    fn q8_0<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    fn q5_0<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    fn q4_k<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    fn q5_k<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    fn q6_k<const N: usize>(self, q: &[u8], s: &[u16], a: &TileRows<Self::Prep>) -> [Self::Acc; N];
    /// F16 weights times the f32 activation rows.
    fn f16<const N: usize>(self, q: &[u8], a: &TileRows<Self::Prep>) -> [Self::Acc; N];

    fn zero(self) -> Self::Acc;
    /// `silu(g) · u` lane by lane.
    fn silu_mul(self, g: Self::Acc, u: Self::Acc) -> Self::Acc;
    /// Writes the first `out.len()` (at most 8) outputs of `v`.
    fn store(self, v: Self::Acc, out: &mut [f32]);
}

/// The gemm over `tokens` × `panels` (contract of `super::check`): token `t`'s row `r`
/// goes to `out[(t - tokens.start)·ld + r - 8·panels.start]`; with `swiglu`, internal
/// panels `2p, 2p+1` (gate, up) give output panel `p`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn drive<K: TileKernel>(
    k: K,
    w: &PackedMatrix,
    act: &QuantizedActivation,
    tokens: Range<usize>,
    out: &mut [f32],
    ld: usize,
    panels: Range<usize>,
    swiglu: bool,
) {
    let r0 = panels.start * PANEL;
    let (tile, mut prep) = k.plan(w.layout, tokens.len());
    let tile = tile.clamp(1, K::MAX_TILE);
    let mut c0 = tokens.start;
    while c0 < tokens.end {
        let c1 = (c0 + TOKEN_CHUNK).min(tokens.end);
        k.prepare(act, c0..c1, tile, &mut prep);
        for p in panels.clone() {
            let n = (w.rows - p * PANEL).min(PANEL);
            let off = p * PANEL - r0;
            let mut t = c0;
            while t < c1 {
                let m = (c1 - t).min(tile);
                let a = TileRows { act, t, chunk: c0, prep: &prep };
                let o = &mut out[(t - tokens.start) * ld + off..];
                match m {
                    6 if K::MAX_TILE >= 6 => emit::<K, 6>(k, w, p, &a, o, ld, n, swiglu),
                    5 if K::MAX_TILE >= 5 => emit::<K, 5>(k, w, p, &a, o, ld, n, swiglu),
                    4 if K::MAX_TILE >= 4 => emit::<K, 4>(k, w, p, &a, o, ld, n, swiglu),
                    3 if K::MAX_TILE >= 3 => emit::<K, 3>(k, w, p, &a, o, ld, n, swiglu),
                    2 if K::MAX_TILE >= 2 => emit::<K, 2>(k, w, p, &a, o, ld, n, swiglu),
                    _ => emit::<K, 1>(k, w, p, &a, o, ld, n, swiglu),
                }
                t += m;
            }
        }
        c0 = c1;
    }
}

/// Computes output panel `p` for tokens `t..t+N` and writes `n` rows of each at
/// `out[j·ld ..]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn emit<K: TileKernel, const N: usize>(
    k: K,
    w: &PackedMatrix,
    p: usize,
    a: &TileRows<K::Prep>,
    out: &mut [f32],
    ld: usize,
    n: usize,
    swiglu: bool,
) {
    // One call site of `tile` (it is inlined: one copy per layout and N, not two).
    let mut r = [[k.zero(); N]; 2];
    let (first, count) = if swiglu { (2 * p, 2) } else { (p, 1) };
    for (i, r) in r.iter_mut().take(count).enumerate() {
        *r = tile::<K, N>(k, w, first + i, a);
    }
    let mut v = r[0];
    if swiglu {
        for j in 0..N {
            v[j] = k.silu_mul(v[j], r[1][j]);
        }
    }
    for (j, v) in v.into_iter().enumerate() {
        k.store(v, &mut out[j * ld..j * ld + n]);
    }
}

/// The 8 outputs of internal panel `p` for the tile's `N` tokens: the layout dispatch.
#[inline(always)]
fn tile<K: TileKernel, const N: usize>(
    k: K,
    w: &PackedMatrix,
    p: usize,
    a: &TileRows<K::Prep>,
) -> [K::Acc; N] {
    let (q, s) = (w.panel_quants(p), w.panel_scales(p));
    match w.layout {
        Layout::Q4_0 => k.q4_0::<N>(q, s, a),
        Layout::Q4_1 => k.q4_1::<N>(q, s, a),
        Layout::Q4_1x64 => k.q4_1x64::<N>(q, s, a),
        Layout::Q8_0 => k.q8_0::<N>(q, s, a),
        Layout::Q5_0 => k.q5_0::<N>(q, s, a),
        Layout::Q4_K => k.q4_k::<N>(q, s, a),
        Layout::Q5_K => k.q5_k::<N>(q, s, a),
        Layout::Q6_K => k.q6_k::<N>(q, s, a),
        Layout::F16 => k.f16::<N>(q, a),
    }
}
