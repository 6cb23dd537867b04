//! Q8_K: the activation format paired with the K-quants and IQ4_XS. 256 values in 292
//! bytes.
//!
//! Layout (`block_q8_K` in ggml-common.h): `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]`;
//! value `q * d`. `bsums[k]` is the sum of `qs[16k..16k+16]`, so a weight format with
//! per-sub-block mins can apply them with 16 multiplies instead of 256.

use bytemuck::{Pod, Zeroable};

use super::decode_blocks;
use super::kquant::{nearest_int, QK_K};

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`), as
/// `dequantize_row_q8_K`.
pub fn dequantize_row(blocks: &[BlockQ8K], out: &mut [f32]) {
    decode_blocks(blocks, out, QK_K, |b, y| {
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = b.d * q as f32;
        }
    })
}

/// `quantize_row_q8_K_ref`: `d = max / -127` (`max` the element of largest magnitude,
/// 127 rather than 128 so that every q stays in -127..=127), `q = nearest_int(x/d)`,
/// plus the 16-element sums. An all-zero block gets `d = 0`, zero quants and zero sums
/// (ggml leaves its sums unwritten).
pub fn quantize_row(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(x.len(), out.len() * QK_K);
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let max = super::q4_0::max_by_magnitude(xb);
        if max.abs() == 0.0 {
            *b = BlockQ8K::zeroed();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (sum, group) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *sum = group.iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn quantizes_a_known_block_with_its_sums() {
        let mut x = [0.0f32; QK_K];
        x[0] = -2.0; // the largest magnitude: q = -127, d = max / -127 = 2/127
        x[1] = 1.0;
        x[17] = 0.5;
        let q = Q8_K.quantize(&x);
        assert_eq!(q[0].d, 1.0 / (-127.0 / -2.0));
        assert_eq!(&q[0].qs[..2], &[-127, 64]); // 63.5 rounds to even
        assert_eq!(q[0].qs[17], 32);
        assert_eq!(q[0].bsums[0], -127 + 64);
        assert_eq!(q[0].bsums[1], 32);
        assert!(q[0].bsums[2..].iter().all(|&s| s == 0));
    }

    #[test]
    fn zero_block_is_all_zero() {
        assert_eq!(Q8_K.quantize(&[0.0; QK_K])[0], BlockQ8K::zeroed());
    }

    #[test]
    fn round_trip_within_llama_cpp_bound_and_sums_hold() {
        let x = generate_data(0.0, TEST_SIZE, 2.0);
        Q8_K.assert_round_trip_within_llama_cpp_bound();
        let q = Q8_K.quantize(&x);
        for b in &q {
            for (k, s) in b.bsums.iter().enumerate() {
                let want: i32 = b.qs[16 * k..16 * k + 16].iter().map(|&q| q as i32).sum();
                assert_eq!(*s as i32, want);
            }
        }
    }
}
