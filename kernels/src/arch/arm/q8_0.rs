//! Q8_0 codes and tile. A packed Q8_0 (panel, block) is 8 vectors `g` of 32
//! bytes; the 16 bytes at `32g + 16h` hold rows `4h..4h+4`, elements `4g..4g+4` each
//! (signed codes, multiplied signed x signed).

use super::cores::Codes;
use super::q4_0::tile_offset;
use super::{Core, F32x8, TileRows};
use std::arch::aarch64::*;

/// Q8_0 records: vector `v` and vector `v + 4` are the low and high codes (signed bytes,
/// loaded as they are).
pub struct Q8;

impl Codes for Q8 {
    const NARROW: bool = false;
    #[inline(always)]
    unsafe fn codes<const V: usize>(qp: *const u8, h: usize) -> (int8x16_t, int8x16_t) {
        (
            vld1q_s8(qp.add(32 * V + 16 * h) as *const i8),
            vld1q_s8(qp.add(32 * (V + 4) + 16 * h) as *const i8),
        )
    }
}

/// The 8 row outputs of one Q8_0 panel for activation rows `t0..t0+N`: the symmetric
/// tile of Q4_0 with no offset (the codes are signed).
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [F32x8; N] {
    tile_offset::<C, Q8, N, 0>(q, s, r, 256)
}
