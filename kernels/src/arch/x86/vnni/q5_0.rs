//! Q5_0 tiles on interleaved activation records with `vpdpbusd`: the packed record is the
//! Q4_0 nibble record plus one 32-byte plane of 5th bits per panel and block
//! (`matmul/packed_k.rs`); vector `v`'s low nibbles take bit `v` of the plane's bytes, its
//! high nibbles bit `4 + v`, as the AVX2 tile (`super::super::q5_0`) merges them. The
//! unsigned 5-bit codes meet the activation bytes as in [`super::q4`], and the `−16` of
//! the codes is taken off as `16·Σa = 2·(8·Σa)` from the record: exact in int32. The float
//! part is the AVX2 tiles' (`(dw·da)·isum`, one FMA per block), so the bits are the scalar
//! reference's.

use super::lanes::Lanes;
use super::q4::{block_sums_lohi, Decode, Panels};
use super::walk::{At, Size, Step};

/// A Q5 record's plane of 5th bits (both panels' for 16 lanes).
#[derive(Clone, Copy)]
struct Plane5<L: Lanes>(L::I);

/// Vector `v` as unsigned 5-bit codes: (low nibbles | bit `v` of the plane at bit 4, high
/// nibbles | bit `4 + v`).
impl<L: Lanes> Decode<L> for Plane5<L> {
    #[inline(always)]
    unsafe fn decode(self, x: L::I, v: usize) -> (L::I, L::I) {
        let h = self.0;
        // SAFETY: register operations in the level's root (contract).
        unsafe {
            let (lo, hi) = match v {
                0 => (L::sll16::<4>(h), h),
                1 => (L::sll16::<3>(h), L::srl16::<1>(h)),
                2 => (L::sll16::<2>(h), L::srl16::<2>(h)),
                _ => (L::sll16::<1>(h), L::srl16::<3>(h)),
            };
            let m10 = L::splat8(0x10);
            (
                L::or(L::lo4(x), L::and(lo, m10)),
                L::or(L::hi4(x), L::and(hi, m10)),
            )
        }
    }
}

/// Q5_0 (one block a step): `(dw·da)·(Σqa − 16·Σa)` per block.
pub struct Q5_0;

impl Step for Q5_0 {
    const SIZE: Size = Size::new(1, 160, 8);
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        // SAFETY: the block's 160 code bytes, 8 scales (per panel) and record are in
        // bounds, in the level's root (contract).
        unsafe {
            let h = Plane5::<L>(L::codes(at.q.add(128), w.q_step));
            let (lo, hi) = block_sums_lohi::<L, N>(at.q, w.q_step, at.a, h);
            let dw = L::halves(at.s, w.s_step);
            for t in 0..N {
                let s8 = L::bcast_i(at.a.add(36 * N + 4 * t));
                let i = L::sub(L::add(lo[t], hi[t]), L::add(s8, s8));
                let sc = L::mul(dw, L::bcast_f(at.a.add(32 * N + 4 * t)));
                acc[t] = L::fma(sc, L::cvt(i), acc[t]);
            }
        }
    }
}
