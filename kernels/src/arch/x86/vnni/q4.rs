//! Q4_0, Q4_1 and merged Q4_1 (64-groups) tiles on interleaved activation records with
//! `vpdpbusd`: per weight vector `v` of a block (32 bytes: 4 code bytes of each of the 8
//! rows), the low nibbles meet token `t`'s 4 codes at `record + 8Nv + 8t` and the high
//! nibbles the 4 at `+ 4` ([`super::super::interleave`]); each `vpdpbusd` adds the four
//! nibble × code products of every row into its int32 lane. Low and high nibbles go into
//! separate accumulators (two dependency chains per token), added once per block.
//!
//! The float part of each block is the AVX2 tiles' (`super::super::q4_0::tile_il`,
//! `super::super::q4_1::tile_il`, `tile_x64_il`), operation for operation.

use super::Dp;
use crate::arch::x86::q4_0::bcast_f;
use crate::arch::x86::IL_REC;
use std::arch::x86_64::*;

/// `Σ nibble·a` per row (int32 lanes) of one packed Q4 block (128 code bytes at `qp`) for the
/// N tokens of the interleaved record at `ap`: exact (`|Σ| <= 32·15·128`). `SPLIT`: low and
/// high nibbles in separate accumulators (two dependency chains per token, 2N registers),
/// else one chain (N registers) where a tile needs the registers for other values.
///
/// # Safety
/// Runs inside `D`'s root (the CPU has AVX2, FMA, F16C and `D`'s VNNI); `qp` valid for 128
/// bytes, `ap` for `32·N`.
#[inline(always)]
pub(super) unsafe fn block_sums_il<D: Dp, const N: usize, const SPLIT: bool>(
    qp: *const u8,
    ap: *const u8,
) -> [__m256i; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut lo = [_mm256_setzero_si256(); N];
    let mut hi = [_mm256_setzero_si256(); N];
    for v in 0..4 {
        // SAFETY: vector v's 32 code bytes and slot v's 8N activation bytes are in bounds
        // (contract).
        unsafe {
            let x = _mm256_loadu_si256(qp.add(32 * v) as *const __m256i);
            let l = _mm256_and_si256(x, m4);
            let h = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
            for t in 0..N {
                let o = ap.add(8 * N * v + 8 * t);
                lo[t] = D::dpbusd(lo[t], l, bcast(o));
                if SPLIT {
                    hi[t] = D::dpbusd(hi[t], h, bcast(o.add(4)));
                } else {
                    lo[t] = D::dpbusd(lo[t], h, bcast(o.add(4)));
                }
            }
        }
    }
    if SPLIT {
        for t in 0..N {
            lo[t] = _mm256_add_epi32(lo[t], hi[t]);
        }
    }
    lo
}

/// The 4 bytes at `p` in every lane (`vpdpbusd`'s embedded-broadcast operand).
///
/// # Safety
/// CPU supports AVX2; `p` is valid for 4 bytes.
#[inline(always)]
pub(super) unsafe fn bcast(p: *const u8) -> __m256i {
    // SAFETY: contract.
    _mm256_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
}

/// The 8 row outputs of one Q4_0 panel for the N tokens of an interleaved tile (`a`: `nb`
/// records of `52·N` bytes): `(dw·da)·(Σqa - 8·Σa)` per block, as the AVX2 tile.
///
/// # Safety
/// Runs inside `D`'s `#[target_feature]` root ([`super::Dp::drive`]): the CPU has AVX2,
/// FMA, F16C and `D`'s VNNI. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile_q4_0_il<D: Dp, const N: usize>(
    q: &[u8],
    s: &[u16],
    a: &[u8],
    nb: usize,
) -> [__m256; N] {
    let rec = N * IL_REC;
    assert!(q.len() >= nb * 128 && s.len() >= nb * 8 && a.len() >= nb * rec);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..nb {
        // SAFETY: block b's codes, 8 scales and record are in bounds (checked above; the
        // pointers are at block b).
        unsafe {
            let sums = block_sums_il::<D, N, true>(qp, ap);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            for t in 0..N {
                // Minus 8·Σa (token t's, from the record): the `-8` offset of the codes.
                let i = _mm256_sub_epi32(sums[t], bcast(ap.add(36 * N + 4 * t)));
                let sc = _mm256_mul_ps(dw, bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i), acc[t]);
            }
        }
        // Advance to block b+1 (one past the end after the last: never dereferenced).
        qp = qp.wrapping_add(128);
        sp = sp.wrapping_add(8);
        ap = ap.wrapping_add(rec);
    }
    acc
}

/// The 8 row outputs of one Q4_1 panel: `(dw·da)·Σqa + m·(da·Σa)` per block.
///
/// # Safety
/// As [`tile_q4_0_il`].
#[inline(always)]
pub unsafe fn tile_q4_1_il<D: Dp, const N: usize>(
    q: &[u8],
    s: &[u16],
    a: &[u8],
    nb: usize,
) -> [__m256; N] {
    let rec = N * IL_REC;
    assert!(q.len() >= nb * 128 && s.len() >= nb * 16 && a.len() >= nb * rec);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..nb {
        // SAFETY: block b's codes, 16 scales and record are in bounds (checked above).
        unsafe {
            let sums = block_sums_il::<D, N, true>(qp, ap);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(sp.add(8) as *const __m128i));
            for t in 0..N {
                let sc = _mm256_mul_ps(dw, bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(sums[t]), acc[t]);
                acc[t] = _mm256_fmadd_ps(mw, bcast_f(ap.add(40 * N + 4 * t)), acc[t]);
            }
        }
        qp = qp.wrapping_add(128);
        sp = sp.wrapping_add(16);
        ap = ap.wrapping_add(rec);
    }
    acc
}

/// The 8 row outputs of one merged-Q4_1 panel (one `(d, m)` per 64-group of two blocks).
///
/// # Safety
/// As [`tile_q4_0_il`]; the block count is even (checked).
#[inline(always)]
pub unsafe fn tile_q4_1x64_il<D: Dp, const N: usize>(
    q: &[u8],
    s: &[u16],
    a: &[u8],
    nb: usize,
) -> [__m256; N] {
    let rec = N * IL_REC;
    let ng = nb / 2;
    assert!(nb % 2 == 0 && q.len() >= nb * 128 && s.len() >= ng * 16 && a.len() >= nb * rec);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..ng {
        // SAFETY: both blocks' codes and records and the group's 16 scales are in bounds
        // (checked above; the pointers are at block 2g).
        unsafe {
            let s0 = block_sums_il::<D, N, true>(qp, ap);
            let mut tmp = [_mm256_setzero_ps(); N];
            for t in 0..N {
                tmp[t] = _mm256_mul_ps(_mm256_cvtepi32_ps(s0[t]), bcast_f(ap.add(32 * N + 4 * t)));
            }
            let (q1, a1) = (qp.add(128), ap.add(rec));
            // One chain: `tmp` and `acc` hold 2N registers meanwhile.
            let s1 = block_sums_il::<D, N, false>(q1, a1);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(sp.add(8) as *const __m128i));
            for t in 0..N {
                let tm = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(s1[t]),
                    bcast_f(a1.add(32 * N + 4 * t)),
                    tmp[t],
                );
                acc[t] = _mm256_fmadd_ps(tm, dw, acc[t]);
                // `ads[b0] + ads[b1]` as the scalar path adds them.
                let ds = (ap.add(40 * N + 4 * t) as *const f32).read_unaligned()
                    + (a1.add(40 * N + 4 * t) as *const f32).read_unaligned();
                acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ds), acc[t]);
            }
        }
        qp = qp.wrapping_add(256);
        sp = sp.wrapping_add(16);
        ap = ap.wrapping_add(2 * rec);
    }
    acc
}

/// The 8 row outputs of one Q4_K panel (`super::super::q4_k` documents the scale groups):
/// per 32-block `(dw·da)·(sc·Σqa) - (dmin·m)·(da·Σa)`, with `sc·Σqa` the same exact int32 as
/// AVX2's `vpmaddwd` by the scale (here `vpmulld` of the VNNI sum).
///
/// # Safety
/// As [`tile_q4_0_il`]; the block count is a multiple of 8 (checked).
#[inline(always)]
pub unsafe fn tile_q4_k_il<D: Dp, const N: usize>(
    q: &[u8],
    s: &[u16],
    a: &[u8],
    nb: usize,
) -> [__m256; N] {
    use crate::arch::x86::q4_k::group_d_dmin;
    let rec = N * IL_REC;
    let ng = nb / 8;
    let spg = crate::matmul::Layout::Q4_K.scales_per_group();
    assert!(nb % 8 == 0 && q.len() >= nb * 128 && s.len() >= ng * spg && a.len() >= nb * rec);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap) = (q.as_ptr(), a.as_ptr());
    for g in 0..ng {
        // SAFETY: g < ng: the 80 u16 (160 bytes) of group g are within `s` (checked).
        let grp = unsafe { s.as_ptr().add(g * spg) };
        let bytes = grp as *const u8;
        let (dw, dmin) = unsafe { group_d_dmin(grp) };
        for j in 0..8 {
            // SAFETY: block 8g+j's codes and record are in bounds (checked; the pointers
            // are at that block); the group's scale bytes 32+8j.. and 96+8j.. are within
            // its 160 bytes (j < 8).
            unsafe {
                let sums = block_sums_il::<D, N, false>(qp, ap);
                let sc =
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(bytes.add(32 + 8 * j) as *const __m128i));
                let mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                    bytes.add(96 + 8 * j) as *const __m128i,
                )));
                let dm = _mm256_mul_ps(dmin, mf);
                for t in 0..N {
                    let isum = _mm256_mullo_epi32(sums[t], sc);
                    let sc = _mm256_mul_ps(dw, bcast_f(ap.add(32 * N + 4 * t)));
                    acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(isum), acc[t]);
                    acc[t] = _mm256_fnmadd_ps(dm, bcast_f(ap.add(40 * N + 4 * t)), acc[t]);
                }
            }
            qp = qp.wrapping_add(128);
            ap = ap.wrapping_add(rec);
        }
    }
    acc
}
