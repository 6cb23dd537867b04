//! Q5_0 codes (shared with Q5_K) and the Q5_0 tile. A record is the Q4 nibble record plus
//! one 32-byte plane `H` (rows `4h..4h+4` at `128 + 16h`, one row per 32-bit lane): bit
//! `v` of byte `k` is the 5th bit of element `4v+k`, bit `4+v` that of `16+4v+k`. The 5th
//! bits are shifted into bit 4 and or-ed onto the nibbles (codes unsigned 0..=31, valid as
//! signed int8; `8·31·127 = 31496` still fits the plain-NEON int16 lanes). The `−16` is
//! folded exactly as `Σqa − 16·Σa` in int32, as the scalar reference does.

use super::cores::Codes;
use super::q4_0::tile_offset;
use super::{Core, F32x8, TileRows};
use std::arch::aarch64::*;

/// Q5_0 / Q5_K records.
pub struct Q5;

impl Codes for Q5 {
    const NARROW: bool = true;
    #[inline(always)]
    unsafe fn codes<const V: usize>(qp: *const u8, h: usize) -> (int8x16_t, int8x16_t) {
        let w = vld1q_u8(qp.add(32 * V + 16 * h));
        let hb = vld1q_u8(qp.add(128 + 16 * h));
        let m10 = vdupq_n_u8(0x10);
        // bit V -> bit 4 (left by 4-V); bit 4+V -> bit 4 (right by V). `ushl` by a
        // constant vector: negative counts shift right.
        let lo5 = vandq_u8(vshlq_u8(hb, vdupq_n_s8(4 - V as i8)), m10);
        let hi5 = vandq_u8(vshlq_u8(hb, vdupq_n_s8(-(V as i8))), m10);
        (
            vreinterpretq_s8_u8(vorrq_u8(vandq_u8(w, vdupq_n_u8(0x0F)), lo5)),
            vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(w), hi5)),
        )
    }
}

/// The 8 row outputs of one Q5_0 panel for activation rows `t0..t0+N`:
/// `acc += (dw·da) · (Σqa − 16Σa)` per block.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [F32x8; N] {
    // 16·Σa = 2·(8·Σa).
    tile_offset::<C, Q5, N, 2>(q, s, r, 160)
}
