//! Q4_0 gemv/gemm tiles (the nibble core is shared with Q4_1).
//!
//! Per (panel, block): 4 loads of 32 bytes; `x & 0xF` holds elements `4v..4v+4` of the 8
//! rows, `(x >> 4) & 0xF` elements `16+4v..`. `maddubs(nibbles, broadcast(a[4 bytes]))`
//! gives int16 pair sums `<= 2·15·127`; the 8 of a block sum to `<= 30480 < 2^15`, so they
//! are accumulated in int16 and widened once with `madd(·, 1)`. Q4_0's `-8` offset is
//! folded in exactly as `Σwq - 8·Σq` in int32.

use crate::arch::{act_ptrs, per_token};
use crate::matmul::{QuantizedActivation, QK};
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
/// `s` `blocks·8` scales, `act` rows `t0..t0+N`.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(
    q: &[u8],
    s: &[u16],
    act: &QuantizedActivation,
    t0: usize,
) -> [__m256; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 128 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let ad = per_token::<_, N>(act, t0, nb, QuantizedActivation::row_d);
    let asum = per_token::<_, N>(act, t0, nb, QuantizedActivation::row_sum8);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        if N == 1 {
            // gemv streams the weights from DRAM: keep the loads ahead of the math.
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(q.as_ptr().wrapping_add(b * 128), 2) };
        }
        // SAFETY: b < nb, so the 128 code bytes and 8 scales of block b are within `q`, `s`
        // and the 32 codes of block b within each activation row (checked above).
        let (sums, dw) = unsafe {
            (
                block_sums::<N>(q.as_ptr().add(b * 128), &ap),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 8) as *const __m128i)),
            )
        };
        for t in 0..N {
            let i = _mm256_sub_epi32(sums[t], _mm256_set1_epi32(asum[t][b]));
            let sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b]));
            acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i), acc[t]);
            // SAFETY: stays within (or one past) the activation row.
            ap[t] = unsafe { ap[t].add(QK) };
        }
    }
    acc
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
            step4!(
                qp,
                ap,
                m4,
                p,
                "vpaddw {s0}, {a}, {b}",
                "vpaddw {s1}, {a}, {b}",
                "vpaddw {s2}, {a}, {b}",
                "vpaddw {s3}, {a}, {b}"
            );
            for v in 1..4 {
                step4!(
                    qp.add(32 * v),
                    ap.add(32 * v),
                    m4,
                    p,
                    "vpaddw {a}, {a}, {b}\n vpaddw {s0}, {s0}, {a}",
                    "vpaddw {a}, {a}, {b}\n vpaddw {s1}, {s1}, {a}",
                    "vpaddw {a}, {a}, {b}\n vpaddw {s2}, {s2}, {a}",
                    "vpaddw {a}, {a}, {b}\n vpaddw {s3}, {s3}, {a}"
                );
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
            for t in 0..N {
                let o = ap.add(8 * N * v + 8 * t);
                let s = _mm256_add_epi16(
                    _mm256_maddubs_epi16(lo, bcast(o)),
                    _mm256_maddubs_epi16(hi, bcast(o.add(4))),
                );
                p[t] = _mm256_add_epi16(p[t], s);
            }
        }
    }
    p
}

/// One weight vector of a Q4 block against 4 interleaved tokens: loads the 32 code bytes
/// at `$q`, splits the nibbles, and for token `t` forms `a = maddubs(lo, a_t[0..4])` and
/// `b = maddubs(hi, a_t[4..8])` (`a_t`: the 8 bytes at `$a + 8t`), folded into `$p[t]` by
/// the instruction(s) `$ct`.
///
/// One `asm!` block because, with intrinsics, LLVM (generic x86 schedule) hoists all four
/// vectors' loads, nibble decodes and activation broadcasts of a block ahead of the
/// products: that needs more than the 16 ymm registers and spilled the 4-token tile's
/// accumulators to the stack every block. A/B on 2560x896 x 128 tokens, GOP/s per CPU
/// second, one thread: intrinsics on interleaved activations 137-142, the previous
/// per-row-pointer tile 155-170, this 176-182.
macro_rules! step4 {
    ($q:expr, $a:expr, $m4:expr, $p:ident, $c0:literal, $c1:literal, $c2:literal, $c3:literal) => {
        std::arch::asm!(
            "vmovdqu {x}, ymmword ptr [{q}]",
            "vpsrlw {h}, {x}, 4",
            "vpand {x}, {x}, {m4}",
            "vpand {h}, {h}, {m4}",
            "vpbroadcastd {a}, dword ptr [{p}]",
            "vpbroadcastd {b}, dword ptr [{p} + 4]",
            "vpmaddubsw {a}, {x}, {a}",
            "vpmaddubsw {b}, {h}, {b}",
            $c0,
            "vpbroadcastd {a}, dword ptr [{p} + 8]",
            "vpbroadcastd {b}, dword ptr [{p} + 12]",
            "vpmaddubsw {a}, {x}, {a}",
            "vpmaddubsw {b}, {h}, {b}",
            $c1,
            "vpbroadcastd {a}, dword ptr [{p} + 16]",
            "vpbroadcastd {b}, dword ptr [{p} + 20]",
            "vpmaddubsw {a}, {x}, {a}",
            "vpmaddubsw {b}, {h}, {b}",
            $c2,
            "vpbroadcastd {a}, dword ptr [{p} + 24]",
            "vpbroadcastd {b}, dword ptr [{p} + 28]",
            "vpmaddubsw {a}, {x}, {a}",
            "vpmaddubsw {b}, {h}, {b}",
            $c3,
            q = in(reg) $q,
            p = in(reg) $a,
            m4 = in(ymm_reg) $m4,
            x = out(ymm_reg) _,
            h = out(ymm_reg) _,
            a = out(ymm_reg) _,
            b = out(ymm_reg) _,
            s0 = inout(ymm_reg) $p[0],
            s1 = inout(ymm_reg) $p[1],
            s2 = inout(ymm_reg) $p[2],
            s3 = inout(ymm_reg) $p[3],
            options(pure, readonly, nostack, preserves_flags),
        )
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
