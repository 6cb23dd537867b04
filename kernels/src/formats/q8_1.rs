//! Q8_1: the activation format paired with Q4_1 and Q5_1 weights. 32 values in 36 bytes.
//!
//! Layout (`block_q8_1` in ggml-common.h): `d: f16`, `s: f16`, then `qs: [i8; 32]`;
//! value `q * d`. `s = d * Σq` lets an asymmetric weight block (`d_w * q_w + m`) add its
//! min term as one product, `m * s`, instead of a second pass over the activations.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::decode_blocks;
use super::q8_0::{decode_codes, quantize_block};

/// Elements per block.
pub const QK8_1: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK8_1],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`): `q * d`, `s` unused.
pub fn dequantize_row(blocks: &[BlockQ8_1], out: &mut [f32]) {
    decode_blocks(blocks, out, QK8_1, |b, y| {
        decode_codes(b.d, &b.qs, y);
    })
}

/// `quantize_row_q8_1_ref`: as Q8_0 (`d = amax/127`, `q = round(x/d)`), plus
/// `s = fp16(Σq * d)`.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ8_1]) {
    assert_eq!(x.len(), out.len() * QK8_1);
    for (xb, b) in x.chunks_exact(QK8_1).zip(out.iter_mut()) {
        let (d, qs) = quantize_block(xb);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
        b.qs = qs;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{q8_0, test_util::*};
    use super::*;

    #[test]
    fn matches_q8_0_and_carries_the_scaled_sum() {
        let mut rng = Rng::new(5);
        let x = rng.vec(QK8_1 * 16, 2.0);
        let mut q1 = vec![BlockQ8_1::zeroed(); 16];
        let mut q0 = vec![q8_0::BlockQ8_0::zeroed(); 16];
        quantize_row(&x, &mut q1);
        q8_0::quantize_row(&x, &mut q0);
        for ((a, b), xb) in q1.iter().zip(&q0).zip(x.chunks(QK8_1)) {
            assert_eq!((a.d, a.qs), (b.d, b.qs));
            let sum: i32 = a.qs.iter().map(|&q| q as i32).sum();
            // ggml scales the sum by the f32 d, before its rounding to fp16
            let d = xb.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
            assert_eq!(a.s, f16::from_f32(sum as f32 * d));
        }
        let (mut y1, mut y0) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        dequantize_row(&q1, &mut y1);
        q8_0::dequantize_row(&q0, &mut y0);
        assert_eq!(y1, y0);
    }
}
