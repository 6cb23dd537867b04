//! Q5_K gemv/gemm tiles on the packed layout of `matmul/packed_k.rs`: the Q5_0 record
//! decode of [`super::q5_0::pair_p16`] (nibbles + the 5th-bit plane, unsigned 5-bit codes into
//! `vpmaddubsw`; four vectors summed in int16, `<= 4·2·31·127 = 31496`) with the Q4_K
//! scale arithmetic of [`super::q4_k`]: the 6-bit sub-block scale widens the int16 sums
//! in `vpmaddwd` (exact int32 `sc·Σqa`), one FMA per sub-block applies `d·da`, one more
//! the min term `(dmin·m)·(da·Σa)` — the scalar reference's order, bit for bit.

use super::q4_k::tile_with;
use super::q5_0::pair_p16;
use crate::arch::TileRows;
use crate::matmul::Layout;
use std::arch::x86_64::*;

/// The 8 row outputs of one Q5_K panel for activation rows `t0..t0+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn tile<const N: usize>(q: &[u8], s: &[u16], r: TileRows<N>) -> [__m256; N] {
    // SAFETY: CPU features as this fn's; the closure reads block b's 160-byte record and
    // each row's 32 codes of it, where `tile_with` points `qp` and `ap` (in bounds).
    unsafe {
        tile_with::<N>(q, s, r, (Layout::Q5_K, 160, 3), |qp, ap, sc16| {
            let h = _mm256_loadu_si256(qp.add(128) as *const __m256i);
            let mut i32s = [_mm256_setzero_si256(); N];
            for pair in 0..2 {
                let p = pair_p16::<N>(qp, h, pair, ap);
                for t in 0..N {
                    i32s[t] = _mm256_add_epi32(i32s[t], _mm256_madd_epi16(p[t], sc16));
                }
            }
            i32s
        })
    }
}
