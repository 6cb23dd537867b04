//! The vector width of the VNNI tiles: [`Y8`] is one 8-row panel per ymm register (both
//! VNNI levels), [`Z16`] two consecutive panels per zmm register (AVX-512: lanes 0-7 the
//! first panel's rows, 8-15 the second's). The tiles are written once over [`Lanes`]; at
//! 16 lanes every instruction does two panels' work, and on cores with full-width 512-bit
//! units (AMD Zen5: `vpdpbusd` zmm at the same rate as ymm, measured) that doubles the
//! multiply-accumulate rate. Per lane the operations are the same, so both widths give the
//! same bits.
//!
//! Every function is `#[inline(always)]` and `unsafe`: it may only run inside the level's
//! `#[target_feature]` root (`Dp::drive`), and pointers must be valid as each one says.

use super::Dp;
use std::arch::x86_64::*;
use std::marker::PhantomData;

/// One register width of int32 / f32 lanes, one lane per weight row.
pub trait Lanes: Copy {
    type I: Copy;
    type F: Copy;
    /// Rows per register: 8 or 16.
    const ROWS: usize;
    unsafe fn zero_i() -> Self::I;
    unsafe fn zero_f() -> Self::F;
    /// The 32 code bytes at `qp` (the first panel's) and, for 16 lanes, at `qp + qs`.
    unsafe fn codes(qp: *const u8, qs: usize) -> Self::I;
    /// Low / high nibbles of every byte.
    unsafe fn lo4(x: Self::I) -> Self::I;
    unsafe fn hi4(x: Self::I) -> Self::I;
    /// `x xor 0x80` per byte (signed to unsigned-plus-128).
    unsafe fn flip(x: Self::I) -> Self::I;
    /// `acc + Σ₄ u·a` per lane, `a` the 4 signed bytes at `ap` in every lane.
    unsafe fn dp(acc: Self::I, u: Self::I, ap: *const u8) -> Self::I;
    unsafe fn add(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn sub(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn mullo(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn shl4(a: Self::I) -> Self::I;
    unsafe fn and(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn or(a: Self::I, b: Self::I) -> Self::I;
    /// `x` in every byte.
    unsafe fn splat8(x: i8) -> Self::I;
    /// Every 16-bit element shifted left / right (logical) by `S`.
    unsafe fn sll16<const S: u32>(a: Self::I) -> Self::I;
    unsafe fn srl16<const S: u32>(a: Self::I) -> Self::I;
    /// Every 32-bit lane shifted left / right (arithmetic) by `S`.
    unsafe fn sll32<const S: u32>(a: Self::I) -> Self::I;
    unsafe fn sra32<const S: u32>(a: Self::I) -> Self::I;
    /// `a.lo16·b.lo16 + a.hi16·b.hi16` per 32-bit lane (signed, `vpmaddwd`).
    unsafe fn madd16(a: Self::I, b: Self::I) -> Self::I;
    /// The i32 at `p` in every lane.
    unsafe fn bcast_i(p: *const u8) -> Self::I;
    /// The f32 at `p` in every lane.
    unsafe fn bcast_f(p: *const u8) -> Self::F;
    unsafe fn splat(x: f32) -> Self::F;
    /// 8 fp16 at `sp` (and 8 at `sp + ss` u16s for the second panel), as f32.
    unsafe fn halves(sp: *const u16, ss: usize) -> Self::F;
    /// 8 bytes at `bp` (and at `bp + bs`), zero-extended to i32.
    unsafe fn bytes(bp: *const u8, bs: usize) -> Self::I;
    /// 16 signed bytes at `bp` (and at `bp + bs`), sign-extended to i16: lane `i` holds
    /// bytes `2i` (low half) and `2i + 1` (high half).
    unsafe fn byte_pairs(bp: *const u8, bs: usize) -> Self::I;
    unsafe fn cvt(a: Self::I) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// `a·b + c`, one rounding.
    unsafe fn fma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// `c - a·b`, one rounding.
    unsafe fn fnma(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
}

/// One panel per ymm register, `vpdpbusd` as level `D` encodes it.
#[derive(Clone, Copy)]
pub struct Y8<D>(PhantomData<D>);

/// Two panels per zmm register (AVX-512 only).
#[derive(Clone, Copy)]
pub struct Z16;

impl<D: Dp> Lanes for Y8<D> {
    type I = __m256i;
    type F = __m256;
    const ROWS: usize = 8;
    #[inline(always)]
    unsafe fn zero_i() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn codes(qp: *const u8, _qs: usize) -> __m256i {
        unsafe { _mm256_loadu_si256(qp as *const __m256i) }
    }
    #[inline(always)]
    unsafe fn lo4(x: __m256i) -> __m256i {
        _mm256_and_si256(x, _mm256_set1_epi8(0x0F))
    }
    #[inline(always)]
    unsafe fn hi4(x: __m256i) -> __m256i {
        _mm256_and_si256(_mm256_srli_epi16::<4>(x), _mm256_set1_epi8(0x0F))
    }
    #[inline(always)]
    unsafe fn flip(x: __m256i) -> __m256i {
        _mm256_xor_si256(x, _mm256_set1_epi8(-128))
    }
    #[inline(always)]
    unsafe fn dp(acc: __m256i, u: __m256i, ap: *const u8) -> __m256i {
        unsafe { D::dpbusd(acc, u, Self::bcast_i(ap)) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256i, b: __m256i) -> __m256i {
        _mm256_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn mullo(a: __m256i, b: __m256i) -> __m256i {
        _mm256_mullo_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn shl4(a: __m256i) -> __m256i {
        _mm256_slli_epi32::<4>(a)
    }
    #[inline(always)]
    unsafe fn and(a: __m256i, b: __m256i) -> __m256i {
        _mm256_and_si256(a, b)
    }
    #[inline(always)]
    unsafe fn or(a: __m256i, b: __m256i) -> __m256i {
        _mm256_or_si256(a, b)
    }
    #[inline(always)]
    unsafe fn splat8(x: i8) -> __m256i {
        _mm256_set1_epi8(x)
    }
    #[inline(always)]
    unsafe fn sll16<const S: u32>(a: __m256i) -> __m256i {
        _mm256_sll_epi16(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn srl16<const S: u32>(a: __m256i) -> __m256i {
        _mm256_srl_epi16(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn sll32<const S: u32>(a: __m256i) -> __m256i {
        _mm256_sll_epi32(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn sra32<const S: u32>(a: __m256i) -> __m256i {
        _mm256_sra_epi32(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn madd16(a: __m256i, b: __m256i) -> __m256i {
        _mm256_madd_epi16(a, b)
    }
    #[inline(always)]
    unsafe fn byte_pairs(bp: *const u8, _bs: usize) -> __m256i {
        unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(bp as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn bcast_i(p: *const u8) -> __m256i {
        _mm256_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
    }
    #[inline(always)]
    unsafe fn bcast_f(p: *const u8) -> __m256 {
        _mm256_set1_ps(unsafe { (p as *const f32).read_unaligned() })
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn halves(sp: *const u16, _ss: usize) -> __m256 {
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn bytes(bp: *const u8, _bs: usize) -> __m256i {
        unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(bp as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn cvt(a: __m256i) -> __m256 {
        _mm256_cvtepi32_ps(a)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fnma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fnmadd_ps(a, b, c)
    }
}

impl Lanes for Z16 {
    type I = __m512i;
    type F = __m512;
    const ROWS: usize = 16;
    #[inline(always)]
    unsafe fn zero_i() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn zero_f() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn codes(qp: *const u8, qs: usize) -> __m512i {
        unsafe {
            let a = _mm256_loadu_si256(qp as *const __m256i);
            let b = _mm256_loadu_si256(qp.add(qs) as *const __m256i);
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
        }
    }
    #[inline(always)]
    unsafe fn lo4(x: __m512i) -> __m512i {
        _mm512_and_si512(x, _mm512_set1_epi8(0x0F))
    }
    #[inline(always)]
    unsafe fn hi4(x: __m512i) -> __m512i {
        _mm512_and_si512(_mm512_srli_epi16::<4>(x), _mm512_set1_epi8(0x0F))
    }
    #[inline(always)]
    unsafe fn flip(x: __m512i) -> __m512i {
        _mm512_xor_si512(x, _mm512_set1_epi8(-128))
    }
    #[inline(always)]
    unsafe fn dp(acc: __m512i, u: __m512i, ap: *const u8) -> __m512i {
        unsafe { _mm512_dpbusd_epi32(acc, u, Self::bcast_i(ap)) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512i, b: __m512i) -> __m512i {
        _mm512_add_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512i, b: __m512i) -> __m512i {
        _mm512_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn mullo(a: __m512i, b: __m512i) -> __m512i {
        _mm512_mullo_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn shl4(a: __m512i) -> __m512i {
        _mm512_slli_epi32::<4>(a)
    }
    #[inline(always)]
    unsafe fn and(a: __m512i, b: __m512i) -> __m512i {
        _mm512_and_si512(a, b)
    }
    #[inline(always)]
    unsafe fn or(a: __m512i, b: __m512i) -> __m512i {
        _mm512_or_si512(a, b)
    }
    #[inline(always)]
    unsafe fn splat8(x: i8) -> __m512i {
        _mm512_set1_epi8(x)
    }
    #[inline(always)]
    unsafe fn sll16<const S: u32>(a: __m512i) -> __m512i {
        _mm512_sll_epi16(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn srl16<const S: u32>(a: __m512i) -> __m512i {
        _mm512_srl_epi16(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn sll32<const S: u32>(a: __m512i) -> __m512i {
        _mm512_sll_epi32(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn sra32<const S: u32>(a: __m512i) -> __m512i {
        _mm512_sra_epi32(a, _mm_cvtsi32_si128(S as i32))
    }
    #[inline(always)]
    unsafe fn madd16(a: __m512i, b: __m512i) -> __m512i {
        _mm512_madd_epi16(a, b)
    }
    #[inline(always)]
    unsafe fn byte_pairs(bp: *const u8, bs: usize) -> __m512i {
        unsafe {
            let a = _mm_loadu_si128(bp as *const __m128i);
            let b = _mm_loadu_si128(bp.add(bs) as *const __m128i);
            _mm512_cvtepi8_epi16(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b))
        }
    }
    #[inline(always)]
    unsafe fn bcast_i(p: *const u8) -> __m512i {
        _mm512_set1_epi32(unsafe { (p as *const i32).read_unaligned() })
    }
    #[inline(always)]
    unsafe fn bcast_f(p: *const u8) -> __m512 {
        _mm512_set1_ps(unsafe { (p as *const f32).read_unaligned() })
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn halves(sp: *const u16, ss: usize) -> __m512 {
        unsafe {
            let a = _mm_loadu_si128(sp as *const __m128i);
            let b = _mm_loadu_si128(sp.add(ss) as *const __m128i);
            _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b))
        }
    }
    #[inline(always)]
    unsafe fn bytes(bp: *const u8, bs: usize) -> __m512i {
        unsafe {
            let a = _mm_loadl_epi64(bp as *const __m128i);
            let b = _mm_loadl_epi64(bp.add(bs) as *const __m128i);
            _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(a, b))
        }
    }
    #[inline(always)]
    unsafe fn cvt(a: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(a)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fnma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fnmadd_ps(a, b, c)
    }
}
