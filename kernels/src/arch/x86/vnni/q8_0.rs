//! Q8_0 tiles on interleaved activation records with `vpdpbusd`. The weights are signed and
//! `vpdpbusd` multiplies unsigned by signed bytes, so each weight vector is flipped to
//! `w + 128` (`xor 0x80`, once per vector for all N tokens) and the excess `128·Σa` is taken
//! off with the record's `8·Σa`: `Σ(w+128)·a - 16·(8·Σa) = Σw·a`, exact in int32
//! (`|Σ| <= 32·255·128`). Vectors `g` and `g+4` of a block meet token `t`'s 8 bytes at
//! `record + 8Ng + 8t` ([`super::super::interleave`]).

use super::lanes::Lanes;
use super::q4::Panels;
use crate::arch::x86::IL_REC;

/// The row outputs of one Q8_0 panel (two for 16 lanes) for the N tokens of an interleaved
/// tile: per block `(dw·da)·Σwa`, the float operations of the AVX2 tiles.
///
/// # Safety
/// Inside the level's root ([`super::Dp::drive`]). (Lengths are checked.)
#[inline(always)]
pub unsafe fn tile_il<L: Lanes, const N: usize>(w: Panels, a: &[u8], nb: usize) -> [L::F; N] {
    let rec = N * IL_REC;
    w.check::<L>(nb * 256, nb * 8);
    assert!(a.len() >= nb * rec);
    // SAFETY: in the level's root (contract).
    let mut acc = [unsafe { L::zero_f() }; N];
    let (mut qp, mut ap, mut sp) = (w.q.as_ptr(), a.as_ptr(), w.s.as_ptr());
    for _ in 0..nb {
        // SAFETY: block b's 256 code bytes, 8 scales (per panel) and record are in bounds
        // (checked above; the pointers are at block b).
        unsafe {
            let mut lo = [L::zero_i(); N];
            let mut hi = lo;
            for g in 0..4 {
                let x0 = L::flip(L::codes(qp.add(32 * g), w.q_step));
                let x1 = L::flip(L::codes(qp.add(128 + 32 * g), w.q_step));
                for t in 0..N {
                    let o = ap.add(8 * N * g + 8 * t);
                    lo[t] = L::dp(lo[t], x0, o);
                    hi[t] = L::dp(hi[t], x1, o.add(4));
                }
            }
            let dw = L::halves(sp, w.s_step);
            for t in 0..N {
                let sum8 = L::shl4(L::bcast_i(ap.add(36 * N + 4 * t)));
                let i = L::sub(L::add(lo[t], hi[t]), sum8);
                let sc = L::mul(dw, L::bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = L::fma(sc, L::cvt(i), acc[t]);
            }
        }
        qp = qp.wrapping_add(256);
        sp = sp.wrapping_add(8);
        ap = ap.wrapping_add(rec);
    }
    acc
}
