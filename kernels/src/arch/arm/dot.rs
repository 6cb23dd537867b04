//! int8 dot-product micro-kernels for aarch64, groundwork for the quantized gemv:
//! - plain NEON: `smull`/`smull2` to i16, pairwise-accumulate (`sadalp`) to i32;
//! - dotprod (`sdot`): 4-way i8 dot products accumulated into 4 i32 lanes;
//! - i8mm (`smmla`): a 2x8 by 8x2 i8 matrix product accumulated into a 2x2 i32 tile, and
//!   `usdot` (unsigned x signed), the form that takes unsigned nibbles directly.
//!
//! The `sdot`/`smmla`/`usdot` intrinsics are unstable in Rust, so they are `asm!` here, each
//! inside a `#[target_feature]` function so the assembler accepts the instruction and callers
//! inline it.

use crate::Isa;
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc[i] += sum_{j<4} a[4i+j] * b[4i+j]` (signed).
///
/// # Safety
/// The CPU has NEON and dotprod (`Isa::Dotprod.is_available()`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a,
         b = in(vreg) b, options(pure, nomem, nostack, preserves_flags));
    acc
}

/// `acc[i] += sum_{j<4} a[4i+j] * b[4i+j]` with `a` unsigned, `b` signed.
///
/// # Safety
/// The CPU has NEON and i8mm (`Isa::I8mm.is_available()`).
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub unsafe fn usdot(acc: int32x4_t, a: uint8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    asm!("usdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a,
         b = in(vreg) b, options(pure, nomem, nostack, preserves_flags));
    acc
}

/// `smmla` (a 2x8 by 8x2 tile): the matmul kernels' one, [`super::smmla`].
pub use super::smmla;

/// Scalar reference: `sum a[i] * b[i]` in i32.
pub fn dot_i8_ref(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// Scalar reference: `sum a[i] * b[i]` with `a` unsigned.
pub fn dot_u8i8_ref(a: &[u8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// Scalar reference of the 2x2 tile: `[a0·b0, a0·b1, a1·b0, a1·b1]`.
pub fn tile_2x2_ref(a0: &[i8], a1: &[i8], b0: &[i8], b1: &[i8]) -> [i32; 4] {
    [
        dot_i8_ref(a0, b0),
        dot_i8_ref(a0, b1),
        dot_i8_ref(a1, b0),
        dot_i8_ref(a1, b1),
    ]
}

/// One 32-element block (a q8_0 block) with plain NEON.
///
/// # Safety
/// NEON available.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn dot_i8_32_neon(a: &[i8; 32], b: &[i8; 32]) -> i32 {
    let mut acc = vdupq_n_s32(0);
    for h in 0..2 {
        let va = vld1q_s8(a.as_ptr().add(16 * h));
        let vb = vld1q_s8(b.as_ptr().add(16 * h));
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
        acc = vpadalq_s16(acc, vmull_high_s8(va, vb));
    }
    vaddvq_s32(acc)
}

/// One 32-element block with `sdot`.
///
/// # Safety
/// NEON + dotprod available.
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_i8_32_dotprod(a: &[i8; 32], b: &[i8; 32]) -> i32 {
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let acc = sdot(vdupq_n_s32(0), vld1q_s8(pa), vld1q_s8(pb));
    let acc = sdot(acc, vld1q_s8(pa.add(16)), vld1q_s8(pb.add(16)));
    vaddvq_s32(acc)
}

/// One 32-element block, unsigned `a` (e.g. nibbles 0..15) times signed `b`, with `usdot`.
///
/// # Safety
/// NEON + i8mm available.
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub unsafe fn dot_u8i8_32_i8mm(a: &[u8; 32], b: &[i8; 32]) -> i32 {
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let acc = usdot(vdupq_n_s32(0), vld1q_u8(pa), vld1q_s8(pb));
    let acc = usdot(acc, vld1q_u8(pa.add(16)), vld1q_s8(pb.add(16)));
    vaddvq_s32(acc)
}

/// Interleaves 8-byte halves of two 16-byte rows: (`x.lo ++ y.lo`, `x.hi ++ y.hi`).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn zip64(x: int8x16_t, y: int8x16_t) -> (int8x16_t, int8x16_t) {
    let (x, y) = (vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y));
    (
        vreinterpretq_s8_s64(vzip1q_s64(x, y)),
        vreinterpretq_s8_s64(vzip2q_s64(x, y)),
    )
}

/// 2 rows x 2 columns over `k` (multiple of 16) elements with `smmla`: 2 instructions per 16
/// elements for 4 dot products (sdot needs 4).
///
/// # Safety
/// NEON + i8mm available; all four slices hold at least `k` elements, `k % 16 == 0`.
#[target_feature(enable = "neon,i8mm")]
pub unsafe fn tile_2x2_i8mm(a0: &[i8], a1: &[i8], b0: &[i8], b1: &[i8], k: usize) -> [i32; 4] {
    let mut acc = vdupq_n_s32(0);
    let mut i = 0;
    while i < k {
        let (alo, ahi) = zip64(vld1q_s8(a0.as_ptr().add(i)), vld1q_s8(a1.as_ptr().add(i)));
        let (blo, bhi) = zip64(vld1q_s8(b0.as_ptr().add(i)), vld1q_s8(b1.as_ptr().add(i)));
        acc = smmla(acc, alo, blo);
        acc = smmla(acc, ahi, bhi);
        i += 16;
    }
    let mut out = [0i32; 4];
    vst1q_s32(out.as_mut_ptr(), acc);
    out
}

/// The same tile with `sdot` (4 accumulators, reduced at the end).
///
/// # Safety
/// NEON + dotprod available; as [`tile_2x2_i8mm`].
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn tile_2x2_dotprod(a0: &[i8], a1: &[i8], b0: &[i8], b1: &[i8], k: usize) -> [i32; 4] {
    let z = vdupq_n_s32(0);
    let mut acc = [z; 4];
    let mut i = 0;
    while i < k {
        let (va0, va1) = (vld1q_s8(a0.as_ptr().add(i)), vld1q_s8(a1.as_ptr().add(i)));
        let (vb0, vb1) = (vld1q_s8(b0.as_ptr().add(i)), vld1q_s8(b1.as_ptr().add(i)));
        acc[0] = sdot(acc[0], va0, vb0);
        acc[1] = sdot(acc[1], va0, vb1);
        acc[2] = sdot(acc[2], va1, vb0);
        acc[3] = sdot(acc[3], va1, vb1);
        i += 16;
    }
    // Pairwise adds reduce the four accumulators into one vector [r0, r1, r2, r3].
    let s = vpaddq_s32(vpaddq_s32(acc[0], acc[1]), vpaddq_s32(acc[2], acc[3]));
    let mut out = [0i32; 4];
    vst1q_s32(out.as_mut_ptr(), s);
    out
}

fn block(x: &[i8]) -> &[i8; 32] {
    x.try_into().unwrap()
}

fn check_available(isa: Isa) {
    assert!(
        isa.is_available(),
        "pocket-kernels: ISA level {isa} is not available on this CPU"
    );
}

/// `a · b` over lengths that are a multiple of 32, on level `isa` (`I8mm` uses `sdot`).
pub fn dot_i8_with(isa: Isa, a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "dot_i8: lengths differ");
    assert!(
        a.len() % 32 == 0,
        "dot_i8: length {} not a multiple of 32",
        a.len()
    );
    check_available(isa);
    let blocks = a.chunks_exact(32).zip(b.chunks_exact(32));
    match isa {
        // SAFETY (both arms): availability checked above.
        Isa::Neon => blocks
            .map(|(x, y)| unsafe { dot_i8_32_neon(block(x), block(y)) })
            .sum(),
        Isa::Dotprod | Isa::I8mm => blocks
            .map(|(x, y)| unsafe { dot_i8_32_dotprod(block(x), block(y)) })
            .sum(),
        _ => dot_i8_ref(a, b),
    }
}

/// Unsigned `a` times signed `b`, lengths a multiple of 32, on level `isa` (only `I8mm` has
/// `usdot`; lower levels use the reference).
pub fn dot_u8i8_with(isa: Isa, a: &[u8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "dot_u8i8: lengths differ");
    assert!(
        a.len() % 32 == 0,
        "dot_u8i8: length {} not a multiple of 32",
        a.len()
    );
    check_available(isa);
    match isa {
        Isa::I8mm => a
            .chunks_exact(32)
            .zip(b.chunks_exact(32))
            // SAFETY: availability checked above; chunks are 32 long.
            .map(|(x, y)| unsafe { dot_u8i8_32_i8mm(x.try_into().unwrap(), y.try_into().unwrap()) })
            .sum(),
        _ => dot_u8i8_ref(a, b),
    }
}

/// 2x2 tile `[a0·b0, a0·b1, a1·b0, a1·b1]`, equal lengths that are a multiple of 16, on level
/// `isa` (`I8mm`: `smmla`, `Dotprod`: `sdot`, `Neon`: per-pair NEON dots).
pub fn tile_2x2_with(isa: Isa, a0: &[i8], a1: &[i8], b0: &[i8], b1: &[i8]) -> [i32; 4] {
    let k = a0.len();
    assert!(
        a1.len() == k && b0.len() == k && b1.len() == k,
        "tile_2x2: lengths differ"
    );
    assert!(k % 16 == 0, "tile_2x2: length {k} not a multiple of 16");
    check_available(isa);
    match isa {
        // SAFETY: availability checked above; lengths checked.
        Isa::I8mm => unsafe { tile_2x2_i8mm(a0, a1, b0, b1, k) },
        Isa::Dotprod => unsafe { tile_2x2_dotprod(a0, a1, b0, b1, k) },
        _ => tile_2x2_ref(a0, a1, b0, b1),
    }
}
