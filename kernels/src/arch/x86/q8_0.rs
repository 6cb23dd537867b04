//! Q8_0 gemv/gemm tiles. Signed x signed: `maddubs(|w|, sign(a, w))` (ggml's sign trick);
//! each product pair is `<= 2·128·127 = 32512`, so every group is widened to int32 with
//! `madd(·, 1)` before summing. `|w|` is computed once per weight vector and shared by the
//! N tokens.

use crate::arch::TileRows;
use std::arch::x86_64::*;

/// The 8 row outputs of one Q8_0 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [__m256; N] {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: CPU features as this fn's; the closure reads block b's 256 code bytes and
    // each row's 32 codes of it, where `tile_sym` points `qp` and `ap` (in bounds).
    unsafe {
        super::tile_sym::<N>(q, s, r, (256, 4), |_, qp, ap| {
            let mut i32s = [_mm256_setzero_si256(); N];
            for g in 0..8 {
                let x = _mm256_loadu_si256(qp.add(32 * g) as *const __m256i);
                let ax = _mm256_abs_epi8(x);
                for t in 0..N {
                    let a = (ap[t].add(4 * g) as *const i32).read_unaligned();
                    let sa = _mm256_sign_epi8(_mm256_set1_epi32(a), x);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sa), ones);
                    i32s[t] = _mm256_add_epi32(i32s[t], p);
                }
            }
            i32s
        })
    }
}

/// Weight vectors `g` (at `$q`) and `g+4` (at `$q + 128`) of a Q8_0 block against 4
/// interleaved tokens (`$a`: slot `g` of the record, token `t`'s groups `g`, `g+4` at
/// `$a + 8t`): `madd(maddubs(|w|, sign(a, w)), 1)` per vector, both added into `$p[t]`
/// (int32) as `$fold` says (see `super::step4`). One `asm!` block for the same reason as
/// `super::q4_0::step4`.
macro_rules! step8 {
    ($q:expr, $a:expr, $ones:expr, $p:ident, $fold:ident) => {
        step4_core!(
            concat!(
                "vmovdqu {x0}, ymmword ptr [{q}]\n",
                "vmovdqu {x1}, ymmword ptr [{q} + 128]\n",
                "vpabsb {w0}, {x0}\n",
                "vpabsb {w1}, {x1}",
            ),
            concat!(
                "vpsignb {a}, {a}, {x0}\n",
                "vpsignb {b}, {b}, {x1}\n",
                "vpmaddubsw {a}, {w0}, {a}\n",
                "vpmaddubsw {b}, {w1}, {b}\n",
                "vpmaddwd {a}, {a}, {ones}\n",
                "vpmaddwd {b}, {b}, {ones}",
            ),
            [
                q = in(reg) $q,
                ones = in(ymm_reg) $ones,
                x0 = out(ymm_reg) _,
                x1 = out(ymm_reg) _,
                w0 = out(ymm_reg) _,
                w1 = out(ymm_reg) _,
            ],
            $a,
            $p,
            "vpaddd",
            $fold
        )
    };
}

/// The 8 row outputs of one Q8_0 panel for the 4 tokens of an interleaved activation tile
/// (`a`: `nb` records of `52·4` bytes, see [`super::interleave`]); same integer sums and
/// float operations as [`tile`].
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile_il4(q: &[u8], s: &[u16], a: &[u8], nb: usize) -> [__m256; 4] {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: CPU features as this fn's; the closure reads block b's 256 code bytes and
    // its record, where `tile_il_sym` points `qp` and `ap` (in bounds).
    unsafe {
        super::tile_il_sym::<4>(q, s, a, nb, 256, |qp, ap| {
            let mut p = [_mm256_setzero_si256(); 4];
            step8!(qp, ap, ones, p, set);
            for g in 1..4 {
                step8!(qp.add(32 * g), ap.add(32 * g), ones, p, add);
            }
            p
        })
    }
}
