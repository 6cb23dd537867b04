//! The tiled attention body: scores by tiles of 16 transposed keys, softmax per row,
//! the weighted V sum by tiles of 16 value rows with 32 output dims in registers. Every
//! product-sum is an explicit fused multiply-add (`mul_add`, one rounding) in a fixed
//! order, so compiling it with more target features (`arch::x86::attention`) vectorizes it
//! without changing a bit (without FMA hardware the scalar build calls `fmaf`: slow, same
//! bits). On AVX-512 ([`FillTiles::PAIR_ROWS`]) query rows go two at a time where they see
//! the same keys: the tile's loads are shared and eight FMA chains run instead of four (one
//! row's chains are latency-bound);
//! each row's operations stay its own, so pairing changes no bit and a row's result does
//! not depend on its batch. attention_cpu, MNN-Pocket shape, Sapphire Rapids, one thread,
//! prefill32 over 4096 keys: AVX-512 5.2-5.6 -> 4.1-4.4 ms (pairs on; off: 5.2-5.6), AVX2
//! (FMAs, no pairs) 5.3-5.4 -> 4.0-4.6 ms; SmolLM2 pp512 (2 threads) 1511-1671 ->
//! 1760-1860 t/s. Rows four at a time where four see the same tile (16 chains; the score
//! loop is bound by its loads: 20 per 16 FMAs instead of 12 per 8), Ice Lake-class VM, one
//! thread, same bits: prefill32 over 4096 keys ~6.4 -> ~5.0 ms (medians of 6), SmolLM2
//! pp512 474-538 -> 548-625 t/s (3 interleaved pairs, each faster).

use super::{AttnScratch, FillTiles, KvRows, QueryBlock, Tile};
use crate::Isa;

/// [`super::attend`] without the dispatch (shapes checked there); softmax on `isa`, f16
/// tiles filled by `fill`.
#[inline(always)]
pub(crate) fn attend_body<R: KvRows, F: FillTiles>(
    kv: &R,
    a: &QueryBlock,
    out: &mut [f32],
    s: &mut AttnScratch,
    isa: Isa,
    fill: F,
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
    let f16 = kv.f16();
    for (j0, t) in tiles(lo, n, off) {
        let kn = t.kn;
        match &f16 {
            Some(rows) => fill.keys(rows, t, &mut s.kt, &mut s.row),
            None => keys_by_row(kv, t, &mut s.kt, &mut s.row),
        }
        let seen = |r: usize| {
            let v = vis(r / heads);
            v.start < j0 + kn && v.end > j0
        };
        let mut store = |r: usize, acc: [f32; 16]| {
            let dst = &mut s.scores[r * n + j0..r * n + j0 + kn];
            for (o, &x) in dst.iter_mut().zip(&acc) {
                *o = x * a.scale;
            }
        };
        // Rows four or two at a time where all see the tile (each row's arithmetic is
        // `score_row`'s, so grouping changes no bit; rows are in token order, so the
        // fourth seeing the tile means the two between do too).
        let mut r = 0;
        while r < rows {
            if !seen(r) {
                r += 1;
            } else if F::PAIR_ROWS && r + 3 < rows && seen(r + 3) {
                let q = [qrow(r), qrow(r + 1), qrow(r + 2), qrow(r + 3)];
                let [a0, a1, a2, a3] = score_rows4(&s.kt, q);
                store(r, a0);
                store(r + 1, a1);
                store(r + 2, a2);
                store(r + 3, a3);
                r += 4;
            } else if F::PAIR_ROWS && r + 1 < rows && seen(r + 1) {
                let [a0, a1] = score_rows2(&s.kt, [qrow(r), qrow(r + 1)]);
                store(r, a0);
                store(r + 1, a1);
                r += 2;
            } else {
                store(r, score_row(&s.kt, qrow(r)));
                r += 1;
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
    for (j0, t) in tiles(lo, n, off) {
        let kn = t.kn;
        match &f16 {
            Some(rows) => fill.values(rows, t, head_dim, &mut s.vt),
            None => values_by_row(kv, t, head_dim, &mut s.vt),
        }
        // Row r's output is out[r·head_dim..] (row i's heads are consecutive).
        let span = |r: usize| {
            let v = vis(r / heads);
            (v.start.max(j0), v.end.min(j0 + kn))
        };
        let mut r = 0;
        while r < rows {
            let (ja, jz) = span(r);
            if ja >= jz {
                r += 1;
                continue;
            }
            let vt = &s.vt[(ja - j0) * head_dim..(jz - j0) * head_dim];
            let p = |r: usize| &s.scores[r * n + ja..r * n + jz];
            let o = &mut out[r * head_dim..];
            // Four or two rows with the same keys share the value loads; each row's
            // additions are `weighted_sum`'s, in the same order.
            let same = |i: usize| span(r + i) == (ja, jz);
            if F::PAIR_ROWS && r + 3 < rows && same(1) && same(2) && same(3) {
                let (o01, o23) = o.split_at_mut(2 * head_dim);
                let (o0, o1) = o01.split_at_mut(head_dim);
                let (o2, o3) = o23.split_at_mut(head_dim);
                let ps = [p(r), p(r + 1), p(r + 2), p(r + 3)];
                weighted_sum4([o0, o1, o2, &mut o3[..head_dim]], ps, vt, head_dim);
                r += 4;
            } else if F::PAIR_ROWS && r + 1 < rows && same(1) {
                let (o0, o1) = o.split_at_mut(head_dim);
                weighted_sum2([o0, &mut o1[..head_dim]], [p(r), p(r + 1)], vt, head_dim);
                r += 2;
            } else {
                weighted_sum(&mut o[..head_dim], p(r), vt, head_dim);
                r += 1;
            }
        }
    }
}

/// The tiles of 16 keys over positions `lo..lo + n` (the last one shorter), each with its
/// first column `j0`.
#[inline(always)]
fn tiles(lo: usize, n: usize, off: usize) -> impl Iterator<Item = (usize, Tile)> {
    (0..n).step_by(16).map(move |j0| {
        let kn = 16.min(n - j0);
        (
            j0,
            Tile {
                pos: lo + j0,
                kn,
                off,
            },
        )
    })
}

/// [`super::FillTiles::keys`] a row at a time (`row`: scratch).
#[inline(always)]
pub(crate) fn keys_by_row<R: KvRows>(kv: &R, t: Tile, kt: &mut [f32], row: &mut Vec<f32>) {
    row.resize(kt.len() / 16, 0.0);
    for k in 0..16 {
        if k < t.kn {
            kv.key(t.pos + k, t.off, row);
        } else {
            row.fill(0.0);
        }
        for (d, &x) in row.iter().enumerate() {
            kt[d * 16 + k] = x;
        }
    }
}

/// [`super::FillTiles::values`] a row at a time.
#[inline(always)]
pub(crate) fn values_by_row<R: KvRows>(kv: &R, t: Tile, head_dim: usize, vt: &mut [f32]) {
    for (k, row) in vt.chunks_exact_mut(head_dim).take(t.kn).enumerate() {
        kv.value(t.pos + k, t.off, row);
    }
}

/// `o += Σ_j p[j] · vt[j·head_dim ..]` (a fused multiply-add per term), in order of j, 64
/// dims of `o` at a time (then 32): four 16-lane accumulator chains per key instead of two
/// (the latency bounds this loop; a 32-token block over 4096 keys 3.84-3.86 -> 3.49-3.57
/// ms, attention_cpu). The operations per dim are the same, in the same order.
#[inline(always)]
fn weighted_sum(o: &mut [f32], p: &[f32], vt: &[f32], head_dim: usize) {
    let mut d0 = 0;
    while d0 + 64 <= head_dim {
        weighted_block::<64>(&mut o[d0..], p, vt, head_dim, d0);
        d0 += 64;
    }
    while d0 + 32 <= head_dim {
        weighted_block::<32>(&mut o[d0..], p, vt, head_dim, d0);
        d0 += 32;
    }
    if d0 == head_dim {
        return; // (no tail: without this the key loop below ran empty, 8 % of attention)
    }
    for (&pj, vr) in p.iter().zip(vt.chunks_exact(head_dim)) {
        for (o, &v) in o[d0..].iter_mut().zip(&vr[d0..]) {
            *o = pj.mul_add(v, *o);
        }
    }
}

/// [`weighted_sum`] of dims `d0..d0 + W` (`o` starts at `d0`), in registers.
#[inline(always)]
fn weighted_block<const W: usize>(
    o: &mut [f32],
    p: &[f32],
    vt: &[f32],
    head_dim: usize,
    d0: usize,
) {
    let mut acc = [0f32; W];
    acc.copy_from_slice(&o[..W]);
    for (&pj, vr) in p.iter().zip(vt.chunks_exact(head_dim)) {
        let vr: &[f32; W] = vr[d0..d0 + W].try_into().unwrap();
        axpy(&mut acc, pj, vr);
    }
    o[..W].copy_from_slice(&acc);
}

/// `acc += p·v`, a fused multiply-add per element.
#[inline(always)]
fn axpy<const W: usize>(acc: &mut [f32; W], p: f32, v: &[f32; W]) {
    for x in 0..W {
        acc[x] = p.mul_add(v[x], acc[x]);
    }
}

/// [`weighted_sum`] of two rows over the same keys: each row's additions are its own, in
/// key order (the same bits as two calls), with the value loads shared and twice the
/// independent FMA chains (one row's four are latency-bound).
#[inline(always)]
fn weighted_sum2(o: [&mut [f32]; 2], p: [&[f32]; 2], vt: &[f32], head_dim: usize) {
    let [o0, o1] = o;
    let mut d0 = 0;
    while d0 + 64 <= head_dim {
        weighted_block2::<64>([&mut o0[d0..], &mut o1[d0..]], p, vt, head_dim, d0);
        d0 += 64;
    }
    while d0 + 32 <= head_dim {
        weighted_block2::<32>([&mut o0[d0..], &mut o1[d0..]], p, vt, head_dim, d0);
        d0 += 32;
    }
    if d0 == head_dim {
        return; // no tail dims (see `weighted_sum`)
    }
    for (o, p) in [o0, o1].into_iter().zip(p) {
        for (&pj, vr) in p.iter().zip(vt.chunks_exact(head_dim)) {
            for (o, &v) in o[d0..].iter_mut().zip(&vr[d0..]) {
                *o = pj.mul_add(v, *o);
            }
        }
    }
}

/// [`weighted_block`] of two rows.
#[inline(always)]
fn weighted_block2<const W: usize>(
    o: [&mut [f32]; 2],
    p: [&[f32]; 2],
    vt: &[f32],
    head_dim: usize,
    d0: usize,
) {
    let [o0, o1] = o;
    let (mut a0, mut a1) = ([0f32; W], [0f32; W]);
    a0.copy_from_slice(&o0[..W]);
    a1.copy_from_slice(&o1[..W]);
    for ((&p0, &p1), vr) in p[0].iter().zip(p[1]).zip(vt.chunks_exact(head_dim)) {
        let vr: &[f32; W] = vr[d0..d0 + W].try_into().unwrap();
        axpy(&mut a0, p0, vr);
        axpy(&mut a1, p1, vr);
    }
    o0[..W].copy_from_slice(&a0);
    o1[..W].copy_from_slice(&a1);
}

/// [`weighted_sum2`] of four rows: a third of one row's loads per FMA (AVX-512: the 16
/// accumulators of 64 dims fit its 32 registers).
#[inline(always)]
fn weighted_sum4(o: [&mut [f32]; 4], p: [&[f32]; 4], vt: &[f32], head_dim: usize) {
    let [o0, o1, o2, o3] = o;
    if !head_dim.is_multiple_of(64) {
        // (the 32-dim and tail blocks as pairs)
        weighted_sum2([o0, o1], [p[0], p[1]], vt, head_dim);
        weighted_sum2([o2, o3], [p[2], p[3]], vt, head_dim);
        return;
    }
    for d0 in (0..head_dim).step_by(64) {
        let o = [&mut o0[d0..], &mut o1[d0..], &mut o2[d0..], &mut o3[d0..]];
        weighted_block4(o, p, vt, head_dim, d0);
    }
}

/// [`weighted_block`] of four rows, 64 dims.
#[inline(always)]
fn weighted_block4(o: [&mut [f32]; 4], p: [&[f32]; 4], vt: &[f32], head_dim: usize, d0: usize) {
    const W: usize = 64;
    let [o0, o1, o2, o3] = o;
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; W], [0f32; W], [0f32; W], [0f32; W]);
    a0.copy_from_slice(&o0[..W]);
    a1.copy_from_slice(&o1[..W]);
    a2.copy_from_slice(&o2[..W]);
    a3.copy_from_slice(&o3[..W]);
    let ps = p[0].iter().zip(p[1]).zip(p[2]).zip(p[3]);
    for ((((&p0, &p1), &p2), &p3), vr) in ps.zip(vt.chunks_exact(head_dim)) {
        let vr: &[f32; W] = vr[d0..d0 + W].try_into().unwrap();
        axpy(&mut a0, p0, vr);
        axpy(&mut a1, p1, vr);
        axpy(&mut a2, p2, vr);
        axpy(&mut a3, p3, vr);
    }
    o0[..W].copy_from_slice(&a0);
    o1[..W].copy_from_slice(&a1);
    o2[..W].copy_from_slice(&a2);
    o3[..W].copy_from_slice(&a3);
}

/// [`score_row`] of four query rows: 16 FMA chains, 20 loads per 16 FMAs (pairs: 12 per
/// 8; the score loop is bound by its loads).
#[inline(always)]
fn score_rows4(kt: &[f32], q: [&[f32]; 4]) -> [[f32; 16]; 4] {
    let (mut c0, mut c1) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
    let (mut c2, mut c3) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
    let qs = q[0]
        .chunks_exact(4)
        .zip(q[1].chunks_exact(4))
        .zip(q[2].chunks_exact(4))
        .zip(q[3].chunks_exact(4));
    for (kr, (((q0, q1), q2), q3)) in kt.chunks_exact(64).zip(qs) {
        for p in 0..4 {
            let kr: &[f32; 16] = kr[16 * p..16 * p + 16].try_into().unwrap();
            axpy(&mut c0[p], q0[p], kr);
            axpy(&mut c1[p], q1[p], kr);
            axpy(&mut c2[p], q2[p], kr);
            axpy(&mut c3[p], q3[p], kr);
        }
    }
    [
        finish_scores(&c0, kt, q[0]),
        finish_scores(&c1, kt, q[1]),
        finish_scores(&c2, kt, q[2]),
        finish_scores(&c3, kt, q[3]),
    ]
}

/// [`score_row`] of two query rows (each row's operations its own, in the same order),
/// the key tile's loads shared and eight FMA chains instead of four.
#[inline(always)]
fn score_rows2(kt: &[f32], q: [&[f32]; 2]) -> [[f32; 16]; 2] {
    let (mut c0, mut c1) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
    for ((kr, q0), q1) in kt
        .chunks_exact(64)
        .zip(q[0].chunks_exact(4))
        .zip(q[1].chunks_exact(4))
    {
        for p in 0..4 {
            let kr: &[f32; 16] = kr[16 * p..16 * p + 16].try_into().unwrap();
            axpy(&mut c0[p], q0[p], kr);
            axpy(&mut c1[p], q1[p], kr);
        }
    }
    [finish_scores(&c0, kt, q[0]), finish_scores(&c1, kt, q[1])]
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
            axpy(&mut acc[p], qd[p], kr);
        }
    }
    finish_scores(&acc, kt, q)
}

/// A score row's four partial chains combined pairwise, then the `head_dim % 4` tail (no
/// model has one; kept exact for any size).
#[inline(always)]
fn finish_scores(acc: &[[f32; 16]; 4], kt: &[f32], q: &[f32]) -> [f32; 16] {
    let mut out = [0f32; 16];
    for k in 0..16 {
        out[k] = (acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]);
    }
    for d in q.len() / 4 * 4..q.len() {
        for k in 0..16 {
            out[k] = q[d].mul_add(kt[d * 16 + k], out[k]);
        }
    }
    out
}
