//! A read-bandwidth probe ([`read_sum`]): sums a buffer as u64 words, so that every byte is
//! loaded and the loads cannot be elided. `benches/matmul.rs` times it against the gemv
//! kernels (a matmul that reads its weights at this rate is bandwidth-bound). The x86 body
//! (`arch::x86::read`) reads four runs of the buffer side by side, 32 bytes at a time into
//! four accumulators with software prefetch: the most this machine's cores read (a decode
//! step's gemv, its weights in a few streams with prefetch, reaches ~94 % of it), so it is
//! the roof `pocket bench --breakdown` and `pocket compare` measure decode against.

use super::{path, Path};
use crate::Isa;

/// Scalar reference: the wrapping sum of `buf`'s little-endian u64 words (a last partial
/// word is left out).
pub fn read_sum_ref(buf: &[u8]) -> u64 {
    buf.chunks_exact(8).fold(0u64, |s, c| {
        s.wrapping_add(u64::from_le_bytes(c.try_into().unwrap()))
    })
}

/// [`read_sum_ref`] on level `isa`: the same value on every level.
pub fn read_sum_with(isa: Isa, buf: &[u8]) -> u64 {
    match path(isa) {
        Path::Scalar => read_sum_ref(buf),
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::read::read_sum(t, buf),
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => read_sum_ref(buf),
    }
}

/// [`read_sum_with`] on the active level.
pub fn read_sum(buf: &[u8]) -> u64 {
    read_sum_with(Isa::active(), buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every level gives the reference's sum, on lengths around the 128-byte steps of the
    /// SIMD body (its tail included) and at unaligned starts.
    #[test]
    fn every_level_sums_like_the_reference() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for start in [0, 1, 7] {
            for len in [0, 8, 127, 128, 129, 1000, 128 * 13 + 40, 4096 + 72] {
                let buf = &data[start..start + len];
                let want = read_sum_ref(buf);
                for isa in Isa::available() {
                    assert_eq!(
                        read_sum_with(isa, buf),
                        want,
                        "{isa}: start {start} len {len}"
                    );
                }
            }
        }
        assert_ne!(read_sum_ref(&data), 0);
    }
}
