//! Prefill's activation staging on x86: each chunk of tokens rewritten as interleaved
//! records ([`interleave`]) that the AVX2 `tile_il` and the VNNI tiles read through one
//! pointer, made once per layer input ([`Stage`] for `Vec<u8>`).

use crate::matmul::driver::{self, Chunk, Stage};
use crate::matmul::{Layout, QuantizedActivation, QK};
use std::ops::Range;

/// Bytes per (token, 32-block) of an interleaved activation tile: 32 codes + `d`, `8·Σq`,
/// `d·Σq`, the half-block sums, the Q5_0 lane offsets (4 bytes each).
pub const IL_REC: usize = 52;

/// The staged chunk's interleaved records ([`interleave`]), for the layouts whose tiles read
/// them ([`Kernels::stages`]).
impl Stage for Vec<u8> {
    #[inline(always)]
    fn stage(&mut self, act: &QuantizedActivation, rows: Range<usize>, tt: usize) {
        interleave(act, rows, tt, self);
    }

    #[inline(always)]
    fn shared(act: &QuantizedActivation, tt: usize) -> Option<&Self> {
        act.staged_all(tt, |buf| interleave(act, 0..act.rows(), tt, buf))
    }
}

/// The interleaved records of tokens `t..t+n` of a staged chunk of `nb`-block rows.
#[inline(always)]
pub(crate) fn record<'a>(chunk: &Chunk<'a, Vec<u8>>, nb: usize, t: usize, n: usize) -> &'a [u8] {
    let rec = nb * IL_REC;
    let at = (t - chunk.start) * rec;
    &chunk.staged[at..at + n * rec]
}

/// Whether `layout` has gemm tiles on interleaved activations ([`interleave`]).
pub(crate) const fn has_il(layout: Layout) -> bool {
    matches!(
        layout,
        Layout::Q4_0 | Layout::Q4_1 | Layout::Q4_1x64 | Layout::Q4_K | Layout::Q5_0 | Layout::Q8_0
    )
}

/// Rewrites the activation rows `rows` as consecutive tiles of at most `tt` tokens (cut
/// as [`driver::tile_len`] cuts them) in the order the gemm tiles read them: per tile of `n` tokens, per 32-block,
/// a record of `n·52` bytes:
///
/// * `[v = 0..4][t = 0..n]`: 8 bytes, codes `4v..4v+4` then `16+4v..16+4v+4` of token `t`
///   (the elements that meet the low / high nibbles of packed Q4 vector `v`; for Q8_0, 4-byte
///   groups `v` and `v+4`);
/// * `d[n]` (f32), `8·Σq[n]` (i32), `d·Σq[n]` (f32), half-block sums `[n]` (i32, as
///   [`QuantizedActivation::row_sum16`]), Q5_0 lane offsets `[n]` (`q5_lane_offsets`).
///
/// So a tile reaches all its tokens' data through one pointer at fixed offsets (the
/// per-token pointers and slices of [`Src::Rows`] spilled general registers in the
/// 4-token tile).
pub fn interleave(act: &QuantizedActivation, rows: Range<usize>, tt: usize, buf: &mut Vec<u8>) {
    let nb = act.blocks();
    buf.clear();
    buf.resize(rows.len() * nb * IL_REC, 0);
    let mut at = 0;
    let mut t0 = rows.start;
    while t0 < rows.end {
        let n = driver::tile_len(rows.end - t0, tt);
        let tile = &mut buf[at..at + n * nb * IL_REC];
        // Token by token (each row read once, in order), its 32-blocks into the block
        // records: the codes as 4-byte words, not bytes (the byte-by-byte form was 7 % of
        // a one-thread SmolLM2 pp512).
        for t in 0..n {
            let r = t0 + t;
            let (qs, d, s8) = (act.row_qs(r), act.row_d(r), act.row_sum8(r));
            let (ds, s16) = (act.row_ds(r), act.row_sum16(r));
            for (b, rec) in tile.chunks_exact_mut(n * IL_REC).enumerate() {
                let q: &[i8; QK] = qs[b * QK..(b + 1) * QK].try_into().unwrap();
                let q: &[u8; QK] = bytemuck::cast_ref(q);
                for v in 0..4 {
                    let o = v * 8 * n + 8 * t;
                    rec[o..o + 4].copy_from_slice(&q[4 * v..4 * v + 4]);
                    rec[o + 4..o + 8].copy_from_slice(&q[16 + 4 * v..16 + 4 * v + 4]);
                }
                let f = 32 * n + 4 * t;
                let fields = [
                    d[b].to_le_bytes(),
                    s8[b].to_le_bytes(),
                    ds[b].to_le_bytes(),
                    s16[b].to_le_bytes(),
                    q5_lane_offsets(bytemuck::cast_ref(q)).to_le_bytes(),
                ];
                for (i, x) in fields.iter().enumerate() {
                    rec[f + 4 * i * n..f + 4 * i * n + 4].copy_from_slice(x);
                }
            }
        }
        at += n * nb * IL_REC;
        t0 += n;
    }
}

/// `16·Σa` over the 16 codes that meet the low int16 of a row's 32-bit lane in the Q4
/// nibble products (pairs `4v, 4v+1` and `16+4v, 16+4v+1` of every vector `v`) and over
/// the other 16 (the high int16), as two int16 in one i32 (`|16·Σ| <= 16·16·127 = 32512`).
fn q5_lane_offsets(q: &[i8; QK]) -> i32 {
    // Codes at index 4v + k and 16 + 4v + k meet lane half `k / 2`, so the sums go by
    // `index % 4`: four 8-byte words, each code biased to unsigned (`^ 0x80` = `+ 128`),
    // even and odd bytes summed in 16-bit lanes (at most 4·255 each: no carries). The
    // compiler left a byte loop scalar (sign extensions and spills, 3 % of a pp512).
    const EVEN: u64 = 0x00FF_00FF_00FF_00FF;
    let bytes: &[u8; QK] = bytemuck::cast_ref(q);
    let (mut even, mut odd) = (0u64, 0u64);
    for w in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes(w.try_into().unwrap()) ^ 0x8080_8080_8080_8080;
        even += w & EVEN; // bytes 0, 2, 4, 6 of the word: index % 4 = 0, 2, 0, 2
        odd += (w >> 8) & EVEN; // bytes 1, 3, 5, 7: index % 4 = 1, 3, 1, 3
    }
    let lane = |x: u64, i: u32| ((x >> (16 * i)) & 0xFFFF) as i32;
    // Each of the four sums by `index % 4` covers 8 codes, each biased by 128.
    let lo = lane(even, 0) + lane(even, 2) + lane(odd, 0) + lane(odd, 2) - 2 * 8 * 128;
    let hi = lane(even, 1) + lane(even, 3) + lane(odd, 1) + lane(odd, 3) - 2 * 8 * 128;
    ((16 * lo) as i16 as u16 as u32 | ((16 * hi) as i16 as u16 as u32) << 16) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record layout written byte by byte, as documented on [`interleave`] (the form
    /// it had before its rows were copied as words).
    fn interleave_ref(act: &QuantizedActivation, rows: Range<usize>, tt: usize) -> Vec<u8> {
        let nb = act.blocks();
        let mut buf = vec![0u8; rows.len() * nb * IL_REC];
        let (mut at, mut t0) = (0, rows.start);
        while t0 < rows.end {
            let n = driver::tile_len(rows.end - t0, tt);
            for b in 0..nb {
                let rec = &mut buf[at..at + n * IL_REC];
                for t in 0..n {
                    let r = t0 + t;
                    let q = &act.row_qs(r)[b * QK..(b + 1) * QK];
                    for v in 0..4 {
                        for k in 0..4 {
                            rec[v * 8 * n + 8 * t + k] = q[4 * v + k] as u8;
                            rec[v * 8 * n + 8 * t + 4 + k] = q[16 + 4 * v + k] as u8;
                        }
                    }
                    let (mut lo, mut hi) = (0i32, 0i32);
                    for v in 0..4 {
                        for k in 0..4 {
                            let s = q[4 * v + k] as i32 + q[16 + 4 * v + k] as i32;
                            if k < 2 {
                                lo += s;
                            } else {
                                hi += s;
                            }
                        }
                    }
                    let lanes =
                        (16 * lo) as i16 as u16 as u32 | ((16 * hi) as i16 as u16 as u32) << 16;
                    let f = 32 * n + 4 * t;
                    let fields = [
                        act.row_d(r)[b].to_le_bytes(),
                        act.row_sum8(r)[b].to_le_bytes(),
                        act.row_ds(r)[b].to_le_bytes(),
                        act.row_sum16(r)[b].to_le_bytes(),
                        lanes.to_le_bytes(),
                    ];
                    for (i, x) in fields.iter().enumerate() {
                        rec[f + 4 * i * n..f + 4 * i * n + 4].copy_from_slice(x);
                    }
                }
                at += n * IL_REC;
            }
            t0 += n;
        }
        buf
    }

    #[test]
    fn interleave_writes_the_documented_records() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f32 / (1u64 << 53) as f32 * 8.0 - 4.0
        };
        for (tokens, cols) in [(1, 32), (3, 64), (9, 96), (24, 576), (13, 2560)] {
            let x: Vec<f32> = (0..tokens * cols).map(|_| next()).collect();
            let act = QuantizedActivation::quantize(&x, tokens);
            for tt in [1, 4, 5, 8] {
                for rows in [0..tokens, tokens / 2..tokens] {
                    let mut got = Vec::new();
                    interleave(&act, rows.clone(), tt, &mut got);
                    let want = interleave_ref(&act, rows.clone(), tt);
                    assert!(got == want, "{tokens}x{cols} rows {rows:?} tiles of {tt}");
                }
            }
        }
    }
}
