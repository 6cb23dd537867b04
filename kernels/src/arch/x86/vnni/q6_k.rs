//! Q6_K tiles on interleaved activation records with `vpdpbusd`. The packed record
//! (`matmul/packed_k.rs`) is the nibble record plus two 2-bit planes per panel and block
//! (`hl` for the low nibbles' elements, `hh` for the high ones'); vector `v` takes bits
//! `2v..2v+2` of the plane's bytes as code bits 4-5, as the AVX2 tile
//! (`super::super::q6_k`) rebuilds them. The unsigned 6-bit codes of the two 16-element
//! halves of a block (the two sub-blocks, each with its int8 scale) are summed apart:
//! `isum = sc_lo·Σlo + sc_hi·Σhi − 32·(sc_lo·S_lo + sc_hi·S_hi)` with the record's half-block
//! sums `S`, the same exact int32 as AVX2's `vpmaddwd` chain. The float part is the AVX2
//! tile's (`(dw·da)·isum`, one FMA per block), so the bits are the scalar reference's.

use super::lanes::Lanes;
use super::q4::{block_sums_lohi, Decode, KGroup, Panels};
use super::walk::{At, Size, Step};

/// A Q6_K record's two 2-bit planes (`hl`, `hh`; both panels' for 16 lanes).
#[derive(Clone, Copy)]
struct Planes6<L: Lanes>(L::I, L::I);

/// Bits `2v..2v+2` of every byte of `h` at bits 4-5 (other bits garbage).
///
/// # Safety
/// Inside the level's root.
#[inline(always)]
unsafe fn plane_bits<L: Lanes>(h: L::I, v: usize) -> L::I {
    // SAFETY: register operations in the level's root (contract).
    unsafe {
        match v {
            0 => L::sll16::<4>(h),
            1 => L::sll16::<2>(h),
            2 => h,
            _ => L::srl16::<2>(h),
        }
    }
}

/// Vector `v` as unsigned 6-bit codes (low nibbles | bits `2v..2v+2` of `hl` at bits 4-5,
/// high nibbles | those of `hh`).
impl<L: Lanes> Decode<L> for Planes6<L> {
    #[inline(always)]
    unsafe fn decode(self, x: L::I, v: usize) -> (L::I, L::I) {
        // SAFETY: register operations in the level's root (contract).
        unsafe {
            let m30 = L::splat8(0x30);
            (
                L::or(L::lo4(x), L::and(plane_bits::<L>(self.0, v), m30)),
                L::or(L::hi4(x), L::and(plane_bits::<L>(self.1, v), m30)),
            )
        }
    }
}

/// Q6_K (an 8-block group a step).
#[allow(non_camel_case_types)] // ggml's name
pub struct Q6_K;

impl Step for Q6_K {
    const SIZE: Size = Size::new(8, 8 * 192, crate::matmul::Layout::Q6_K.scales_per_group());
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        // The group's 72 u16 (144 bytes): d at 0, then per block j the 8 rows' (sc_lo,
        // sc_hi) at 16 + 16j.
        let g = KGroup::new::<N>(w, at, 192);
        // SAFETY: the group's scales, 8 blocks' codes and records are in bounds, in the
        // level's root (contract); j < 8.
        unsafe {
            let dw = g.halves::<L>(0);
            for j in 0..8 {
                let (qp, ap) = g.block(j);
                let planes = Planes6::<L>(
                    L::codes(qp.add(128), w.q_step),
                    L::codes(qp.add(160), w.q_step),
                );
                let (lo, hi) = block_sums_lohi::<L, N>(qp, w.q_step, ap, planes);
                let scp = L::byte_pairs(g.bytes.add(16 + 16 * j), g.byte_step);
                let (sclo, schi) = (L::sra32::<16>(L::sll32::<16>(scp)), L::sra32::<16>(scp));
                for t in 0..N {
                    let off = L::madd16(scp, L::bcast_i(ap.add(44 * N + 4 * t)));
                    let i = L::add(L::mullo(lo[t], sclo), L::mullo(hi[t], schi));
                    let i = L::sub(i, L::sll32::<5>(off));
                    let sc = L::mul(dw, L::bcast_f(ap.add(32 * N + 4 * t)));
                    acc[t] = L::fma(sc, L::cvt(i), acc[t]);
                }
            }
        }
    }
}
