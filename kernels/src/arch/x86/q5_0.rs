//! Q5_0 gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`: the Q4_0 nibble
//! record plus one 32-byte plane of 5th bits per 32-block, merged in registers (shift +
//! mask + or, shared by the N tokens) into unsigned 5-bit codes for `vpmaddubsw` (pairs
//! `<= 2·31·127`: four vectors summed in int16, then widened). The `−16` is folded
//! exactly as `Σqa − 16·Σa` in int32; one FMA per block for 8 rows.

use super::q4_0::{add_vector_p16, bcast};
use crate::arch::TileRows;
use crate::matmul::QuantizedActivation;
use std::arch::x86_64::*;

/// Bit 4 of every byte: lo = bit `v` of `h`, hi = bit `4+v`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fifth_bits(h: __m256i, v: usize) -> (__m256i, __m256i) {
    let m10 = _mm256_set1_epi8(0x10);
    let (lo, hi) = match v {
        0 => (_mm256_slli_epi16::<4>(h), h),
        1 => (_mm256_slli_epi16::<3>(h), _mm256_srli_epi16::<1>(h)),
        2 => (_mm256_slli_epi16::<2>(h), _mm256_srli_epi16::<2>(h)),
        _ => (_mm256_slli_epi16::<1>(h), _mm256_srli_epi16::<3>(h)),
    };
    (_mm256_and_si256(lo, m10), _mm256_and_si256(hi, m10))
}

/// Vectors `2·pair`, `2·pair+1` of a Q5 record (Q5_0, Q5_K) decoded into unsigned 5-bit
/// codes (shared by the N tokens) and multiplied with each token's activation by
/// `vpmaddubsw`: per token the int16 pair sums of the 4 products (`<= 4·2·31·127`).
///
/// # Safety
/// CPU supports AVX2; `qp` valid for the 160-byte record whose plane is `h`, each `ap[t]`
/// for 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn pair_p16<const N: usize>(
    qp: *const u8,
    h: __m256i,
    pair: usize,
    ap: &[*const i8; N],
) -> [__m256i; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut lo = [_mm256_setzero_si256(); 2];
    let mut hi = [_mm256_setzero_si256(); 2];
    for u in 0..2 {
        let v = 2 * pair + u;
        // SAFETY: in bounds of the record (contract).
        let x = unsafe { _mm256_loadu_si256(qp.add(32 * v) as *const __m256i) };
        let (h0, h1) = fifth_bits(h, v);
        lo[u] = _mm256_or_si256(_mm256_and_si256(x, m4), h0);
        hi[u] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m4), h1);
    }
    let mut p = [_mm256_setzero_si256(); N];
    for t in 0..N {
        // SAFETY: within the 32-byte activation block of token t (contract).
        let a =
            |o: usize| unsafe { _mm256_set1_epi32((ap[t].add(o) as *const i32).read_unaligned()) };
        let v = 2 * pair;
        p[t] = _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(lo[0], a(4 * v)),
                _mm256_maddubs_epi16(hi[0], a(16 + 4 * v)),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(lo[1], a(4 * v + 4)),
                _mm256_maddubs_epi16(hi[1], a(20 + 4 * v)),
            ),
        );
    }
    p
}

/// The 8 row outputs of one Q5_0 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [__m256; N] {
    let asum = r.per_token(QuantizedActivation::row_sum8);
    let ones = _mm256_set1_epi16(1);
    // SAFETY: CPU features as this fn's; the closure reads block b's 160-byte record and
    // each row's 32 codes of it, where `tile_sym` points `qp` and `ap` (in bounds).
    unsafe {
        super::tile_sym::<N>(q, s, r, (160, 3), |b, qp, ap| {
            let h = _mm256_loadu_si256(qp.add(128) as *const __m256i);
            let mut i32s = [_mm256_setzero_si256(); N];
            for pair in 0..2 {
                let p = pair_p16::<N>(qp, h, pair, ap);
                for t in 0..N {
                    i32s[t] = _mm256_add_epi32(i32s[t], _mm256_madd_epi16(p[t], ones));
                }
            }
            // Minus 16·Σa = 2·(8·Σa): the `-16` offset of the codes.
            std::array::from_fn(|t| _mm256_sub_epi32(i32s[t], _mm256_set1_epi32(2 * asum[t][b])))
        })
    }
}

/// One weight vector `v` of a Q5_0 block against 4 interleaved tokens: as
/// `super::q4_0::step4`, with the 5th bits merged from the plane `$hp` (`$shl` moves bit
/// `v` of each byte to bit 4, `$shr` bit `4+v`), and every product added into `$p[t]`
/// (wrapping int16: see [`tile_il`]).
macro_rules! step5 {
    ($q:expr, $a:expr, $hp:expr, $p:ident, $shl:literal, $shr:literal, $fold:ident) => {
        nibble_step!(
            $q,
            _mm256_set1_epi8(0x0F),
            concat!(
                $shl,
                "\nvpand {a}, {a}, {m10}\nvpor {x}, {x}, {a}\n",
                $shr,
                "\nvpand {a}, {a}, {m10}\nvpor {h}, {h}, {a}"
            ),
            [hp = in(ymm_reg) $hp, m10 = in(ymm_reg) _mm256_set1_epi8(0x10),],
            $a,
            $p,
            $fold
        )
    };
}

/// The 8 row outputs of one Q5_0 panel for the N tokens of an interleaved activation tile
/// (`a`: `nb` records of `52·N` bytes, see [`super::interleave`]); the same integer
/// `Σqa − 16·Σa` and the same float operations as [`tile`].
///
/// The int16 sums are taken modulo 2^16: the 16 products `q·a` (`q` in 0..=31) behind
/// one int16 lane can exceed 2^15, but after subtracting that lane's `16·Σa` (carried by
/// the record, `q5_lane_offsets`) the value is `Σ(q−16)·a` over 16 codes, `|·| <= 16·16·127
/// = 32512`: it fits, so the wrapped result is exact. That replaces [`tile`]'s two int16
/// halves, two widenings, an int32 add and an int32 subtract with one int16 subtract and
/// one widening, and lets the 4-token tile use the Q4 asm core.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile_il<const N: usize>(q: &[u8], s: &[u16], a: &[u8], nb: usize) -> [__m256; N] {
    let m4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    // SAFETY: CPU features as this fn's; the closure reads block b's 160 code bytes and
    // its record, where `tile_il_sym` points `qp` and `ap` (in bounds).
    unsafe {
        super::tile_il_sym::<N>(q, s, a, nb, 160, |qp, ap| {
            let hp = _mm256_loadu_si256(qp.add(128) as *const __m256i);
            let mut p = [_mm256_setzero_si256(); N];
            if N == 4 {
                step5!(
                    qp,
                    ap,
                    hp,
                    p,
                    "vpsllw {a}, {hp}, 4",
                    "vmovdqa {a}, {hp}",
                    set
                );
                step5!(
                    qp.add(32),
                    ap.add(32),
                    hp,
                    p,
                    "vpsllw {a}, {hp}, 3",
                    "vpsrlw {a}, {hp}, 1",
                    add
                );
                step5!(
                    qp.add(64),
                    ap.add(64),
                    hp,
                    p,
                    "vpsllw {a}, {hp}, 2",
                    "vpsrlw {a}, {hp}, 2",
                    add
                );
                step5!(
                    qp.add(96),
                    ap.add(96),
                    hp,
                    p,
                    "vpsllw {a}, {hp}, 1",
                    "vpsrlw {a}, {hp}, 3",
                    add
                );
            } else {
                for v in 0..4 {
                    let x = _mm256_loadu_si256(qp.add(32 * v) as *const __m256i);
                    let (h0, h1) = fifth_bits(hp, v);
                    let lo = _mm256_or_si256(_mm256_and_si256(x, m4), h0);
                    let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(x), m4), h1);
                    add_vector_p16(&mut p, lo, hi, ap, v);
                }
            }
            let mut i = [_mm256_setzero_si256(); N];
            for t in 0..N {
                // Minus the lane's 16·Σa (token t's, from the record), then widened.
                let off = bcast(ap.add(48 * N + 4 * t));
                i[t] = _mm256_madd_epi16(_mm256_sub_epi16(p[t], off), ones);
            }
            i
        })
    }
}
