//! The tiled attention body ([`crate::attention`]) compiled for AVX2 (8-wide) and for
//! AVX-512 (16-wide, 32 registers): its loops vectorize; the arithmetic is explicit f32
//! fused multiply-adds in a fixed order (no reassociation), so either build equals the body
//! without target features bit for bit.

use crate::attention::tiled::{keys_by_row, merge_rows, segments_into, values_by_row};
use crate::attention::{attend_body, AttnScratch, F16Rows, FillTiles, KvRows, QueryBlock};
use crate::attention::{RowState, Segments, Tile};
use crate::Isa;
use std::arch::x86_64::*;

/// Safe entry point: the body compiled for `isa` (an AVX2-bodied level) after checking the
/// CPU (panics when it lacks `isa`).
pub fn attend_checked<R: KvRows>(
    kv: &R,
    a: &QueryBlock,
    out: &mut [f32],
    s: &mut AttnScratch,
    isa: Isa,
) {
    check(isa);
    if isa == Isa::Avx512Vnni {
        // SAFETY: the CPU supports the AVX-512 level (checked just above).
        unsafe { attend_avx512(kv, a, out, s) }
    } else {
        // SAFETY: the CPU supports avx2, fma and f16c (checked just above).
        unsafe { attend(kv, a, out, s) }
    }
}

/// [`crate::attention::attend_segments`] on `isa`, as [`attend_checked`].
pub fn segments_checked<R: KvRows>(
    kv: &R,
    a: &QueryBlock,
    out: Segments,
    s: &mut AttnScratch,
    isa: Isa,
) {
    check(isa);
    if isa == Isa::Avx512Vnni {
        // SAFETY: the CPU supports the AVX-512 level (checked just above).
        unsafe { segments_avx512(kv, a, out, s) }
    } else {
        // SAFETY: the CPU supports avx2, fma and f16c (checked just above).
        unsafe { segments(kv, a, out, s) }
    }
}

/// [`crate::attention::merge_rows`] on `isa` (an AVX2-bodied level), as [`attend_checked`].
pub fn merge_checked(states: &[RowState], outs: &[f32], out: &mut [f32], hd: usize, isa: Isa) {
    check(isa);
    // SAFETY: the CPU supports avx2, fma and f16c (checked just above).
    unsafe { merge(states, outs, out, hd) }
}

fn check(isa: Isa) {
    assert!(
        isa.has_avx2() && isa.is_available(),
        "{isa} attention requested on a CPU without {isa}"
    );
}

/// # Safety
/// The CPU supports AVX2, FMA and F16C. (Memory through slices: violations panic.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn merge(states: &[RowState], outs: &[f32], out: &mut [f32], hd: usize) {
    merge_rows(states, outs, out, hd)
}

/// `unsafe fn $name` and `unsafe fn $segments`: [`attend_body`] and [`segments_into`]
/// compiled with the target features `$features` (the two levels' roots differ in nothing
/// else).
macro_rules! attend_root {
    ($(#[$doc:meta])* $name:ident, $segments:ident, $features:literal, $pairs:literal) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $name<R: KvRows>(
            kv: &R,
            a: &QueryBlock,
            out: &mut [f32],
            s: &mut AttnScratch,
        ) {
            // The roots have AVX and F16C (their target features).
            attend_body(kv, a, out, s, F16cFill::<$pairs>(()))
        }

        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $segments<R: KvRows>(kv: &R, a: &QueryBlock, out: Segments, s: &mut AttnScratch) {
            segments_into(kv, a, out, s, F16cFill::<$pairs>(()))
        }
    };
}

attend_root!(
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C. (Memory is reached through slices: shapes as
    /// `crate::attention::attend`, violations panic on bounds.)
    attend,
    segments,
    "avx2,fma,f16c",
    false
);

attend_root!(
    /// # Safety
    /// The CPU supports AVX2, FMA, F16C and AVX-512 F/BW/VL. (Memory as [`attend`].)
    attend_avx512,
    segments_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    true
);

/// Fills the tiles with F16C: 8 keys x 8 elements converted and transposed in registers
/// (the row-at-a-time fill converts a row per call and stores every element alone). Made
/// only inside the roots above (the private field), so the CPU has AVX and F16C wherever
/// one exists; its methods are inlined into those roots.
///
/// `PAIRS`: [`FillTiles::PAIR_ROWS`] (the AVX-512 root: its 32 registers hold two rows'
/// accumulators; with AVX2's 16 they spill, attention_cpu prefill32 20 % slower).
#[derive(Clone, Copy)]
struct F16cFill<const PAIRS: bool>(());

impl<const PAIRS: bool> FillTiles for F16cFill<PAIRS> {
    const PAIR_ROWS: bool = PAIRS;

    #[inline(always)]
    fn keys(self, kv: &F16Rows, t: Tile, kt: &mut [f32], row: &mut Vec<f32>) {
        let (hd, Tile { pos, kn, off }) = (kt.len() / 16, t);
        if !hd.is_multiple_of(8) || kn == 0 {
            return keys_by_row(kv, t, kt, row);
        }
        assert!(kn <= 16 && (pos + kn - 1) * kv.stride + off + hd <= kv.k.len());
        prefetch_ahead(kv.k, kv.stride, pos, off, hd);
        // SAFETY: the CPU has AVX and F16C (the type is made only in the roots); each load
        // reads 8 f16 of a key k < kn at elements `off + db ..+ 8` (db + 8 <= hd), within
        // `kv.k` (asserted for the last key); each store writes 8 f32 at `(db + d)·16 + kb`
        // (kb + 8 <= 16, db + d < hd), within `kt` (hd·16 long).
        unsafe {
            let src = kv.k.as_ptr();
            for kb in [0, 8] {
                for db in (0..hd).step_by(8) {
                    let mut r = [_mm256_setzero_ps(); 8];
                    for (i, r) in r.iter_mut().enumerate() {
                        if kb + i < kn {
                            let at = (pos + kb + i) * kv.stride + off + db;
                            *r = _mm256_cvtph_ps(_mm_loadu_si128(src.add(at) as *const __m128i));
                        }
                    }
                    for (d, c) in transpose8(r).iter().enumerate() {
                        _mm256_storeu_ps(kt.as_mut_ptr().add((db + d) * 16 + kb), *c);
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn values(self, kv: &F16Rows, t: Tile, hd: usize, vt: &mut [f32]) {
        let Tile { pos, kn, off } = t;
        if !hd.is_multiple_of(8) || kn == 0 {
            return values_by_row(kv, t, hd, vt);
        }
        assert!(kn * hd <= vt.len() && (pos + kn - 1) * kv.stride + off + hd <= kv.v.len());
        prefetch_ahead(kv.v, kv.stride, pos, off, hd);
        // SAFETY: AVX and F16C as in `keys`; the loads of value k < kn at `off + d ..+ 8`
        // (d + 8 <= hd) are within `kv.v` (asserted for the last), the stores at `k·hd + d`
        // within `vt` (asserted).
        unsafe {
            let src = kv.v.as_ptr();
            for k in 0..kn {
                let at = (pos + k) * kv.stride + off;
                for d in (0..hd).step_by(8) {
                    let x = _mm256_cvtph_ps(_mm_loadu_si128(src.add(at + d) as *const __m128i));
                    _mm256_storeu_ps(vt.as_mut_ptr().add(k * hd + d), x);
                }
            }
        }
    }
}

/// Keys or values this far ahead of a tile are prefetched: decode at depth reads a long
/// cache once per token from DRAM, and its fills stalled on those loads (half of decode
/// attention's time at 4096 keys).
const PREFETCH_AHEAD: usize = 48;

/// Prefetches the 16 rows (`hd` elements from `off`) at `pos + PREFETCH_AHEAD` of `rows`.
#[inline(always)]
fn prefetch_ahead(rows: &[half::f16], stride: usize, pos: usize, off: usize, hd: usize) {
    let base = rows.as_ptr();
    for k in 0..16 {
        let at = (pos + PREFETCH_AHEAD + k) * stride + off;
        for b in (0..hd).step_by(32) {
            // Prefetches never fault, and the address is only computed (wrapping), never
            // dereferenced, so one past the cache's end is harmless.
            let p = base.wrapping_add(at + b) as *const i8;
            // SAFETY: `_mm_prefetch` is SSE (baseline x86-64) and reads no memory.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
        }
    }
}

/// The 8x8 transpose: `c[d]` holds element `d` of each of `r[0..8]`.
#[inline(always)]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: register shuffles of AVX, which the callers' roots have (see `F16cFill`).
    unsafe {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(s0, s4),
            _mm256_permute2f128_ps::<0x20>(s1, s5),
            _mm256_permute2f128_ps::<0x20>(s2, s6),
            _mm256_permute2f128_ps::<0x20>(s3, s7),
            _mm256_permute2f128_ps::<0x31>(s0, s4),
            _mm256_permute2f128_ps::<0x31>(s1, s5),
            _mm256_permute2f128_ps::<0x31>(s2, s6),
            _mm256_permute2f128_ps::<0x31>(s3, s7),
        ]
    }
}
