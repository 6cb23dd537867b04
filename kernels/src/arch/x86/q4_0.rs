//! Q4_0 gemv/gemm tiles (the nibble core is shared with Q4_1).
//!
//! Per (panel, block): 4 loads of 32 bytes; `x & 0xF` holds elements `4v..4v+4` of the 8
//! rows, `(x >> 4) & 0xF` elements `16+4v..`. `maddubs(nibbles, broadcast(a[4 bytes]))`
//! gives int16 pair sums `<= 2·15·127`; the 8 of a block sum to `<= 30480 < 2^15`, so they
//! are accumulated in int16 and widened once with `madd(·, 1)`. Q4_0's `-8` offset is
//! folded in exactly as `Σwq - 8·Σq` in int32.

use crate::arch::TileRows;
use crate::matmul::QuantizedActivation;
use std::arch::x86_64::*;

/// `Σ nibble·q` per row (int32 lanes) of one packed Q4 block for N tokens.
///
/// # Safety
/// CPU supports AVX2; `qp` is valid for 128 bytes and every `ap[t]` for 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn block_sums<const N: usize>(
    qp: *const u8,
    ap: &[*const i8; N],
) -> [__m256i; N] {
    // SAFETY: same contract.
    let p16 = unsafe { block_p16::<N>(qp, ap) };
    let ones = _mm256_set1_epi16(1);
    let mut r = [_mm256_setzero_si256(); N];
    for t in 0..N {
        r[t] = _mm256_madd_epi16(p16[t], ones);
    }
    r
}

/// The int16 pair sums of [`block_sums`] before widening (each lane: two int16 of one
/// row, `|·| <= 30480`), for kernels that widen with a per-row scale (`vpmaddwd`).
///
/// # Safety
/// As [`block_sums`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn block_p16<const N: usize>(qp: *const u8, ap: &[*const i8; N]) -> [__m256i; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut p16 = [_mm256_setzero_si256(); N];
    for v in 0..4 {
        // SAFETY: in bounds of the 128-byte block (contract).
        let x = unsafe { _mm256_loadu_si256(qp.add(32 * v) as *const __m256i) };
        let lo = _mm256_and_si256(x, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
        for t in 0..N {
            // SAFETY: in bounds of the 32-byte activation block (contract).
            let (alo, ahi) = unsafe {
                (
                    (ap[t].add(4 * v) as *const i32).read_unaligned(),
                    (ap[t].add(16 + 4 * v) as *const i32).read_unaligned(),
                )
            };
            let s = _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, _mm256_set1_epi32(alo)),
                _mm256_maddubs_epi16(hi, _mm256_set1_epi32(ahi)),
            );
            p16[t] = _mm256_add_epi16(p16[t], s);
        }
    }
    p16
}

/// The 8 row outputs of one Q4_0 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked: `q` must hold `blocks·128` bytes,
/// `s` `blocks·8` scales.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [__m256; N] {
    let asum = r.per_token(QuantizedActivation::row_sum8);
    // SAFETY: CPU features as this fn's; the closure reads block b's 128 code bytes and
    // each row's 32 codes of it, where `tile_sym` points `qp` and `ap` (in bounds).
    unsafe {
        super::tile_sym::<N>(q, s, r, (128, 2), |b, qp, ap| {
            let sums = block_sums::<N>(qp, ap);
            // Minus 8·Σa: the `-8` offset of the codes.
            std::array::from_fn(|t| _mm256_sub_epi32(sums[t], _mm256_set1_epi32(asum[t][b])))
        })
    }
}

/// Broadcasts the 4 bytes at `p` to all 8 lanes.
///
/// # Safety
/// CPU supports AVX2; `p` is valid for 4 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bcast(p: *const u8) -> __m256i {
    // SAFETY: contract.
    _mm256_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
}

/// Broadcasts the f32 at `p`.
///
/// # Safety
/// CPU supports AVX; `p` is valid for 4 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bcast_f(p: *const u8) -> __m256 {
    // SAFETY: contract.
    _mm256_set1_ps(unsafe { (p as *const f32).read_unaligned() })
}

/// The int16 pair sums ([`block_p16`]) of one packed Q4 block against the N tokens of an
/// interleaved activation record ([`super::interleave`]): `qp` at the block's 128 code
/// bytes, `ap` at the record (token `t`'s codes for vector `v` at `ap + 8Nv + 8t`).
///
/// # Safety
/// CPU supports AVX2; `qp` valid for 128 bytes, `ap` for `32·N` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn block_p16_il<const N: usize>(qp: *const u8, ap: *const u8) -> [__m256i; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut p = [_mm256_setzero_si256(); N];
    if N == 4 {
        // SAFETY: vector v's 32 code bytes and slot v's 32 activation bytes are in
        // bounds (contract). The first vector writes the sums, the others add to them.
        unsafe {
            step4!(qp, ap, m4, p, set);
            for v in 1..4 {
                step4!(qp.add(32 * v), ap.add(32 * v), m4, p, add);
            }
        }
        return p;
    }
    // Tails of a token chunk (1..3 tokens): intrinsics.
    for v in 0..4 {
        // SAFETY: within the block's 128 code bytes and 32N activation bytes (contract).
        unsafe {
            let x = _mm256_loadu_si256(qp.add(32 * v) as *const __m256i);
            let lo = _mm256_and_si256(x, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
            add_vector_p16(&mut p, lo, hi, ap, v);
        }
    }
    p
}

/// Adds weight vector `v`'s int16 pair sums to each token's `p[t]`: its low codes `lo`
/// against the token's first 4 activation bytes of slot `v` of an interleaved record `ap`,
/// its high codes `hi` against the next 4.
///
/// # Safety
/// CPU supports AVX2; `ap` valid for `32·N` bytes, `v < 4`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn add_vector_p16<const N: usize>(
    p: &mut [__m256i; N],
    lo: __m256i,
    hi: __m256i,
    ap: *const u8,
    v: usize,
) {
    for t in 0..N {
        // SAFETY: token t's 8 bytes of slot v are within the record's 32·N (contract).
        let o = unsafe { ap.add(8 * N * v + 8 * t) };
        // SAFETY: as above.
        let s = unsafe {
            _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, bcast(o)),
                _mm256_maddubs_epi16(hi, bcast(o.add(4))),
            )
        };
        p[t] = _mm256_add_epi16(p[t], s);
    }
}

/// One weight vector of a Q4 block against 4 interleaved tokens: loads the 32 code bytes
/// at `$q`, splits the nibbles, and for token `t` forms `a = maddubs(lo, a_t[0..4])` and
/// `b = maddubs(hi, a_t[4..8])` (`a_t`: the 8 bytes at `$a + 8t`), folded into `$p[t]` by
/// `$fold` (`set` for the first vector, `add` after: see `super::step4`).
///
/// One `asm!` block because, with intrinsics, LLVM (generic x86 schedule) hoists all four
/// vectors' loads, nibble decodes and activation broadcasts of a block ahead of the
/// products: that needs more than the 16 ymm registers and spilled the 4-token tile's
/// accumulators to the stack every block. A/B on 2560x896 x 128 tokens, GOP/s per CPU
/// second, one thread: intrinsics on interleaved activations 137-142, the previous
/// per-row-pointer tile 155-170, this 176-182.
macro_rules! step4 {
    ($q:expr, $a:expr, $m4:expr, $p:ident, $fold:ident) => {
        nibble_step!($q, $m4, "", [], $a, $p, $fold)
    };
}
use step4;

/// The 8 row outputs of one Q4_0 panel for the N tokens of an interleaved activation tile
/// (`a`: `nb` records of `52·N` bytes, see [`super::interleave`]). Same arithmetic as
/// [`tile`], in the same order.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile_il<const N: usize>(q: &[u8], s: &[u16], a: &[u8], nb: usize) -> [__m256; N] {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: CPU features as this fn's; the closure reads block b's 128 code bytes and
    // its record, where `tile_il_sym` points `qp` and `ap` (in bounds).
    unsafe {
        super::tile_il_sym::<N>(q, s, a, nb, 128, |qp, ap| {
            let p16 = block_p16_il::<N>(qp, ap);
            let mut i = [_mm256_setzero_si256(); N];
            for t in 0..N {
                // Minus 8·Σa (token t's, from the record): the `-8` offset of the codes.
                let sum8 = bcast(ap.add(36 * N + 4 * t));
                i[t] = _mm256_sub_epi32(_mm256_madd_epi16(p16[t], ones), sum8);
            }
            i
        })
    }
}
