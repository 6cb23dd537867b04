//! Scalar reference kernels on the packed layout. They perform the same integer sums and
//! the same float operations in the same order (fused multiply-adds included) as the SIMD
//! kernels, so SIMD results are compared against these with a tight tolerance.

use super::act::QuantizedActivation;
use super::packed::packed_k::read_record;
use super::packed::{Layout, PackedMatrix, PANEL, QK};

/// Integer dot of one packed Q4 (panel, block) row `i` with 32 activation codes:
/// `Σ nibble·q` over the block (nibbles unsigned 0..=15).
fn q4_block_dot(blk: &[u8], i: usize, a: &[i8]) -> i32 {
    let mut s = 0i32;
    for v in 0..4 {
        for k in 0..4 {
            let byte = blk[v * 32 + i * 4 + k];
            s += (byte & 15) as i32 * a[4 * v + k] as i32;
            s += (byte >> 4) as i32 * a[16 + 4 * v + k] as i32;
        }
    }
    s
}

fn q8_block_dot(blk: &[u8], i: usize, a: &[i8]) -> i32 {
    let mut s = 0i32;
    for g in 0..8 {
        for k in 0..4 {
            s += blk[g * 32 + i * 4 + k] as i8 as i32 * a[4 * g + k] as i32;
        }
    }
    s
}

fn h(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// The 8 outputs of internal panel `p` for activation row `t`.
pub fn panel_dot(w: &PackedMatrix, p: usize, act: &QuantizedActivation, t: usize) -> [f32; 8] {
    let q = w.panel_quants(p);
    let s = w.panel_scales(p);
    let a = act.row_qs(t);
    let ad = act.row_d(t);
    let asum = act.row_sum(t);
    let ads = act.row_ds(t);
    let nb = w.blocks();
    let qb = w.layout.quant_bytes_per_block();
    let mut acc = [0f32; PANEL];
    for (i, acc) in acc.iter_mut().enumerate() {
        match w.layout {
            Layout::Q4_0 => {
                for b in 0..nb {
                    let isum = q4_block_dot(&q[b * qb..], i, &a[b * QK..]) - 8 * asum[b];
                    *acc = (h(s[b * 8 + i]) * ad[b]).mul_add(isum as f32, *acc);
                }
            }
            Layout::Q8_0 => {
                for b in 0..nb {
                    let isum = q8_block_dot(&q[b * qb..], i, &a[b * QK..]);
                    *acc = (h(s[b * 8 + i]) * ad[b]).mul_add(isum as f32, *acc);
                }
            }
            Layout::Q4_1 => {
                for b in 0..nb {
                    let isum = q4_block_dot(&q[b * qb..], i, &a[b * QK..]);
                    *acc = (h(s[b * 16 + i]) * ad[b]).mul_add(isum as f32, *acc);
                    *acc = h(s[b * 16 + 8 + i]).mul_add(ads[b], *acc);
                }
            }
            Layout::Q4_1x64 => {
                for g in 0..nb / 2 {
                    let (b0, b1) = (2 * g, 2 * g + 1);
                    let i0 = q4_block_dot(&q[b0 * qb..], i, &a[b0 * QK..]);
                    let i1 = q4_block_dot(&q[b1 * qb..], i, &a[b1 * QK..]);
                    let tmp = (i1 as f32).mul_add(ad[b1], i0 as f32 * ad[b0]);
                    *acc = tmp.mul_add(h(s[g * 16 + i]), *acc);
                    *acc = h(s[g * 16 + 8 + i]).mul_add(ads[b0] + ads[b1], *acc);
                }
            }
            Layout::Q4_K | Layout::Q5_K => *acc = q4_k_row(w.layout, q, s, i, act, t),
            Layout::Q6_K => *acc = q6_k_row(q, s, i, act, t),
            Layout::Q5_0 => *acc = q5_0_row(q, s, i, act, t),
            Layout::F16 => *acc = f16_row(q, i, act.row_f32(t)),
        }
    }
    acc
}

/// Q4_K / Q5_K row `i`: per sub-block `(d·da)·(sc·Σqa) − (dmin·m)·(da·Σa)`.
fn q4_k_row(
    layout: Layout,
    q: &[u8],
    s: &[u16],
    i: usize,
    act: &QuantizedActivation,
    t: usize,
) -> f32 {
    let (a, ad, ads) = (act.row_qs(t), act.row_d(t), act.row_ds(t));
    let spg = layout.scales_per_group();
    let qb = layout.quant_bytes_per_block();
    let mut acc = 0f32;
    for g in 0..act.blocks() / 8 {
        let grp = &s[g * spg..(g + 1) * spg];
        let bytes: &[u8] = bytemuck::cast_slice(grp);
        let (d, dmin) = (h(grp[i]), h(grp[8 + i]));
        for j in 0..8 {
            let b = 8 * g + j;
            let rec = &q[b * qb..(b + 1) * qb];
            let dot = if layout == Layout::Q5_K {
                let c = read_record(Layout::Q5_0, rec, i);
                (0..QK).map(|e| c[e] as i32 * a[b * QK + e] as i32).sum()
            } else {
                q4_block_dot(rec, i, &a[b * QK..])
            };
            let isum = dot * bytes[32 + 8 * j + i] as i32;
            let dm = dmin * bytes[96 + 8 * j + i] as f32;
            acc = (d * ad[b]).mul_add(isum as f32, acc);
            acc = (-dm).mul_add(ads[b], acc);
        }
    }
    acc
}

/// Q6_K row `i`: per 32-block `d·da·(sc_lo·Σ(q)a_lo + sc_hi·Σ(q)a_hi − 32·(sc_lo·S_lo +
/// sc_hi·S_hi))`, the bracket exact in int32.
fn q6_k_row(q: &[u8], s: &[u16], i: usize, act: &QuantizedActivation, t: usize) -> f32 {
    let (a, ad, s16) = (act.row_qs(t), act.row_d(t), act.row_sum16(t));
    let spg = Layout::Q6_K.scales_per_group();
    let mut acc = 0f32;
    for g in 0..act.blocks() / 8 {
        let grp = &s[g * spg..(g + 1) * spg];
        let bytes: &[u8] = bytemuck::cast_slice(grp);
        let d = h(grp[i]);
        for j in 0..8 {
            let b = 8 * g + j;
            let c = read_record(Layout::Q6_K, &q[b * 192..(b + 1) * 192], i);
            let ab = &a[b * QK..(b + 1) * QK];
            let dot =
                |r: std::ops::Range<usize>| -> i32 { r.map(|e| c[e] as i32 * ab[e] as i32).sum() };
            let (slo, shi) = (
                bytes[16 + 16 * j + 2 * i] as i8 as i32,
                bytes[16 + 16 * j + 2 * i + 1] as i8 as i32,
            );
            let (alo, ahi) = (s16[b] as i16 as i32, (s16[b] >> 16) as i16 as i32);
            let isum = slo * dot(0..16) + shi * dot(16..32) - 32 * (slo * alo + shi * ahi);
            acc = (d * ad[b]).mul_add(isum as f32, acc);
        }
    }
    acc
}

/// Q5_0 row `i`: per 32-block `d·da·(Σqa − 16·Σa)`.
fn q5_0_row(q: &[u8], s: &[u16], i: usize, act: &QuantizedActivation, t: usize) -> f32 {
    let (a, ad, asum) = (act.row_qs(t), act.row_d(t), act.row_sum(t));
    let mut acc = 0f32;
    for b in 0..act.blocks() {
        let c = read_record(Layout::Q5_0, &q[b * 160..(b + 1) * 160], i);
        let isum: i32 = (0..QK)
            .map(|e| c[e] as i32 * a[b * QK + e] as i32)
            .sum::<i32>()
            - 16 * asum[b];
        acc = (h(s[b * 8 + i]) * ad[b]).mul_add(isum as f32, acc);
    }
    acc
}

/// F16 row `i` times the f32 row `x`: two fused chains, even and odd columns, added at
/// the end (two chains halve the FMA latency chain of a gemv; the SIMD kernels keep the
/// same two chains per row lane, so they match bit for bit).
fn f16_row(q: &[u8], i: usize, x: &[f32]) -> f32 {
    let mut acc = [0f32; 2];
    for (c, &xv) in x.iter().enumerate() {
        let at = (c / QK) * 512 + (c % QK) * 16 + 2 * i;
        let w = h(u16::from_le_bytes([q[at], q[at + 1]]));
        acc[c % 2] = w.mul_add(xv, acc[c % 2]);
    }
    acc[0] + acc[1]
}

/// `silu(g) * u`.
pub fn swiglu(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

/// Scalar gemm over output panels (see [`super::gemm`] for the contract, validated there).
pub fn gemm(
    w: &PackedMatrix,
    act: &QuantizedActivation,
    tokens: std::ops::Range<usize>,
    out: &mut [f32],
    ld: usize,
    panels: std::ops::Range<usize>,
    swiglu_pairs: bool,
) {
    let r0 = panels.start * PANEL;
    for p in panels {
        let n = (w.rows - p * PANEL).min(PANEL);
        for t in tokens.clone() {
            let o = &mut out[(t - tokens.start) * ld + p * PANEL - r0..][..n];
            if swiglu_pairs {
                let g = panel_dot(w, 2 * p, act, t);
                let u = panel_dot(w, 2 * p + 1, act, t);
                for i in 0..n {
                    o[i] = swiglu(g[i], u[i]);
                }
            } else {
                o.copy_from_slice(&panel_dot(w, p, act, t)[..n]);
            }
        }
    }
}
