//! The tiled attention body: scores by tiles of 16 transposed keys, softmax per row,
//! the weighted V sum by tiles of 16 value rows with 32 output dims in registers. Plain
//! f32 arithmetic (no fused multiply-adds), so compiling it with more target features
//! (`arch::x86::attention`) vectorizes it without changing a bit.

use super::{AttnScratch, KvRows, QueryBlock};
use crate::Isa;

/// [`super::attend`] without the dispatch (shapes checked there); softmax on `isa`.
#[inline(always)]
pub(crate) fn attend_body<R: KvRows>(
    kv: &R,
    a: &QueryBlock,
    out: &mut [f32],
    s: &mut AttnScratch,
    isa: Isa,
) {
    let (head_dim, len, pos0, off) = (a.head_dim, a.len, a.pos0, a.kv_off);
    let heads = len / head_dim;
    let bt = out.len() / len;
    let lo_of = |pos: usize| {
        if a.window > 0 {
            (pos + 1).saturating_sub(a.window)
        } else {
            0
        }
    };
    let lo = lo_of(pos0);
    let hi = pos0 + bt; // exclusive
    let n = hi - lo;
    s.scores.resize(bt * heads * n, 0.0);
    s.row.resize(head_dim, 0.0);
    // Token i sees keys lo_of(pos0 + i)..=pos0 + i: columns vis(i) of its score rows.
    let vis = |i: usize| lo_of(pos0 + i) - lo..pos0 + i + 1 - lo;
    // Scores by tiles of 16 keys stored transposed (`kt[d·16 + k]`): a query element
    // multiplies 16 keys at once (two 8-lane vectors) and no score needs a horizontal sum.
    // A score's arithmetic does not depend on how tokens were batched (prefill and decode
    // give equal bits).
    let rows = bt * heads;
    s.kt.resize(head_dim * 16, 0.0);
    let qrow = |r: usize| {
        let (i, h) = (r / heads, r % heads);
        &a.q[i * a.q_stride + h * head_dim..i * a.q_stride + (h + 1) * head_dim]
    };
    for j0 in (0..n).step_by(16) {
        let kn = 16.min(n - j0);
        for k in 0..16 {
            if k < kn {
                kv.key(lo + j0 + k, off, &mut s.row);
            } else {
                s.row.fill(0.0);
            }
            for (d, &x) in s.row.iter().enumerate() {
                s.kt[d * 16 + k] = x;
            }
        }
        let seen = |r: usize| {
            let v = vis(r / heads);
            v.start < j0 + kn && v.end > j0
        };
        for r in 0..rows {
            if seen(r) {
                let acc = score_row(&s.kt, qrow(r));
                let dst = &mut s.scores[r * n + j0..r * n + j0 + kn];
                for (o, &x) in dst.iter_mut().zip(&acc) {
                    *o = x * a.scale;
                }
            }
        }
    }
    for i in 0..bt {
        let v = vis(i);
        for h in 0..heads {
            let r = (i * heads + h) * n;
            crate::ops::softmax::softmax_with(isa, &mut s.scores[r + v.start..r + v.end]);
        }
    }
    // Weighted V sum, out[r] = Σ_j p[r][j] · V[j]: the same additions in key order as a
    // plain axpy loop (identical bits), but 32 output dims stay in registers across the
    // 16 value rows of a tile instead of being loaded and stored for every key.
    out.fill(0.0);
    s.vt.resize(16 * head_dim, 0.0);
    for j0 in (0..n).step_by(16) {
        let kn = 16.min(n - j0);
        for k in 0..kn {
            kv.value(
                lo + j0 + k,
                off,
                &mut s.vt[k * head_dim..(k + 1) * head_dim],
            );
        }
        for r in 0..rows {
            let (i, h) = (r / heads, r % heads);
            let v = vis(i);
            let (ja, jz) = (v.start.max(j0), v.end.min(j0 + kn));
            if ja >= jz {
                continue;
            }
            let p = &s.scores[r * n + ja..r * n + jz];
            let vt = &s.vt[(ja - j0) * head_dim..(jz - j0) * head_dim];
            let o = &mut out[i * len + h * head_dim..i * len + (h + 1) * head_dim];
            weighted_sum(o, p, vt, head_dim);
        }
    }
}

/// `o += Σ_j p[j] · vt[j·head_dim ..]`, in order of j, 32 dims of `o` at a time.
#[inline(always)]
fn weighted_sum(o: &mut [f32], p: &[f32], vt: &[f32], head_dim: usize) {
    let mut d0 = 0;
    while d0 + 32 <= head_dim {
        let mut acc = [0f32; 32];
        acc.copy_from_slice(&o[d0..d0 + 32]);
        for (&pj, vr) in p.iter().zip(vt.chunks_exact(head_dim)) {
            let vr: &[f32; 32] = vr[d0..d0 + 32].try_into().unwrap();
            for x in 0..32 {
                acc[x] += pj * vr[x];
            }
        }
        o[d0..d0 + 32].copy_from_slice(&acc);
        d0 += 32;
    }
    for (&pj, vr) in p.iter().zip(vt.chunks_exact(head_dim)) {
        for (o, &v) in o[d0..].iter_mut().zip(&vr[d0..]) {
            *o += pj * v;
        }
    }
}

/// Scores of query row `q` against the 16 transposed keys of `kt`, each summed in four
/// interleaved partial chains (d mod 4) combined pairwise. Why not one chain: SmolLM2's
/// large q·k terms cancel, and a single 64-term f32 chain moved its perplexity by 0.16%
/// (the 4-way split matches the former 16-way per-key dot to within 0.01%).
#[inline(always)]
fn score_row(kt: &[f32], q: &[f32]) -> [f32; 16] {
    let mut acc = [[0f32; 16]; 4];
    for (kr, qd) in kt.chunks_exact(64).zip(q.chunks_exact(4)) {
        for p in 0..4 {
            let kr: &[f32; 16] = kr[16 * p..16 * p + 16].try_into().unwrap();
            for k in 0..16 {
                acc[p][k] += qd[p] * kr[k];
            }
        }
    }
    let mut out = [0f32; 16];
    for k in 0..16 {
        out[k] = (acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]);
    }
    // head_dim % 4 tail (no model has one; kept exact for any size).
    let done = q.len() / 4 * 4;
    for d in done..q.len() {
        for k in 0..16 {
            out[k] += q[d] * kt[d * 16 + k];
        }
    }
    out
}
