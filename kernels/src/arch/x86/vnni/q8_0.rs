//! Q8_0 tiles on interleaved activation records with `vpdpbusd`. The weights are signed and
//! `vpdpbusd` multiplies unsigned by signed bytes, so each weight vector is flipped to
//! `w + 128` (`xor 0x80`, once per vector for all N tokens) and the excess `128·Σa` is taken
//! off with the record's `8·Σa`: `Σ(w+128)·a - 16·(8·Σa) = Σw·a`, exact in int32
//! (`|Σ| <= 32·255·128`). Vectors `g` and `g+4` of a block meet token `t`'s 8 bytes at
//! `record + 8Ng + 8t` ([`super::super::interleave`]).

use super::lanes::Lanes;
use super::q4::Panels;
use super::walk::{At, Size, Step};

/// Q8_0 (one block a step): per block `(dw·da)·Σwa`, the float operations of the AVX2
/// tiles.
pub struct Q8_0;

impl Step for Q8_0 {
    const SIZE: Size = Size::new(1, 256, 8);
    #[inline(always)]
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]) {
        let (qp, ap) = (at.q, at.a);
        // SAFETY: the block's 256 code bytes, 8 scales (per panel) and record are in
        // bounds, in the level's root (contract).
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
            let dw = L::halves(at.s, w.s_step);
            for t in 0..N {
                let sum8 = L::shl4(L::bcast_i(ap.add(36 * N + 4 * t)));
                let i = L::sub(L::add(lo[t], hi[t]), sum8);
                let sc = L::mul(dw, L::bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = L::fma(sc, L::cvt(i), acc[t]);
            }
        }
    }
}
