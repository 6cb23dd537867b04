//! Q8_0 gemv/gemm tiles. Signed x signed: `maddubs(|w|, sign(a, w))` (ggml's sign trick);
//! each product pair is `<= 2·128·127 = 32512`, so every group is widened to int32 with
//! `madd(·, 1)` before summing. `|w|` is computed once per weight vector and shared by the
//! N tokens.

use crate::arch::{act_ptrs, per_token};
use crate::matmul::{QuantizedActivation, QK};
use std::arch::x86_64::*;

/// The 8 row outputs of one Q8_0 panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(
    q: &[u8],
    s: &[u16],
    act: &QuantizedActivation,
    t0: usize,
) -> [__m256; N] {
    let nb = act.blocks();
    assert!(q.len() >= nb * 256 && s.len() >= nb * 8 && t0 + N <= act.rows());
    let mut ap = act_ptrs::<N>(act, t0);
    let ad = per_token::<_, N>(act, t0, nb, QuantizedActivation::row_d);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        if N == 1 {
            // gemv streams the weights from DRAM: keep the loads ahead of the math.
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { super::prefetch_ahead(q.as_ptr().wrapping_add(b * 256), 4) };
        }
        let mut i32s = [_mm256_setzero_si256(); N];
        for g in 0..8 {
            // SAFETY: b < nb: the 256 code bytes of block b are within `q` (checked).
            let x =
                unsafe { _mm256_loadu_si256(q.as_ptr().add(b * 256 + 32 * g) as *const __m256i) };
            let ax = _mm256_abs_epi8(x);
            for t in 0..N {
                // SAFETY: within the 32-byte activation block b of row t0+t.
                let a = unsafe { (ap[t].add(4 * g) as *const i32).read_unaligned() };
                let sa = _mm256_sign_epi8(_mm256_set1_epi32(a), x);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sa), ones);
                i32s[t] = _mm256_add_epi32(i32s[t], p);
            }
        }
        // SAFETY: block b's 8 scales are within `s` (checked).
        let dw =
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 8) as *const __m128i)) };
        for t in 0..N {
            let sc = _mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b]));
            acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i32s[t]), acc[t]);
            // SAFETY: stays within (or one past) the activation row.
            ap[t] = unsafe { ap[t].add(QK) };
        }
    }
    acc
}

/// Weight vectors `g` (at `$q`) and `g+4` (at `$q + 128`) of a Q8_0 block against 4
/// interleaved tokens (`$a`: slot `g` of the record, token `t`'s groups `g`, `g+4` at
/// `$a + 8t`): `madd(maddubs(|w|, sign(a, w)), 1)` per vector, both added into `$p[t]`
/// (int32) by `$ct`. One `asm!` block for the same reason as `super::q4_0::step4`.
macro_rules! step8 {
    ($q:expr, $a:expr, $ones:expr, $p:ident, $c0:literal, $c1:literal, $c2:literal, $c3:literal) => {
        std::arch::asm!(
            "vmovdqu {x0}, ymmword ptr [{q}]",
            "vmovdqu {x1}, ymmword ptr [{q} + 128]",
            "vpabsb {w0}, {x0}",
            "vpabsb {w1}, {x1}",
            "vpbroadcastd {a}, dword ptr [{p}]",
            "vpbroadcastd {b}, dword ptr [{p} + 4]",
            "vpsignb {a}, {a}, {x0}",
            "vpsignb {b}, {b}, {x1}",
            "vpmaddubsw {a}, {w0}, {a}",
            "vpmaddubsw {b}, {w1}, {b}",
            "vpmaddwd {a}, {a}, {ones}",
            "vpmaddwd {b}, {b}, {ones}",
            $c0,
            "vpbroadcastd {a}, dword ptr [{p} + 8]",
            "vpbroadcastd {b}, dword ptr [{p} + 12]",
            "vpsignb {a}, {a}, {x0}",
            "vpsignb {b}, {b}, {x1}",
            "vpmaddubsw {a}, {w0}, {a}",
            "vpmaddubsw {b}, {w1}, {b}",
            "vpmaddwd {a}, {a}, {ones}",
            "vpmaddwd {b}, {b}, {ones}",
            $c1,
            "vpbroadcastd {a}, dword ptr [{p} + 16]",
            "vpbroadcastd {b}, dword ptr [{p} + 20]",
            "vpsignb {a}, {a}, {x0}",
            "vpsignb {b}, {b}, {x1}",
            "vpmaddubsw {a}, {w0}, {a}",
            "vpmaddubsw {b}, {w1}, {b}",
            "vpmaddwd {a}, {a}, {ones}",
            "vpmaddwd {b}, {b}, {ones}",
            $c2,
            "vpbroadcastd {a}, dword ptr [{p} + 24]",
            "vpbroadcastd {b}, dword ptr [{p} + 28]",
            "vpsignb {a}, {a}, {x0}",
            "vpsignb {b}, {b}, {x1}",
            "vpmaddubsw {a}, {w0}, {a}",
            "vpmaddubsw {b}, {w1}, {b}",
            "vpmaddwd {a}, {a}, {ones}",
            "vpmaddwd {b}, {b}, {ones}",
            $c3,
            q = in(reg) $q,
            p = in(reg) $a,
            ones = in(ymm_reg) $ones,
            x0 = out(ymm_reg) _,
            x1 = out(ymm_reg) _,
            w0 = out(ymm_reg) _,
            w1 = out(ymm_reg) _,
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
            step8!(
                qp,
                ap,
                ones,
                p,
                "vpaddd {s0}, {a}, {b}",
                "vpaddd {s1}, {a}, {b}",
                "vpaddd {s2}, {a}, {b}",
                "vpaddd {s3}, {a}, {b}"
            );
            for g in 1..4 {
                step8!(
                    qp.add(32 * g),
                    ap.add(32 * g),
                    ones,
                    p,
                    "vpaddd {a}, {a}, {b}\n vpaddd {s0}, {s0}, {a}",
                    "vpaddd {a}, {a}, {b}\n vpaddd {s1}, {s1}, {a}",
                    "vpaddd {a}, {a}, {b}\n vpaddd {s2}, {s2}, {a}",
                    "vpaddd {a}, {a}, {b}\n vpaddd {s3}, {s3}, {a}"
                );
            }
            p
        })
    }
}
