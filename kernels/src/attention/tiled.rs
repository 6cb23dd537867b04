//! The tiled attention body, flash-style: for each chunk of [`CHUNK`] keys, the scores of
//! every row that sees it by tiles of 16 transposed keys, the online-softmax step per row
//! ([`super::online`]), then the weighted V sum by tiles of 16 value rows with 32 or 64
//! output dims in registers; the keys go by segments of [`SEGMENT`], each from a fresh
//! state, merged in order. Every product-sum is an explicit fused multiply-add (`mul_add`,
//! one rounding) in a fixed order, so compiling it with more target features
//! (`arch::x86::attention`) vectorizes it without changing a bit (without FMA hardware the
//! scalar build calls `fmaf`: slow, same bits). Keys a row does not see score -inf
//! (probability exactly 0) and chunks and segments start at absolute multiples of their
//! size, so a row's arithmetic is the same alone or in a block (decode = prefill).
//!
//! On AVX-512 ([`FillTiles::PAIR_ROWS`]) query rows go four or two at a time: the tile's
//! loads are shared and 16 FMA chains run instead of four (one row's chains are
//! latency-bound); each row's operations stay its own, so grouping changes no bit.
//! Measured (attention_cpu, MNN-Pocket shape, one thread, prefill32 over 4096 keys):
//! AVX-512 pairs 5.2-5.6 -> 4.1-4.4 ms, then fours ~6.4 -> ~5.0 ms (Ice Lake class); the
//! online softmax (scores no longer stored for the whole row, one 16-lane exp pass instead
//! of AVX2's three passes) 2.95 -> 2.76-2.86 ms (Sapphire Rapids class).

use super::online::{merge_segment, normalize, softmax_step, RowState, CHUNK, SEGMENT};
use super::{AttnScratch, FillTiles, KvRows, QueryBlock, Segments, Tile};

/// [`super::attend`] without the dispatch (shapes checked there); f16 tiles filled by
/// `fill`: every segment of the block merged into `out` in order, then normalized.
#[inline(always)]
pub(crate) fn attend_body<R: KvRows, F: FillTiles>(
    kv: &R,
    a: &QueryBlock,
    out: &mut [f32],
    s: &mut AttnScratch,
    fill: F,
) {
    let hd = a.head_dim;
    let bt = out.len() / a.len;
    let rows = bt * (a.len / hd);
    let mut total = std::mem::take(&mut s.total);
    total.clear();
    total.resize(rows, RowState::EMPTY);
    out.fill(0.0);
    segments_body(
        kv,
        a,
        bt,
        super::segments(a.pos0, bt, a.window),
        s,
        fill,
        |_, st, o| {
            for (r, (t, seg)) in total.iter_mut().zip(st).enumerate() {
                let span = r * hd..(r + 1) * hd;
                merge_segment(t, &mut out[span.clone()], seg, &o[span]);
            }
        },
    );
    for (o, t) in out.chunks_exact_mut(hd).zip(&total) {
        normalize(o, t);
    }
    s.total = total;
}

/// [`super::attend_segments`] without the dispatch (shapes checked there).
#[inline(always)]
pub(crate) fn segments_into<R: KvRows, F: FillTiles>(
    kv: &R,
    a: &QueryBlock,
    out: Segments,
    s: &mut AttnScratch,
    fill: F,
) {
    let rows = out.states.len() / out.segs.len().max(1);
    let bt = rows / (a.len / a.head_dim);
    let Segments { segs, states, outs } = out;
    let seg0 = segs.start;
    segments_body(kv, a, bt, segs, s, fill, |seg, st, o| {
        let j = seg - seg0;
        states[j * rows..(j + 1) * rows].copy_from_slice(st);
        outs[j * o.len()..(j + 1) * o.len()].copy_from_slice(o);
    });
}

/// [`super::merge_rows`] without the dispatch (shapes checked there).
#[inline(always)]
pub(crate) fn merge_rows(states: &[RowState], outs: &[f32], out: &mut [f32], head_dim: usize) {
    let rows = out.len() / head_dim;
    for (r, o) in out.chunks_exact_mut(head_dim).enumerate() {
        let mut total = RowState::EMPTY;
        o.fill(0.0);
        for (j, seg) in states.iter().skip(r).step_by(rows).enumerate() {
            let at = (j * rows + r) * head_dim;
            merge_segment(&mut total, o, seg, &outs[at..at + head_dim]);
        }
        normalize(o, &total);
    }
}

/// The block's attention over the keys of segments `segs`, one segment at a time from a
/// fresh state: `sink(segment, states, outputs)` gets each segment's row states and
/// un-normalized outputs (`bt` tokens' rows; a row that sees no key of the segment has
/// [`RowState::EMPTY`] and zeros).
#[inline(always)]
pub(crate) fn segments_body<R: KvRows, F: FillTiles>(
    kv: &R,
    a: &QueryBlock,
    bt: usize,
    segs: std::ops::Range<usize>,
    s: &mut AttnScratch,
    fill: F,
    mut sink: impl FnMut(usize, &[RowState], &[f32]),
) {
    let (head_dim, len, pos0, off) = (a.head_dim, a.len, a.pos0, a.kv_off);
    let heads = len / head_dim;
    let rows = bt * heads;
    // Token i sees the keys first(i) ..= pos0 + i (absolute positions).
    let first = |i: usize| {
        if a.window > 0 {
            (pos0 + i + 1).saturating_sub(a.window)
        } else {
            0
        }
    };
    let hi = pos0 + bt; // exclusive
    let qrow = |r: usize| {
        let (i, h) = (r / heads, r % heads);
        &a.q[i * a.q_stride + h * head_dim..i * a.q_stride + (h + 1) * head_dim]
    };
    // A group of rows r..r + n sees the tile at t0 when one of its tokens does.
    let group_sees = |r: usize, n: usize, t0: usize| {
        (r / heads..=(r + n - 1) / heads).any(|i| first(i) < t0 + 16 && pos0 + i >= t0)
    };
    // Rows four or two at a time where the level groups them.
    let group = |r: usize, rb: usize| match () {
        _ if F::PAIR_ROWS && r + 4 <= rb => 4,
        _ if F::PAIR_ROWS && r + 2 <= rb => 2,
        _ => 1,
    };
    s.scores.resize(rows * CHUNK, 0.0);
    s.row.resize(head_dim, 0.0);
    s.kt.resize(2 * head_dim * 16, 0.0);
    s.vt.resize(16 * head_dim, 0.0);
    let f16 = kv.f16();
    for seg in segs {
        s.state.clear();
        s.state.resize(rows, RowState::EMPTY);
        s.out.clear();
        s.out.resize(rows * head_dim, 0.0);
        let k0 = (seg * SEGMENT).max(first(0));
        let k1 = ((seg + 1) * SEGMENT).min(hi);
        for c0 in (k0 / CHUNK * CHUNK..k1).step_by(CHUNK) {
            let c1 = (c0 + CHUNK).min(k1);
            // The tokens that see the chunk: [ia, ib) (first(i) grows with i).
            let ia = c0.saturating_sub(pos0).min(bt);
            let ib = ia + (ia..bt).take_while(|&i| first(i) < c1).count();
            let (ra, rb) = (ia * heads, ib * heads);
            if ra == rb {
                continue;
            }
            let tiles = (c0..c1).step_by(16).map(|t0| Tile {
                pos: t0,
                kn: 16.min(c1 - t0),
                off,
            });
            // Scores by one tile, or on AVX-512 two at a time with rows three at a time (24
            // FMA chains, 20 loads per 24 FMAs: the one-tile loop is bound by its loads).
            let tile = |j: usize| Tile {
                pos: c0 + 16 * j,
                kn: 16.min(c1 - c0 - 16 * j),
                off,
            };
            let (ntiles, kw) = ((c1 - c0).div_ceil(16), head_dim * 16);
            let mut j = 0;
            while j < ntiles {
                let span = if F::PAIR_ROWS && j + 1 < ntiles { 2 } else { 1 };
                for h in 0..span {
                    let kt = &mut s.kt[h * kw..(h + 1) * kw];
                    match &f16 {
                        Some(rows) => fill.keys(rows, tile(j + h), kt, &mut s.row),
                        None => keys_by_row(kv, tile(j + h), kt, &mut s.row),
                    }
                }
                let kts = [&s.kt[..kw], &s.kt[kw..2 * kw]];
                let mut store = |r: usize, h: usize, acc: [f32; 16]| {
                    let at = r * CHUNK + 16 * (j + h);
                    for (o, &x) in s.scores[at..at + 16].iter_mut().zip(&acc) {
                        *o = x * a.scale;
                    }
                };
                let mut r = ra;
                while r < rb {
                    let n = if span == 2 && r + 3 <= rb {
                        3
                    } else {
                        group(r, rb)
                    };
                    let sees = |h: usize| group_sees(r, n, tile(j + h).pos);
                    if n == 3 {
                        if sees(0) || sees(1) {
                            let q = [qrow(r), qrow(r + 1), qrow(r + 2)];
                            let [a0, a1, a2] = score_rows3x2(kts, q);
                            for (k, [t0, t1]) in [(0, a0), (1, a1), (2, a2)] {
                                store(r + k, 0, t0);
                                store(r + k, 1, t1);
                            }
                        }
                        r += n;
                        continue;
                    }
                    for (h, kt) in kts.into_iter().enumerate().take(span) {
                        if !sees(h) {
                            continue;
                        }
                        match n {
                            4 => {
                                let q = [qrow(r), qrow(r + 1), qrow(r + 2), qrow(r + 3)];
                                for (k, acc) in score_rows4(kt, q).into_iter().enumerate() {
                                    store(r + k, h, acc);
                                }
                            }
                            2 => {
                                let q = [qrow(r), qrow(r + 1)];
                                for (k, acc) in score_rows2(kt, q).into_iter().enumerate() {
                                    store(r + k, h, acc);
                                }
                            }
                            _ => store(r, h, score_row(kt, qrow(r))),
                        }
                    }
                    r += n;
                }
                j += span;
            }
            for r in ra..rb {
                let i = r / heads;
                // The chunk's columns row r sees (the others, and those past the tiles, -inf).
                let va = first(i).max(c0) - c0;
                let vb = (pos0 + i + 1).min(c1) - c0;
                let sc: &mut [f32; CHUNK] = (&mut s.scores[r * CHUNK..(r + 1) * CHUNK])
                    .try_into()
                    .unwrap();
                let o = &mut s.out[r * head_dim..(r + 1) * head_dim];
                softmax_step(sc, (c1 - c0).div_ceil(16) * 16, va..vb, &mut s.state[r], o);
            }
            // out[r] += Σ_j p[r][j] · V[j] over the chunk, in key order.
            for t in tiles {
                match &f16 {
                    Some(rows) => fill.values(rows, t, head_dim, &mut s.vt),
                    None => values_by_row(kv, t, head_dim, &mut s.vt),
                }
                let col = t.pos - c0;
                let vt = &s.vt[..t.kn * head_dim];
                let p = |r: usize| &s.scores[r * CHUNK + col..r * CHUNK + col + t.kn];
                let mut r = ra;
                while r < rb {
                    let n = group(r, rb);
                    if group_sees(r, n, t.pos) {
                        let o = &mut s.out[r * head_dim..(r + n) * head_dim];
                        match n {
                            4 => {
                                let (o01, o23) = o.split_at_mut(2 * head_dim);
                                let (o0, o1) = o01.split_at_mut(head_dim);
                                let (o2, o3) = o23.split_at_mut(head_dim);
                                let ps = [p(r), p(r + 1), p(r + 2), p(r + 3)];
                                weighted_sum4([o0, o1, o2, o3], ps, vt, head_dim);
                            }
                            2 => {
                                let (o0, o1) = o.split_at_mut(head_dim);
                                weighted_sum2([o0, o1], [p(r), p(r + 1)], vt, head_dim);
                            }
                            _ => weighted_sum(o, p(r), vt, head_dim),
                        }
                    }
                    r += n;
                }
            }
        }
        sink(seg, &s.state, &s.out);
    }
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

/// [`score_row`] of three query rows against two tiles (`kt[0]`, `kt[1]`): 24 FMA chains,
/// each key load shared by three rows and each query element by two tiles (20 loads per
/// 24 FMAs against [`score_rows4`]'s 20 per 16). Each row's operations are `score_row`'s
/// per tile, in the same order.
#[inline(always)]
fn score_rows3x2(kt: [&[f32]; 2], q: [&[f32]; 3]) -> [[[f32; 16]; 2]; 3] {
    let (mut c00, mut c01) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
    let (mut c10, mut c11) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
    let (mut c20, mut c21) = ([[0f32; 16]; 4], [[0f32; 16]; 4]);
    let qs = q[0]
        .chunks_exact(4)
        .zip(q[1].chunks_exact(4))
        .zip(q[2].chunks_exact(4));
    let ks = kt[0].chunks_exact(64).zip(kt[1].chunks_exact(64));
    for ((k0, k1), ((q0, q1), q2)) in ks.zip(qs) {
        for p in 0..4 {
            let a: &[f32; 16] = k0[16 * p..16 * p + 16].try_into().unwrap();
            let b: &[f32; 16] = k1[16 * p..16 * p + 16].try_into().unwrap();
            axpy(&mut c00[p], q0[p], a);
            axpy(&mut c01[p], q0[p], b);
            axpy(&mut c10[p], q1[p], a);
            axpy(&mut c11[p], q1[p], b);
            axpy(&mut c20[p], q2[p], a);
            axpy(&mut c21[p], q2[p], b);
        }
    }
    [
        [
            finish_scores(&c00, kt[0], q[0]),
            finish_scores(&c01, kt[1], q[0]),
        ],
        [
            finish_scores(&c10, kt[0], q[1]),
            finish_scores(&c11, kt[1], q[1]),
        ],
        [
            finish_scores(&c20, kt[0], q[2]),
            finish_scores(&c21, kt[1], q[2]),
        ],
    ]
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
