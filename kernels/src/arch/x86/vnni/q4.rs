//! Q4_0, Q4_1, merged Q4_1 (64-groups) and Q4_K tiles on interleaved activation records
//! with `vpdpbusd`: per weight vector `v` of a block (32 bytes: 4 code bytes of each of the
//! 8 rows of a panel), the low nibbles meet token `t`'s 4 codes at `record + 8Nv + 8t` and
//! the high nibbles the 4 at `+ 4` ([`super::super::interleave`]); each `vpdpbusd` adds
//! the four nibble × code products of every row into its int32 lane.
//!
//! Written once over the register width [`Lanes`] (one panel per ymm, or two per zmm:
//! `Panels` says where the second panel's codes and scales are). The float part of each
//! block is the AVX2 tiles' (`super::super::q4_0::tile_il`, `q4_1::tile_il`,
//! `tile_x64_il`, `q4_k::tile_il`), operation for operation, so every width and level gives
//! the scalar reference's bits.

use super::lanes::Lanes;
use super::walk::{At, Size, Step};
use crate::arch::x86::IL_REC;

/// The weights a tile reads: `q`/`s` start at the first panel's codes/scales; a 16-lane
/// tile reads the second panel `q_step` bytes / `s_step` u16s further on.
#[derive(Clone, Copy)]
pub struct Panels<'a> {
    pub q: &'a [u8],
    pub s: &'a [u16],
    pub q_step: usize,
    pub s_step: usize,
}

impl Panels<'_> {
    /// Checks that both panels' `qb` code bytes and `sb` scales are in bounds.
    pub(super) fn check<L: Lanes>(&self, qb: usize, sb: usize) {
        let second = L::ROWS / 8 - 1;
        assert!(
            self.q.len() >= second * self.q_step + qb && self.s.len() >= second * self.s_step + sb
        );
    }
}

/// `Σ nibble·a` per row (int32 lanes) of one packed Q4 block (128 code bytes at `qp`, the
/// second panel's at `qp + qs`) for the N tokens of the interleaved record at `ap`: exact
/// (`|Σ| <= 32·15·128`). `SPLIT`: low and high nibbles in separate accumulators (two
/// dependency chains per token, 2N registers), else one chain (N registers) where a tile
/// needs the registers for other values.
///
/// # Safety
/// Inside the level's root; `qp` (and `qp + qs`) valid for 128 bytes, `ap` for `32·N`.
#[inline(always)]
pub(super) unsafe fn block_sums_il<L: Lanes, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    qs: usize,
    ap: *const u8,
) -> [L::I; N] {
    // SAFETY: in the level's root (contract).
    let mut lo = [unsafe { L::zero_i() }; N];
    let mut hi = lo;
    for v in 0..4 {
        // SAFETY: vector v's 32 code bytes (per panel) and slot v's 8N activation bytes
        // are in bounds (contract).
        unsafe {
            let x = L::codes(qp.add(32 * v), qs);
            let (l, h) = (L::lo4(x), L::hi4(x));
            for t in 0..N {
                let o = ap.add(8 * N * v + 8 * t);
                lo[t] = L::dp(lo[t], l, o);
                if SPLIT {
                    hi[t] = L::dp(hi[t], h, o.add(4));
                } else {
                    lo[t] = L::dp(lo[t], h, o.add(4));
                }
            }
        }
    }
    if SPLIT {
        for t in 0..N {
            // SAFETY: in the level's root.
            lo[t] = unsafe { L::add(lo[t], hi[t]) };
        }
    }
    lo
}

/// How a record's codes are rebuilt from more than the nibbles (Q5_0, Q6_K: their bit
/// planes, held in registers). A trait, not a closure: a closure is compiled without the
/// level's target features and was called, not inlined, from the tiles (3x slower).
pub(super) trait Decode<L: Lanes>: Copy {
    /// Vector `v`'s 32 code bytes `x` (per panel) as the unsigned codes that meet the low /
    /// high nibbles' activation bytes.
    ///
    /// # Safety
    /// Inside the level's root.
    unsafe fn decode(self, x: L::I, v: usize) -> (L::I, L::I);
}

/// As [`block_sums_il`] split, for records whose codes `d` rebuilds: the sums of the low
/// (elements `0..16`) and high (`16..32`) halves, apart.
///
/// # Safety
/// As [`block_sums_il`].
#[inline(always)]
pub(super) unsafe fn block_sums_lohi<L: Lanes, const N: usize>(
    qp: *const u8,
    qs: usize,
    ap: *const u8,
    d: impl Decode<L>,
) -> ([L::I; N], [L::I; N]) {
    // SAFETY: in the level's root (contract).
    let mut lo = [unsafe { L::zero_i() }; N];
    let mut hi = lo;
    for v in 0..4 {
        // SAFETY: vector v's 32 code bytes (per panel) and slot v's 8N activation bytes
        // are in bounds (contract).
        unsafe {
            let (l, h) = d.decode(L::codes(qp.add(32 * v), qs), v);
            for t in 0..N {
                let o = ap.add(8 * N * v + 8 * t);
                lo[t] = L::dp(lo[t], l, o);
                hi[t] = L::dp(hi[t], h, o.add(4));
            }
        }
    }
    (lo, hi)
}

/// Q4_0 (one block a step): `(dw·da)·(Σqa - 8·Σa)` per block.
pub struct Q4_0;

impl Step for Q4_0 {
    const SIZE: Size = Size::new(1, 128, 8);
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        // SAFETY: the block's codes, 8 scales (per panel) and record are in bounds, in the
        // level's root (contract).
        unsafe {
            let sums = block_sums_il::<L, N, true>(at.q, w.q_step, at.a);
            let dw = L::halves(at.s, w.s_step);
            for t in 0..N {
                // Minus 8·Σa (token t's, from the record): the `-8` offset of the codes.
                let i = L::sub(sums[t], L::bcast_i(at.a.add(36 * N + 4 * t)));
                let sc = L::mul(dw, L::bcast_f(at.a.add(32 * N + 4 * t)));
                acc[t] = L::fma(sc, L::cvt(i), acc[t]);
            }
        }
    }
}

/// Q4_1 (one block a step): `(dw·da)·Σqa + m·(da·Σa)` per block.
pub struct Q4_1;

impl Step for Q4_1 {
    const SIZE: Size = Size::new(1, 128, 16);
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        // SAFETY: the block's codes, 16 scales and record are in bounds, in the level's
        // root (contract).
        unsafe {
            let sums = block_sums_il::<L, N, true>(at.q, w.q_step, at.a);
            let dw = L::halves(at.s, w.s_step);
            let mw = L::halves(at.s.add(8), w.s_step);
            for t in 0..N {
                let sc = L::mul(dw, L::bcast_f(at.a.add(32 * N + 4 * t)));
                acc[t] = L::fma(sc, L::cvt(sums[t]), acc[t]);
                acc[t] = L::fma(mw, L::bcast_f(at.a.add(40 * N + 4 * t)), acc[t]);
            }
        }
    }
}

/// Merged Q4_1 (one `(d, m)` per 64-group of two blocks, a step).
pub struct Q4_1x64;

impl Step for Q4_1x64 {
    const SIZE: Size = Size::new(2, 256, 16);
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        let rec = N * IL_REC;
        // SAFETY: both blocks' codes and records and the group's 16 scales are in bounds,
        // in the level's root (contract).
        unsafe {
            let (qp, ap) = (at.q, at.a);
            let s0 = block_sums_il::<L, N, true>(qp, w.q_step, ap);
            let mut tmp = *acc;
            for t in 0..N {
                tmp[t] = L::mul(L::cvt(s0[t]), L::bcast_f(ap.add(32 * N + 4 * t)));
            }
            let (q1, a1) = (qp.add(128), ap.add(rec));
            // One chain: `tmp` and `acc` hold 2N registers meanwhile.
            let s1 = block_sums_il::<L, N, false>(q1, w.q_step, a1);
            let dw = L::halves(at.s, w.s_step);
            let mw = L::halves(at.s.add(8), w.s_step);
            for t in 0..N {
                let tm = L::fma(L::cvt(s1[t]), L::bcast_f(a1.add(32 * N + 4 * t)), tmp[t]);
                acc[t] = L::fma(tm, dw, acc[t]);
                // `ads[b0] + ads[b1]` as the scalar path adds them.
                let ds = (ap.add(40 * N + 4 * t) as *const f32).read_unaligned()
                    + (a1.add(40 * N + 4 * t) as *const f32).read_unaligned();
                acc[t] = L::fma(mw, L::splat(ds), acc[t]);
            }
        }
    }
}

/// A K-quant's 8-block group as its tile reads it: the group's scales (both panels', as
/// u16s and as bytes) and where each block's codes and record start.
#[derive(Clone, Copy)]
pub(super) struct KGroup {
    at: At,
    s_step: usize,
    /// The scales as bytes, and the byte distance to the second panel's.
    pub bytes: *const u8,
    pub byte_step: usize,
    /// Code bytes per block and panel, and bytes per record.
    codes: usize,
    rec: usize,
}

impl KGroup {
    #[inline(always)]
    pub(super) fn new<const N: usize>(w: &Panels, at: At, codes: usize) -> KGroup {
        KGroup {
            at,
            s_step: w.s_step,
            bytes: at.s as *const u8,
            byte_step: 2 * w.s_step,
            codes,
            rec: N * IL_REC,
        }
    }

    /// The f16 at u16 `i` of the group's scales, of every row, as floats.
    ///
    /// # Safety
    /// Inside the level's root; `i` is within the group's scales.
    #[inline(always)]
    pub(super) unsafe fn halves<L: Lanes>(&self, i: usize) -> L::F {
        // SAFETY: contract.
        unsafe { L::halves(self.at.s.add(i), self.s_step) }
    }

    /// Block `j`'s codes and record (`j < 8`: in bounds where the group is).
    #[inline(always)]
    pub(super) fn block(&self, j: usize) -> (*const u8, *const u8) {
        (
            self.at.q.wrapping_add(self.codes * j),
            self.at.a.wrapping_add(self.rec * j),
        )
    }
}

/// Q4_K (`super::super::q4_k` documents the scale groups; an 8-block group a step): per
/// 32-block `(dw·da)·(sc·Σqa) - (dmin·m)·(da·Σa)`, with `sc·Σqa` the same exact int32 as
/// AVX2's `vpmaddwd` by the scale (here `vpmulld` of the VNNI sum).
#[allow(non_camel_case_types)] // ggml's name
pub struct Q4_K;

impl Step for Q4_K {
    const SIZE: Size = Size::new(8, 8 * 128, crate::matmul::Layout::Q4_K.scales_per_group());
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        // The group's 80 u16 (160 bytes): d at 0, dmin at 8 u16, sc bytes at 32 + 8j, m
        // bytes at 96 + 8j.
        let g = KGroup::new::<N>(w, at, 128);
        // SAFETY: the group's scales, 8 blocks' codes and records are in bounds, in the
        // level's root (contract); j < 8.
        unsafe {
            let (dw, dmin) = (g.halves::<L>(0), g.halves::<L>(8));
            for j in 0..8 {
                let (qp, ap) = g.block(j);
                // One chain: the group's and sub-block's scales hold registers too.
                let sums = block_sums_il::<L, N, false>(qp, w.q_step, ap);
                let sc = L::bytes(g.bytes.add(32 + 8 * j), g.byte_step);
                let dm = L::mul(dmin, L::cvt(L::bytes(g.bytes.add(96 + 8 * j), g.byte_step)));
                for t in 0..N {
                    let isum = L::mullo(sums[t], sc);
                    let sa = L::mul(dw, L::bcast_f(ap.add(32 * N + 4 * t)));
                    acc[t] = L::fma(sa, L::cvt(isum), acc[t]);
                    acc[t] = L::fnma(dm, L::bcast_f(ap.add(40 * N + 4 * t)), acc[t]);
                }
            }
        }
    }
}
