//! VNNI matmul tiles ([`crate::Isa::Avx512Vnni`], [`crate::Isa::AvxVnni`]) on the same packed 8-row panels and
//! interleaved activation records as the AVX2 tiles of [`super`]: `vpdpbusd` (unsigned codes
//! × signed int8 activations, four products summed into each int32 lane) replaces AVX2's
//! `maddubs` + `add` + `madd(·, 1)` chain, so a block's exact int32 sums cost a quarter of the
//! instructions, and the 32 vector registers of AVX-512 hold 8-token tiles (two int32
//! accumulators per token, 16 independent `vpdpbusd` chains; AVX-VNNI's 16 hold 4). The two
//! levels share every tile: they differ only in the `vpdpbusd` encoding ([`Dp`]), and each
//! compiles the driver and the tiles in its own `#[target_feature]` root.
//!
//! The integer sums are the same integers as AVX2's and the scalar reference's, and the float
//! operations per block are the same, in the same order: every tile here reproduces the
//! scalar path bit for bit. Layouts without a VNNI tile here run the AVX2 tiles inside this
//! level's `#[target_feature]` root. Decode (one token) keeps the AVX2 row tiles: it is bound
//! by reading the weights, not by the dot products.
//!
//! Every function here is `unsafe` only because it is compiled with the AVX-512 VNNI target
//! features: the caller must have checked that the CPU supports them ([`Vnni::detect`]). The
//! tiles are `#[inline(always)]` without target features of their own and are reached only
//! from a level's root, where they inline (as the AVX2 tiles inline into theirs).

// Kernels index several per-token arrays in lockstep.
#![allow(clippy::needless_range_loop)]

pub mod lanes;
pub mod q4;
pub mod q5_0;
pub mod q6_k;
pub mod q8_0;
mod walk;

use super::{has_il, record};
use crate::matmul::driver::{self, Chunk, Job, Kernels};
use crate::matmul::{Layout, PackedMatrix};
use crate::Isa;
use lanes::{Lanes, Y8, Z16};
use q4::Panels;
use std::arch::x86_64::*;
use walk::walk;

/// One VNNI level: its `vpdpbusd` encoding, its tile width, and the `#[target_feature]`
/// root that compiles the driver and every tile for it.
pub trait Dp: Copy + Send + Sync + 'static {
    /// Tokens per interleaved tile of the VNNI layouts: two int32 accumulators per token
    /// plus 4 working vectors must fit the level's registers (16 ymm for AVX-VNNI, 32 with
    /// AVX-512).
    const TOKENS: usize;
    /// A call over at most this many tokens runs them as one tile (one pass over each
    /// weight panel), wider than [`Dp::TOKENS`] where the registers allow.
    const FEW: usize = Self::TOKENS;
    /// Runs [`driver::drive`] for `k` inside a function compiled with this level's features.
    fn drive<const L: u8>(k: Vnni<Self>, job: Job);
    /// `acc + Σ₄ a·b` per int32 lane, `a` unsigned and `b` signed bytes.
    ///
    /// # Safety
    /// Only called (inlined) inside [`Dp::drive`]'s root: the CPU has this level's features.
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
    /// Whether the level has 16-lane (two-panel) tiles, [`Dp::tile16`].
    const PAIRS: bool = false;
    /// Two panels of a VNNI layout at once ([`Z16`]), as two 8-row halves.
    ///
    /// # Safety
    /// Inside [`Dp::drive`]'s root; only called when [`Dp::PAIRS`].
    #[inline(always)]
    unsafe fn tile16<const N: usize>(
        _layout: Layout,
        _w: Panels,
        _a: &[u8],
        _nb: usize,
    ) -> [[__m256; 2]; N] {
        unreachable!("no 16-lane tiles at this level")
    }
}

/// [`Dp::drive`] of level `$level`: [`driver::drive`] inside a root compiled with the
/// level's target features `$features` (the levels' roots differ in nothing else).
macro_rules! drive_in_root {
    ($level:ident, $features:literal) => {
        #[inline(always)]
        fn drive<const L: u8>(k: Vnni<Self>, job: Job) {
            /// # Safety
            /// The CPU supports the level's features (`$features`).
            #[target_feature(enable = $features)]
            unsafe fn root<const L: u8>(k: Vnni<$level>, job: Job) {
                driver::drive::<Vnni<$level>, L>(k, job)
            }
            // SAFETY: the token proves the CPU features.
            unsafe { root::<L>(k, job) }
        }
    };
}

/// AVX-512 F/BW/VL + VNNI: EVEX `vpdpbusd` on ymm registers, 32 of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx512;

/// AVX-VNNI (Intel Alder Lake and later client cores, AMD Zen5): the VEX encoding, 16
/// registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvxVnni;

impl Dp for Avx512 {
    const TOKENS: usize = 8;
    /// A speculative verify step (1 + 8 tokens) as one 9-token tile instead of 5 + 4: each
    /// panel's codes are unpacked once, and the weights stream while every token's products
    /// run. Measured (one thread, 100 MNN-Pocket-shaped 2560x896 matrices, 130 MB, 9-token
    /// calls, one tile or two alternating in one process, Sapphire Rapids class): weight
    /// GB/s 6.6 -> 7.4 (Q4_1x64), 5.0 -> 5.6 (Q4_0), 7.4 -> 8.6 (Q8_0), 6.0 -> 6.9 (Q5_0),
    /// Q4_K 4.6 -> 5.4, Q6_K 5.2 -> 5.9 (896x2560); Q4_1x64 at 10 / 11 / 12 tokens +6 / +5 /
    /// +2 % (from 10 tokens the accumulators outgrow the registers and spill).
    const FEW: usize = 12;

    drive_in_root!(Avx512, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni");

    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: inside the root above (contract).
        unsafe { _mm256_dpbusd_epi32(acc, a, b) }
    }

    const PAIRS: bool = true;

    #[inline(always)]
    unsafe fn tile16<const N: usize>(
        layout: Layout,
        w: Panels,
        a: &[u8],
        nb: usize,
    ) -> [[__m256; 2]; N] {
        // SAFETY: inside the root above (contract).
        unsafe {
            let z = vnni_tile::<Z16, N>(layout, w, a, nb);
            // A loop, not `array::from_fn`: a closure is compiled without this root's
            // features, so the casts inside it were calls (3.9 % of a pp512 prefill's
            // samples; with the attention fix below, pp512 +6-10 % on Ice Lake).
            let mut out = [[_mm256_setzero_ps(); 2]; N];
            for j in 0..N {
                let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(z[j]));
                out[j] = [_mm512_castps512_ps256(z[j]), _mm256_castpd_ps(hi)];
            }
            out
        }
    }
}

impl Dp for AvxVnni {
    const TOKENS: usize = 4;

    drive_in_root!(AvxVnni, "avx2,fma,f16c,avxvnni");

    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: inside the root above (contract).
        unsafe { _mm256_dpbusd_avx_epi32(acc, a, b) }
    }
}

/// Proof that this CPU runs VNNI level `D`'s bodies: only [`Vnni::detect`] makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vnni<D: Dp>(D);

impl<D: Dp> Vnni<D> {
    /// The token for `isa` when it is `D`'s level and this CPU runs it.
    fn detect_as(isa: Isa, d: D) -> Option<Vnni<D>> {
        isa.is_available().then_some(Vnni(d))
    }
}

impl Vnni<Avx512> {
    pub fn detect() -> Option<Self> {
        Vnni::detect_as(Isa::Avx512Vnni, Avx512)
    }
}

impl Vnni<AvxVnni> {
    pub fn detect() -> Option<Self> {
        Vnni::detect_as(Isa::AvxVnni, AvxVnni)
    }
}

/// Whether `layout` has VNNI tiles here.
const fn has_vnni(layout: Layout) -> bool {
    matches!(
        layout,
        Layout::Q4_0
            | Layout::Q4_1
            | Layout::Q4_1x64
            | Layout::Q4_K
            | Layout::Q5_0
            | Layout::Q6_K
            | Layout::Q8_0
    )
}

impl<D: Dp> Kernels for Vnni<D> {
    avx2_rows!();

    const MAX_TILE: usize = if D::FEW > D::TOKENS {
        D::FEW
    } else {
        D::TOKENS
    };

    #[inline(always)]
    fn run<const L: u8>(self, job: Job) {
        D::drive::<L>(self, job)
    }

    #[inline(always)]
    fn stages(self, layout: Layout, tokens: usize) -> bool {
        tokens > 1 && (has_il(layout) || has_vnni(layout))
    }

    #[inline(always)]
    fn token_tile(self, layout: Layout, tokens: usize) -> usize {
        match tokens > 1 {
            true if has_vnni(layout) && tokens <= D::FEW => tokens,
            true if has_vnni(layout) => D::TOKENS,
            true if has_il(layout) => 4,
            _ => super::token_tile(layout),
        }
    }

    #[inline(always)]
    fn tile<const L: u8, const N: usize>(
        self,
        w: &PackedMatrix,
        p: usize,
        chunk: &Chunk<Vec<u8>>,
        t: usize,
    ) -> [__m256; N] {
        let layout = Layout::ALL[L as usize];
        let staged = !chunk.staged.is_empty();
        if staged && has_vnni(layout) {
            let a = record(chunk, w.blocks(), t, N);
            // SAFETY: the token proves the CPU features.
            return unsafe { vnni_tile::<Y8<D>, N>(layout, panels(w, p), a, w.blocks()) };
        }
        // The AVX2 tiles (compiled into this level's root), as `super::Simd` picks them.
        // SAFETY: the token proves the CPU features (a superset of AVX2's).
        unsafe { super::avx2_tile::<N>(layout, w, p, chunk, t) }
    }

    #[inline(always)]
    fn pairs(self, layout: Layout, tokens: usize, swiglu: bool) -> bool {
        D::PAIRS && has_vnni(layout) && tokens >= pairs_from(layout, swiglu)
    }

    #[inline(always)]
    fn tile_pair<const L: u8, const N: usize>(
        self,
        w: &PackedMatrix,
        p: usize,
        chunk: &Chunk<Vec<u8>>,
        t: usize,
    ) -> [[__m256; 2]; N] {
        let layout = Layout::ALL[L as usize];
        if D::PAIRS && chunk.pairs && !chunk.staged.is_empty() && has_vnni(layout) {
            let pw = panels(w, p);
            let a = record(chunk, w.blocks(), t, N);
            // SAFETY: the token proves the CPU features; PAIRS checked.
            return unsafe { D::tile16::<N>(layout, pw, a, w.blocks()) };
        }
        let a = self.tile::<L, N>(w, p, chunk, t);
        let b = self.tile::<L, N>(w, p + 1, chunk, t);
        // A loop, not `array::from_fn` (a closure is compiled without the root's features).
        let mut out = [[a[0], b[0]]; N];
        for j in 1..N {
            out[j] = [a[j], b[j]];
        }
        out
    }
}

/// Tokens from which a call's two-panel tiles ([`Dp::tile16`]: two panels in one `zmm`)
/// beat one-panel tiles. A call of a few tokens streams its weights from DRAM and is bound
/// by that, and there one panel at a time (one code and one scale stream) streamed faster
/// than two: single-panel ÷ two-panel time, 1 thread, 168 MB matrices, both kinds
/// alternating in one process (Zen4; plain / gate-up): Q4_0 0.75 / 0.73 at 2 tokens, 0.95
/// / 0.87 at 4, 1.05 at 9 (plain); Q4_1 0.74 / 0.73 at 2, 0.90 / 0.93 at 4; Q8_0 0.86 /
/// 0.90 at 2, 1.06 / 0.97 at 4, 1.10 / 1.09 at 6; Q4_K 0.60 / 0.56 at 2, 0.81 / 0.80 at 8,
/// 0.87 / 0.89 at 16; Q6_K 0.69 / 0.65 at 2, 0.90 / 0.90 at 8; plain Q4_0 / Q4_1 at 9
/// tokens 1.05 / 1.09 but gate-up at 8 0.96 / 0.93. From 16 tokens (the batched path:
/// prefill) two-panel tiles stay as they were measured for prefill.
const fn pairs_from(layout: Layout, swiglu: bool) -> usize {
    match layout {
        Layout::Q8_0 => 5,
        Layout::Q4_K | Layout::Q6_K => 16,
        _ if swiglu => 16,
        _ => 9,
    }
}

/// Internal panel `p` of `w` and the panels after it (a 16-lane tile also reads `p + 1`).
#[inline(always)]
fn panels(w: &PackedMatrix, p: usize) -> Panels<'_> {
    let (q, s) = w.panels_from(p);
    Panels {
        q,
        s,
        q_step: w.panel_quants(0).len(),
        s_step: w.panel_scales(0).len(),
    }
}

/// The VNNI tile of `layout` at width `L`.
///
/// # Safety
/// Inside the level's root ([`Dp::drive`]); `layout` has VNNI tiles ([`has_vnni`]).
#[inline(always)]
unsafe fn vnni_tile<L: Lanes, const N: usize>(
    layout: Layout,
    w: Panels,
    a: &[u8],
    nb: usize,
) -> [L::F; N] {
    // SAFETY: contract.
    unsafe {
        match layout {
            Layout::Q4_0 => walk::<q4::Q4_0, L, N>(w, a, nb),
            Layout::Q4_1 => walk::<q4::Q4_1, L, N>(w, a, nb),
            Layout::Q4_1x64 => walk::<q4::Q4_1x64, L, N>(w, a, nb),
            Layout::Q4_K => walk::<q4::Q4_K, L, N>(w, a, nb),
            Layout::Q5_0 => walk::<q5_0::Q5_0, L, N>(w, a, nb),
            Layout::Q6_K => walk::<q6_k::Q6_K, L, N>(w, a, nb),
            _ => walk::<q8_0::Q8_0, L, N>(w, a, nb),
        }
    }
}
