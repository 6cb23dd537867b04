//! aarch64 kernels on the packed 8-row panels of [`crate::matmul::packed`]: plain NEON,
//! dotprod (`sdot`) and i8mm (`smmla`), for Q4_0, Q4_1 (+ merged 64-groups), Q8_0, Q5_0,
//! Q4_K, Q5_K and Q6_K; F16 (f32 activations, `fcvtl` + `fmla`) on every level.
//!
//! The layout is the x86 one, read 128 bits at a time: each 32-byte vector of a (panel,
//! block) record is two NEON registers, rows 0-3 and rows 4-7, one row per 32-bit lane
//! (4 code bytes of that row). Per (panel, 32-block, token) the integer cores return
//! `Σ code·q` for the 8 rows as two `int32x4_t` (rows 0-3, 4-7) — exact, so every ISA
//! gives the same integers — and the shared float epilogue adds one FMA per block per
//! 4 rows, in the scalar reference's order (bit-identical to [`crate::matmul::scalar`]).
//! No horizontal reduction per row anywhere.
//!
//! The integer cores ([`cores`]) are written once, generic over a format's
//! [`cores::Codes`]: how a record yields, per vector `v` and row half, the codes of
//! elements `4v..4v+4` and `16+4v..16+4v+4` (Q4 nibbles; Q5 / Q6 nibbles or-ed with bits
//! from their planes, unsigned; Q8_0 bytes).
//!
//! * **NEON**: the activation's 4-byte group is broadcast (`ld1r`-style `dup .4s`);
//!   `smlal`/`smlal2` multiply 8 codes x 8 activation bytes into int16 lanes (Q4/Q5/Q6:
//!   at most 8 products per lane, kept under 32767 — see
//!   [`cores::Codes::NARROW`]), `sadalp` widens to int32 once per block and `addp .4s`
//!   leaves a lane per row. Q8_0: `smull` + `smlal` (2 products <= 2·128·127 = 32512)
//!   then `sadalp` after every vector.
//! * **dotprod**: `sdot v.4s, w.16b, a.4b[i]` — the by-element form picks the activation
//!   4-byte group `i` out of the 16 activation bytes held in one register, so one `sdot`
//!   does 4 bytes x 4 rows; a block is 16 `sdot` per token (8 code registers x 2 row
//!   halves) whatever the format.
//! * **i8mm**: `smmla` multiplies a 2x8 weight tile by an 8x2 activation tile. `zip1/zip2
//!   .4s` of two consecutive 4-byte-group vectors gives two rows' 8 consecutive elements
//!   (rows `2k, 2k+1`), and `zip1/zip2 .2d` of two tokens' activation registers gives the
//!   matching 8 elements of a token pair. A block is 16 `smmla` per token pair (half the
//!   `sdot` count); the 2x2 results are de-interleaved with `uzp1/uzp2 .4s`. An odd token
//!   and gemv (one token) use the dotprod core.
//!
//! fp16 scales: 8 per (panel, block), widened with `fcvtl`/`fcvtl2` (asm: the Rust
//! `float16x4_t` intrinsics are unstable). The `sdot`/`smmla` intrinsics are unstable too:
//! they are `asm!` inside `#[target_feature]` functions.
//!
//! Structure: the levels' [`Kernels`] entry points (`Kernels::run`, one per level and
//! layout) are the `#[target_feature]` roots of [`crate::matmul::driver`]; everything below
//! them (driver, tiles, epilogues, the [`Core`] integer sums) is
//! `#[inline(always)]` without target features, so each root compiles into one function
//! with its features, and the tiny `#[target_feature]` asm primitives ([`sdot_lane`],
//! [`smmla`], [`f16x8`]) inline into it. (A `#[target_feature]` on the mid-sized cores
//! kept LLVM from inlining them: one call per block, results through memory.) The cores
//! carry no target feature themselves; their safety contracts name the level the CPU
//! must have.

// Kernels index several per-token arrays in lockstep.
#![allow(clippy::needless_range_loop)]

pub mod act;
pub mod cores;
pub mod dot;
pub mod f16;
pub mod ops;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

pub(crate) use super::TileRows;
use cores::{Codes, Sums};

use crate::matmul::driver::{self, Chunk, Job, Kernels};
use crate::matmul::{Layout, PackedMatrix, QuantizedActivation, PANEL};
use crate::Isa;
use std::arch::aarch64::*;
use std::arch::asm;

/// The 8 rows of one panel: rows 0-3 and rows 4-7.
pub type I32x8 = [int32x4_t; 2];
/// The 8 rows of one panel: rows 0-3 and rows 4-7.
pub type F32x8 = [float32x4_t; 2];

/// The integer block sums of one ISA level (the schedules are in [`cores`], generic over
/// the format's [`cores::Codes`]).
pub trait Core {
    /// Activation rows per weight-panel pass in gemm.
    const TILE: usize;
    /// `Σ code·q` over one packed (panel, block) record of `K` for tokens `0..N`: `[0]` the
    /// whole block, or with `SPLIT` the low half (elements 0..16) with `[1]` the high half.
    ///
    /// # Safety
    /// The CPU supports this core's level; `qp` is valid for one record of `K` and each
    /// `ap[t]` for 32 bytes.
    unsafe fn sums<K: Codes, const N: usize, const SPLIT: bool>(
        qp: *const u8,
        ap: &[*const i8; N],
    ) -> Sums<N>;
}

/// Plain NEON (`smlal`, `sadalp`); a value proves the CPU has it (`Neon::detect`).
#[derive(Clone, Copy)]
pub struct Neon(());
/// NEON + `sdot`; a value proves the CPU has it.
#[derive(Clone, Copy)]
pub struct Dotprod(());
/// NEON + `sdot` + `smmla`; a value proves the CPU has it.
#[derive(Clone, Copy)]
pub struct I8mm(());

macro_rules! core_impl {
    ($level:ty, $tile:expr, $sums:ident) => {
        impl Core for $level {
            const TILE: usize = $tile;
            #[inline(always)]
            unsafe fn sums<K: Codes, const N: usize, const SPLIT: bool>(
                qp: *const u8,
                ap: &[*const i8; N],
            ) -> Sums<N> {
                cores::$sums::<K, N, SPLIT>(qp, ap)
            }
        }
    };
}
core_impl!(Neon, 2, sums_neon);
core_impl!(Dotprod, 4, sums_dotprod);
core_impl!(I8mm, 4, sums_i8mm);

// ---- asm primitives ------------------------------------------------------------------

/// `acc.4s += w.16b · a.4b[L]`: lane `i` of `acc` gains the dot of bytes `4i..4i+4` of
/// `w` with bytes `4L..4L+4` of `a` (signed x signed).
///
/// # Safety
/// The CPU supports NEON and dotprod. `L < 4`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn sdot_lane<const L: usize>(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    macro_rules! go {
        ($l:literal) => {
            asm!(concat!("sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[", $l, "]"),
                 acc = inout(vreg) acc, w = in(vreg) w, a = in(vreg) a,
                 options(pure, nomem, nostack, preserves_flags))
        };
    }
    match L {
        0 => go!("0"),
        1 => go!("1"),
        2 => go!("2"),
        _ => go!("3"),
    }
    acc
}

/// `smmla`: `w` = two rows of 8 bytes (`w0` = bytes 0..8, `w1` = 8..16), `a` = two
/// columns (tokens) likewise; `acc += [w0·a0, w0·a1, w1·a0, w1·a1]`.
///
/// # Safety
/// The CPU supports NEON and i8mm.
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub unsafe fn smmla(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    asm!("smmla {acc:v}.4s, {w:v}.16b, {a:v}.16b", acc = inout(vreg) acc, w = in(vreg) w,
         a = in(vreg) a, options(pure, nomem, nostack, preserves_flags));
    acc
}

/// Adds block `b`'s `(dw·da)·i` to each token's 8 rows (`i`: the exact int32 block sums):
/// the one FMA per block of every tile, in the scalar reference's order.
///
/// # Safety
/// NEON available; `b < r.nb`.
#[inline(always)]
pub unsafe fn scale_add<const N: usize>(
    acc: &mut [F32x8; N],
    dw: F32x8,
    r: &TileRows<N>,
    b: usize,
    i: &[I32x8; N],
) {
    for t in 0..N {
        for h in 0..2 {
            let i = vcvtq_f32_s32(i[t][h]);
            acc[t][h] = vfmaq_f32(acc[t][h], vmulq_n_f32(dw[h], r.ad[t][b]), i);
        }
    }
}

/// Widens 8 fp16 (raw bits at `p`) to f32 with `fcvtl` / `fcvtl2` (base ARMv8 FP).
///
/// # Safety
/// `p` valid for 8 `u16`. (`fcvtl` is base ARMv8 FP/SIMD, which every aarch64 target has:
/// no target feature, so it inlines everywhere.)
#[inline(always)]
pub unsafe fn f16x8(p: *const u16) -> F32x8 {
    let h = vld1q_u16(p);
    let (lo, hi): (float32x4_t, float32x4_t);
    asm!("fcvtl {lo:v}.4s, {h:v}.4h", "fcvtl2 {hi:v}.4s, {h:v}.8h",
         // `lo` is written before `h` is read again: an early-clobber `out`.
         lo = out(vreg) lo, hi = lateout(vreg) hi, h = in(vreg) h,
         options(pure, nomem, nostack, preserves_flags));
    [lo, hi]
}

/// Broadcasts the 4 bytes at `p` to the 4 lanes (`dup .4s`).
///
/// # Safety
/// `p` valid for 4 bytes (any alignment).
#[inline(always)]
pub unsafe fn dup4(p: *const i8) -> int8x16_t {
    vreinterpretq_s8_s32(vdupq_n_s32((p as *const i32).read_unaligned()))
}

// ---- matmul kernels for the driver ---------------------------------------------------

/// The matmul kernels of level `$level` ([`Core`] `$core`) for [`crate::matmul::driver`],
/// its entry point compiled with `$features` (the three levels differ only in those).
macro_rules! level_kernels {
    ($level:ident, $features:literal) => {
        impl $level {
            /// The token if this CPU runs the level.
            pub fn detect() -> Option<Self> {
                Isa::$level.is_available().then_some($level(()))
            }
        }

        impl Kernels for $level {
            type Rows = F32x8;
            type Staged = ();

            #[inline(always)]
            fn run<const L: u8>(self, job: Job) {
                /// # Safety
                /// The CPU supports the level.
                #[target_feature(enable = $features)]
                unsafe fn root<const L: u8>(k: $level, job: Job) {
                    driver::drive::<$level, L>(k, job)
                }
                // SAFETY: the token proves the CPU features.
                unsafe { root::<L>(self, job) }
            }

            #[inline(always)]
            fn token_tile(self, _: Layout, _: usize) -> usize {
                <$level as Core>::TILE
            }

            #[inline(always)]
            fn tile<const L: u8, const N: usize>(
                self,
                w: &PackedMatrix,
                p: usize,
                chunk: &Chunk<()>,
                t: usize,
            ) -> [F32x8; N] {
                // SAFETY: the token proves the CPU features.
                unsafe { tile::<$level, L, N>(w, p, chunk.act, t) }
            }

            #[inline(always)]
            fn silu_mul(self, g: F32x8, u: F32x8) -> F32x8 {
                // SAFETY: the token proves NEON.
                unsafe { [silu_mul(g[0], u[0]), silu_mul(g[1], u[1])] }
            }

            #[inline(always)]
            fn store8(self, v: F32x8, out: &mut [f32; PANEL]) {
                // SAFETY: the token proves NEON; `out` holds 8 f32.
                unsafe {
                    vst1q_f32(out.as_mut_ptr(), v[0]);
                    vst1q_f32(out.as_mut_ptr().add(4), v[1]);
                }
            }
        }
    };
}
level_kernels!(Neon, "neon");
level_kernels!(Dotprod, "neon,dotprod");
level_kernels!(I8mm, "neon,dotprod,i8mm");

/// The 8 outputs of internal panel `p` (stored as `Layout::ALL[L]`) for tokens `t..t+N`.
/// Safety: `C`'s level.
///
/// Each layout's branch is an `if const`, so rustc emits only layout `L`'s tile (every
/// tile here is `#[inline(always)]`; a `match` on the layout inlined all nine into every
/// instance first, see [`Kernels::tile`]).
#[inline(always)]
unsafe fn tile<C: Core, const L: u8, const N: usize>(
    w: &PackedMatrix,
    p: usize,
    act: &QuantizedActivation,
    t: usize,
) -> [F32x8; N] {
    let (q, s) = (w.panel_quants(p), w.panel_scales(p));
    // F16 reads the f32 rows; the quantized layouts their codes and scales.
    let rows = || TileRows::new(act, t);
    macro_rules! by_layout {
        ($($l:ident => $tile:expr,)*) => {
            $(if const { L == Layout::$l as u8 } {
                return $tile;
            })*
        };
    }
    by_layout! {
        Q4_0 => q4_0::tile::<C, N>(q, s, rows()),
        Q4_1 => q4_1::tile::<C, N>(q, s, rows()),
        Q4_1x64 => q4_1::tile_x64::<C, N>(q, s, rows()),
        Q8_0 => q8_0::tile::<C, N>(q, s, rows()),
        Q4_K => q4_k::tile::<C, N>(q, s, rows()),
        Q5_K => q5_k::tile::<C, N>(q, s, rows()),
        Q6_K => q6_k::tile::<C, N>(q, s, rows()),
        Q5_0 => q5_0::tile::<C, N>(q, s, rows()),
        F16 => f16::tile::<N>(q, act, t),
    }
    unreachable!("layout index {L} out of range")
}

/// `silu(g) * u = g / (1 + exp(-g)) * u` (the NEON `exp` of [`ops`], ~2 ulp;
/// saturates to ±0 / `g·u` at the ends).
///
/// # Safety
/// NEON available.
#[inline(always)]
pub unsafe fn silu_mul(g: float32x4_t, u: float32x4_t) -> float32x4_t {
    let e = ops::exp(vnegq_f32(g));
    vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0), e)), u)
}
