//! Q5_K tiles: the Q4_K scale/min arithmetic ([`super::q4_k::tile_with`]) on Q5_0-style
//! records (nibbles + a 5th-bit plane, codes [`Q5`] unsigned 0..=31).

use super::q4_k::tile_with;
use super::q5_0::Q5;
use super::{Core, F32x8, TileRows};
use crate::matmul::Layout;

/// The 8 row outputs of one Q5_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// The CPU supports `C`'s level. (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile<C: Core, const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [F32x8; N] {
    tile_with::<C, Q5, N>(q, s, r, Layout::Q5_K)
}
