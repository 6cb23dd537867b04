//! Q5_0: 32 weights in 22 bytes (5.5 bits per weight), symmetric.
//!
//! Layout (`block_q5_0` in ggml-common.h): `d: f16`, `qh: [u8; 4]`, `qs: [u8; 16]`.
//! The low 4 bits of element `j` sit in `qs` as in Q4_0 (low nibbles 0-15, high nibbles
//! 16-31); its 5th bit is bit `j` of `qh` read as a little-endian u32. A 5-bit `q`
//! decodes to `(q - 16) * d`. Dot products pair it with [`BlockQ8_0`].

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q4_0::max_by_magnitude;
use super::q8_0::BlockQ8_0;
use super::sum_block_dots;
use super::{decode_blocks, dot_codes};

/// Elements per block.
pub const QK5_0: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK5_0 / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// The 32 unsigned 5-bit codes of a block (shared with Q5_1, which has the same bits).
pub(crate) fn codes(qh: [u8; 4], qs: &[u8; 16]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; 32];
    for j in 0..16 {
        let h0 = ((qh >> j) << 4) as u8 & 0x10;
        let h1 = (qh >> (j + 12)) as u8 & 0x10;
        q[j] = (qs[j] & 0x0F) | h0;
        q[j + 16] = (qs[j] >> 4) | h1;
    }
    q
}

/// Packs 32 unsigned 5-bit codes into `(qh, qs)`.
pub(crate) fn pack_codes(q: &[u8; 32]) -> ([u8; 4], [u8; 16]) {
    let mut qh = 0u32;
    let mut qs = [0u8; 16];
    for j in 0..16 {
        qs[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
        qh |= (((q[j] & 0x10) >> 4) as u32) << j;
        qh |= (((q[j + 16] & 0x10) >> 4) as u32) << (j + 16);
    }
    (qh.to_le_bytes(), qs)
}

/// Decodes `blocks` into `out` (`out.len() == 32 * blocks.len()`), as
/// `dequantize_row_q5_0`.
pub fn dequantize_row(blocks: &[BlockQ5_0], out: &mut [f32]) {
    decode_blocks(blocks, out, QK5_0, |b, y| {
        let d = b.d.to_f32();
        for (y, q) in y.iter_mut().zip(codes(b.qh, &b.qs)) {
            *y = (q as i32 - 16) as f32 * d;
        }
    })
}

/// `quantize_row_q5_0_ref`: `d = max / -16` (`max` the element of largest magnitude),
/// `q = min(31, trunc(x/d + 16.5))`.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ5_0]) {
    assert_eq!(x.len(), out.len() * QK5_0);
    for (xb, b) in x.chunks_exact(QK5_0).zip(out.iter_mut()) {
        let d = max_by_magnitude(xb) / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(xb) {
            *q = ((v * id + 16.5) as i8).min(31) as u8;
        }
        (b.qh, b.qs) = pack_codes(&q);
    }
}

/// Scalar reference dot product of Q5_0 weights with Q8_0 activations
/// (`ggml_vec_dot_q5_0_q8_0_generic`).
pub fn vec_dot(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let sumi = dot_codes(codes(x.qh, &x.qs).map(|q| q as i32 - 16), &y.qs);
        (x.d.to_f32() * y.d.to_f32()) * sumi as f32
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    #[test]
    fn decodes_a_hand_built_block() {
        let mut b = BlockQ5_0::zeroed();
        b.d = f16::from_f32(1.0);
        b.qs[2] = 0x31; // element 2: low 1, element 18: low 3
        b.qh = (1u32 << 2 | 1u32 << 31).to_le_bytes(); // 5th bit of elements 2 and 31
        let y = Q5_0.dequantize(&[b]);
        assert_eq!((y[2], y[18], y[31], y[0]), (1.0, -13.0, 0.0, -16.0));
    }

    #[test]
    fn code_packing_round_trips() {
        let q: [u8; 32] = std::array::from_fn(|i| (i as u8 * 7 + 3) % 32);
        let (qh, qs) = pack_codes(&q);
        assert_eq!(codes(qh, &qs), q);
    }

    #[test]
    fn random_round_trip_error_is_at_most_one_step() {
        let x = Rng::new(8).vec(QK5_0 * 64, 3.0);
        Q5_0.assert_round_trip_within(&x, |xb| amax(xb) / 16.0 * 1.001);
    }

    #[test]
    fn vec_dot_matches_dequantized_dot() {
        assert_vec_dot_twin(
            Rng::new(9),
            40,
            &Q5_0,
            |b, r| b.d = r.scale_f16(),
            &Q8_0,
            vec_dot,
            None,
        );
    }
}
