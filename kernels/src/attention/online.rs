//! The online softmax of the tiled body: a row's running maximum and lane-wise sums over
//! the keys seen so far ([`RowState`]), one chunk of scores at a time ([`softmax_step`]),
//! and the merge of two segments' states ([`merge_segment`]). Every operation is plain
//! f32 or an explicit `mul_add` in a fixed order, so every level's build gives the same
//! bits (the exp is [`exp_lane`], not the level's vector exp).

/// Keys per online-softmax step: each row's scores of a chunk are reduced (max, exp, sum)
/// while they are in cache, and its output is rescaled when the running maximum grows.
/// Chunks start at multiples of `CHUNK` in absolute position, so a row's steps do not
/// depend on its batch.
pub(crate) const CHUNK: usize = 128;

/// Keys per segment: a row's attention is computed segment by segment, each from a fresh
/// state, and the segments are merged in order ([`merge_segment`]), so threads can split a
/// long cache's keys at segment boundaries without changing a bit (decode at depth: one
/// token's rows are too few to share out otherwise). A multiple of [`CHUNK`].
pub const SEGMENT: usize = 512;

/// One row's softmax state over some keys: the largest score and the lane-wise sums of
/// `exp(score - max)` (summed across the lanes at the end). Its output, the
/// probability-weighted values not yet divided by the sum, is kept beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowState {
    pub max: f32,
    pub sum: [f32; 16],
}

impl RowState {
    /// No keys seen.
    pub const EMPTY: Self = Self {
        max: f32::NEG_INFINITY,
        sum: [0.0; 16],
    };
}

/// One row's online-softmax step over a chunk of scores `sc` whose first `cols` columns
/// hold scores (visible columns `vis`): `sc` becomes `exp(sc - m_new)` there (0 where not
/// visible), the state's max becomes `m_new`, its sums are rescaled and grown, and the
/// row's output `o` is rescaled by `exp(m_old - m_new)` when that is not 1. Only the
/// 16-column groups holding visible columns are reduced (the others would add exact zeros:
/// the same bits); the rest of the `cols` are zeroed.
#[inline(always)]
pub(crate) fn softmax_step(
    sc: &mut [f32; CHUNK],
    cols: usize,
    vis: std::ops::Range<usize>,
    st: &mut RowState,
    o: &mut [f32],
) {
    let (g0, g1) = (vis.start / 16 * 16, vis.end.div_ceil(16) * 16);
    sc[..g0].fill(0.0);
    sc[g1..cols.max(g1)].fill(0.0);
    let sc = &mut sc[g0..g1];
    if vis.start > g0 || vis.end < g1 {
        for (j, x) in sc.iter_mut().enumerate() {
            if !vis.contains(&(g0 + j)) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    let mut mx = [f32::NEG_INFINITY; 16];
    for c in sc.chunks_exact(16) {
        for (m, &x) in mx.iter_mut().zip(c) {
            *m = max(*m, x);
        }
    }
    for w in [8, 4, 2, 1] {
        for j in 0..w {
            mx[j] = max(mx[j], mx[j + w]);
        }
    }
    let m_new = max(st.max, mx[0]);
    let mut sum = [0f32; 16];
    for c in sc.chunks_exact_mut(16) {
        for (s, x) in sum.iter_mut().zip(c) {
            *x = exp_lane(*x - m_new);
            *s += *x;
        }
    }
    if st.max == f32::NEG_INFINITY {
        st.sum = sum; // the row's first chunk: its output is still 0
    } else {
        let alpha = exp_lane(st.max - m_new);
        if alpha != 1.0 {
            for x in o {
                *x *= alpha;
            }
        }
        for (l, s) in st.sum.iter_mut().zip(sum) {
            *l = l.mul_add(alpha, s);
        }
    }
    st.max = m_new;
}

/// Folds segment state `seg` (output `o_seg`) into the running total `tot` (output
/// `o_tot`), both rescaled to the larger maximum. A segment the row does not see (max
/// -inf) changes nothing; into an empty total it is copied.
#[inline(always)]
pub fn merge_segment(tot: &mut RowState, o_tot: &mut [f32], seg: &RowState, o_seg: &[f32]) {
    if seg.max == f32::NEG_INFINITY {
        return;
    }
    if tot.max == f32::NEG_INFINITY {
        *tot = *seg;
        o_tot.copy_from_slice(o_seg);
        return;
    }
    let m = max(tot.max, seg.max);
    let (a, b) = (exp_lane(tot.max - m), exp_lane(seg.max - m));
    for (l, &s) in tot.sum.iter_mut().zip(&seg.sum) {
        *l = l.mul_add(a, s * b);
    }
    for (x, &y) in o_tot.iter_mut().zip(o_seg) {
        *x = x.mul_add(a, y * b);
    }
    tot.max = m;
}

/// A row's output divided by its probability sum: the attention result.
#[inline(always)]
pub fn normalize(o: &mut [f32], st: &RowState) {
    let mut v = st.sum;
    for w in [8, 4, 2, 1] {
        for j in 0..w {
            v[j] += v[j + w];
        }
    }
    let inv = 1.0 / v[0];
    for x in o {
        *x *= inv;
    }
}

/// The larger of two scores (finite or -inf: a plain compare, no NaN handling).
#[inline(always)]
fn max(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// `exp(x)` for `x <= 0` (a score minus its row's maximum); 0 below -87 (where the result
/// would be subnormal), for -inf and NaN. ARM optimized-routines' `expf` as the x86 and
/// ARM vector exps compute it ([`crate::ops::exp_consts`]; `2^n` is one normal factor in
/// this range), written with `mul_add` so every level's build gives the same bits.
#[inline(always)]
pub(crate) fn exp_lane(x: f32) -> f32 {
    use crate::ops::exp_consts as k;
    let z = x.mul_add(k::LOG2E, k::SHIFT);
    let n = z - k::SHIFT;
    let r = (-n).mul_add(k::LN2_HI, x);
    let r = (-n).mul_add(k::LN2_LO, r);
    // z's low mantissa bits hold n; shifted into the exponent field they scale 1.0 by 2^n.
    let scale = f32::from_bits((z.to_bits() << 23).wrapping_add(0x3f80_0000));
    let r2 = r * r;
    let p45 = k::C5.mul_add(r, k::C4);
    let p23 = k::C3.mul_add(r, k::C2);
    let p = p45.mul_add(r2, p23).mul_add(r2, k::C1 * r);
    let e = p.mul_add(scale, scale);
    // (`x >= -87` is false for NaN too.)
    if x >= -87.0 {
        e
    } else {
        0.0
    }
}
