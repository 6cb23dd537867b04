//! Pieces shared by the K-quant formats (super-blocks of [`QK_K`] elements): the packed
//! 6-bit scale/min layout of Q4_K and Q5_K with the decode, fit and dot product the two
//! formats have in common, and llama.cpp's scale-search helpers from
//! `ggml-quants.c`, transcribed operation for operation so quantized bytes match.

use half::f16;

use super::q8_k::BlockQ8K;
use super::{decode_blocks, sum_block_dots};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// Below this absolute maximum a group counts as all zeros (`GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, through the float mantissa (ggml's `nearest_int`).
/// Only meaningful for |x| <= 4194303, as in ggml; outside it returns what ggml's bit
/// trick returns, without panicking.
pub(crate) fn nearest_int(x: f32) -> i32 {
    let bits = (x + 12582912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// Scale and min of sub-block `j` (0..8) from the 12-byte packed table of Q4_K/Q5_K:
/// bytes 0-3 hold scales 0-3 (low 6 bits), bytes 4-7 mins 0-3; sub-blocks 4-7 keep
/// their low nibbles in bytes 8-11 and their top 2 bits in the spare bits of 0-7.
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins into the layout [`scale_min_k4`] reads.
pub(crate) fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    q
}

/// One Q4_K/Q5_K super-block decoded from its 256 codes (the two formats differ only in
/// where a code's bits are stored): element `l` of sub-block `s` is
/// `d*sc[s] * q - dmin*m[s]`, as `dequantize_row_q4_K`/`_q5_K`.
pub(crate) fn dequantize_k4(d: f16, dmin: f16, scales: &[u8; 12], q: &[u8; QK_K], y: &mut [f32]) {
    let (d, min) = (d.to_f32(), dmin.to_f32());
    for s in 0..8 {
        let (sc, m) = scale_min_k4(s, scales);
        let (dl, ml) = (d * sc as f32, min * m as f32);
        for l in 32 * s..32 * s + 32 {
            y[l] = dl * q[l] as f32 - ml;
        }
    }
}

/// A super-block in Q4_K's scale layout (Q4_K, Q5_K): the two formats differ only in
/// where a code's bits are stored.
pub(crate) trait K4Block {
    /// `(d, dmin, packed 6-bit scales and mins)`.
    fn scales(&self) -> (f16, f16, &[u8; 12]);
    /// The 256 unsigned codes in element order.
    fn codes(&self) -> [u8; QK_K];
}

/// The 4-bit part of a Q4_K/Q5_K super-block's codes in element order: 32-byte group `i`
/// of `qs` holds elements `64i..64i+32` in its low nibbles and `64i+32..64i+64` in its high.
pub(crate) fn k4_nibbles(qs: &[u8; QK_K / 2]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for (i, group) in qs.chunks_exact(32).enumerate() {
        for (l, &byte) in group.iter().enumerate() {
            q[64 * i + l] = byte & 0xF;
            q[64 * i + 32 + l] = byte >> 4;
        }
    }
    q
}

/// Decodes `blocks` into `out` (`out.len() == 256 * blocks.len()`) with [`dequantize_k4`].
pub(crate) fn dequantize_row_k4<B: K4Block>(blocks: &[B], out: &mut [f32]) {
    decode_blocks(blocks, out, QK_K, |b, y| {
        let (d, dmin, scales) = b.scales();
        dequantize_k4(d, dmin, scales, &b.codes(), y);
    })
}

/// The shared part of `quantize_row_q4_K_ref`/`_q5_K_ref` for one super-block `xb`: per
/// sub-block an asymmetric fit with codes `0..=nmax` weighted by `sqrt(mean x²) + |x|`
/// (`make_qkx2_quants(nmax, .., rmin, 0.1, nstep)`), the scales and mins quantized to
/// 6 bits against their maxima, then every element re-quantized with the rounded
/// scales. Returns `(d, dmin, packed scales, codes)`; the caller packs the codes.
pub(crate) fn quantize_k4(
    xb: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> (f16, f16, [u8; 12], [u8; QK_K]) {
    let mut l = [0u8; QK_K];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &xb[32 * j..32 * j + 32];
        let sum_x2 = xs.iter().fold(0.0f32, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        let l_sub = &mut l[32 * j..32 * j + 32];
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &weights, l_sub, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // ggml stores nearest_int into a uint8_t (wrapping) before MIN(63, ·).
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);

    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &packed);
        let dl = d.to_f32() * sc as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 32 * j..32 * j + 32 {
            l[ii] = nearest_int((xb[ii] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    (d, dmin, packed, l)
}

/// One super-block of the Q4_K/Q5_K scalar dot product with Q8_K activations: an exact
/// integer sum `Σ_s sc[s] * Σ q*q8` scaled by `d*d8`, minus the mins applied through
/// `bsums` (`Σ_k bsums[k] * m[k/2]`) scaled by `dmin*d8`.
pub(crate) fn vec_dot_k4(
    d: f16,
    dmin: f16,
    scales: &[u8; 12],
    q: &[u8; QK_K],
    y: &BlockQ8K,
) -> f32 {
    let (mut isum, mut msum) = (0i32, 0i32);
    for s in 0..8 {
        let (sc, m) = scale_min_k4(s, scales);
        let dot: i32 = (32 * s..32 * s + 32)
            .map(|l| q[l] as i32 * y.qs[l] as i32)
            .sum();
        isum += sc as i32 * dot;
        msum += m as i32 * (y.bsums[2 * s] as i32 + y.bsums[2 * s + 1] as i32);
    }
    d.to_f32() * y.d * isum as f32 - dmin.to_f32() * y.d * msum as f32
}

/// The Q4_K/Q5_K scalar dot product with Q8_K activations, [`vec_dot_k4`] per super-block.
pub(crate) fn vec_dot_row_k4<B: K4Block>(w: &[B], a: &[BlockQ8K]) -> f32 {
    sum_block_dots(w, a, |x, y| {
        let (d, dmin, scales) = x.scales();
        vec_dot_k4(d, dmin, scales, &x.codes(), y)
    })
}

/// ggml's `make_qkx2_quants`: an asymmetric fit `x ≈ scale*L + min` with `L` in
/// 0..=nmax, searching `nstep+1` candidate scales. Writes `l`, returns (scale, -min).
#[allow(clippy::too_many_arguments)]
pub(crate) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_qx_quants` without importance weights: a symmetric fit `x ≈ scale*L`
/// with `L + nmax` in 0..2*nmax written to `l_out`. `rmse_type` picks the error weight
/// (1: x², 2: 1, 3: |x|, else sqrt|x|); Q6_K uses 1.
pub(crate) fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32) -> f32 {
    let n = x.len();
    let max = super::q4_0::max_by_magnitude(x);
    let amax = max.abs();
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    if rmse_type == 0 {
        for i in 0..n {
            l_out[i] = (nmax + quant(iscale, x[i])) as i8;
        }
        return 1.0 / iscale;
    }
    let return_early = rmse_type < 0;
    let rmse_type = rmse_type.abs();
    let weight = |v: f32| match rmse_type {
        1 => v * v,
        2 => 1.0,
        3 => v.abs(),
        _ => v.abs().sqrt(),
    };
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let l = quant(iscale, x[i]);
        l_out[i] = (l + nmax) as i8;
        let w = weight(x[i]);
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = quant(iscale, v);
            let w = weight(v);
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                l_out[i] = (nmax + quant(iscale, x[i])) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (x, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.6, -8),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }

    #[test]
    fn scale_min_packing_round_trips_all_six_bit_values() {
        let mut ls = [0u8; 8];
        let mut lm = [0u8; 8];
        for v in 0..64u8 {
            for j in 0..8 {
                ls[j] = (v + j as u8 * 7) % 64;
                lm[j] = (v * 3 + j as u8) % 64;
            }
            let packed = pack_scale_min_k4(&ls, &lm);
            for j in 0..8 {
                assert_eq!(scale_min_k4(j, &packed), (ls[j], lm[j]));
            }
        }
    }
}
