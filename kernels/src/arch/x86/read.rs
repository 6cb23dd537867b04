//! AVX2 body of the read-bandwidth probe ([`crate::ops::read`]), with its safe wrapper.

use super::ops::Simd;
use crate::ops::read::read_sum_ref;
use std::arch::x86_64::*;

/// Streams read at once: the buffer's 128-byte steps are cut into this many equal runs,
/// read side by side. One run with prefetch reached 12.5 GB/s on one core of the Sapphire
/// Rapids-class VM (24 with two), below what the gemv reads there (14.6 at one thread);
/// four runs 15.5 (30 with two): one stream cannot keep enough lines in flight.
const STREAMS: usize = 4;

/// Bytes prefetched ahead of each stream (1 KiB measured as good as 2 and 4 with four
/// streams).
const AHEAD: usize = 1024;

/// `read_sum_ref(buf)`: the 128-byte steps in AVX2 (u64 lanes add wrapping, in any order,
/// so the sum is the same), the rest by the reference.
pub fn read_sum(_: Simd, buf: &[u8]) -> u64 {
    let whole = buf.len() / 128 * 128;
    // SAFETY: the token proves AVX2; the body reads `buf[..whole]` only.
    let head = unsafe { sum_avx2(buf.as_ptr(), whole / 128) };
    head.wrapping_add(read_sum_ref(&buf[whole..]))
}

/// The u64 sum of `n` 128-byte steps from `p`: [`STREAMS`] runs of `n / STREAMS` steps
/// read side by side (the last `n % STREAMS` steps after them), each step into four
/// 32-byte accumulators and prefetching [`AHEAD`] bytes ahead of its run (a prefetch past
/// the end reads nothing).
///
/// # Safety
/// AVX2 available; `p` readable for `128·n` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sum_avx2(p: *const u8, n: usize) -> u64 {
    let mut a = [_mm256_setzero_si256(); 4];
    let run = n / STREAMS;
    for k in 0..n {
        // Step `k`: the runs side by side, then the leftover steps in order.
        let at = if k < STREAMS * run {
            (k % STREAMS * run + k / STREAMS) * 128
        } else {
            k * 128
        };
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at + AHEAD) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at + AHEAD + 64) as *const i8);
        for (j, acc) in a.iter_mut().enumerate() {
            let x = _mm256_loadu_si256(p.add(at + 32 * j) as *const __m256i);
            *acc = _mm256_add_epi64(*acc, x);
        }
    }
    let s = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
    let mut o = [0u64; 4];
    _mm256_storeu_si256(o.as_mut_ptr() as *mut __m256i, s);
    o.iter().fold(0u64, |x, y| x.wrapping_add(*y))
}
