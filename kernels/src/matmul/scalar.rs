//! Scalar reference kernels on the packed layout. They perform the same integer sums and
//! the same float operations in the same order (fused multiply-adds included) as the SIMD
//! kernels, so SIMD results are compared against these with a tight tolerance.

use super::act::QuantizedActivation;
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
        }
    }
    acc
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
