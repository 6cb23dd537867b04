//! The run-time product of an adapter: `out[t] += s · B(A x[t])` for every row `t` of a
//! step, in the order llama.cpp's `build_lora_mm` evaluates it (`A x`, then `B ·`, then
//! the scale, then the add onto the base product), batched over the step's rows: one
//! pass of `A` over all rows, one of `B`. Work big enough to be worth it is split across
//! the pool; a decode step's products are a few tens of thousands of multiply-adds and
//! run on the calling thread. This is how `--numerics ggml` applies adapters (after each
//! base product, in f32); pocket's own numerics runs the same per-element arithmetic
//! inside the base product's items ([`super::fused`]).

use std::ops::Range;

use super::{LoraMat, LoraPair, LoraSet, Proj};
use pocket_kernels::ggml_exact::vec;
use pocket_kernels::Isa;

use crate::threadpool::{Disjoint, ThreadPool};

/// Below this many multiply-adds a product runs on the calling thread (waking the pool
/// costs more than the arithmetic).
const PAR_MACS: usize = 1 << 17;

/// Reusable buffers of the low-rank products.
#[derive(Default)]
pub struct LoraScratch {
    mid: Vec<f32>,
    delta: Vec<f32>,
}

/// Where a projection's rows are: row `t`'s outputs are `out[t·stride + offset ..][..n_out]`
/// (a fused Q/K/V or stacked gate/up output holds several projections per row).
pub struct Dest<'o> {
    pub out: &'o mut [f32],
    pub stride: usize,
    pub offset: usize,
}

impl<'o> Dest<'o> {
    /// Rows of `n` values, nothing else in them.
    pub fn rows(out: &'o mut [f32], n: usize) -> Dest<'o> {
        Dest {
            out,
            stride: n,
            offset: 0,
        }
    }
}

/// Runs of consecutive rows of a step that share one adapter set (each row applies its
/// sequence's set); empty when no row has an active adapter.
#[derive(Default)]
pub struct LoraRuns<'a> {
    runs: Vec<(&'a LoraSet, Range<usize>)>,
}

impl<'a> LoraRuns<'a> {
    /// `sets[seq]` for each row's sequence `seq_of_rows`.
    pub fn new(sets: &'a [LoraSet], seq_of_rows: impl Iterator<Item = usize>) -> Self {
        let mut runs: Vec<(&'a LoraSet, Range<usize>)> = Vec::new();
        if sets.iter().all(LoraSet::is_empty) {
            return LoraRuns { runs };
        }
        for (t, seq) in seq_of_rows.enumerate() {
            let set = &sets[seq];
            match runs.last_mut() {
                Some((s, r)) if std::ptr::eq(*s, set) => r.end = t + 1,
                _ => runs.push((set, t..t + 1)),
            }
        }
        runs.retain(|(s, _)| !s.is_empty());
        LoraRuns { runs }
    }

    /// Whether any row's set adapts one of `ps` in layer `l`.
    pub fn touches(&self, l: usize, ps: &[Proj]) -> bool {
        self.runs.iter().any(|(s, _)| s.touches(l, ps))
    }

    /// The set row `t` applies (`None`: no active adapter).
    pub fn set_of(&self, t: usize) -> Option<&'a LoraSet> {
        self.runs
            .iter()
            .find(|(_, r)| r.contains(&t))
            .map(|(s, _)| *s)
    }
}

/// Adds each row's active adapters' products for projection `p` of layer `l` to `dest`,
/// for the rows of `x` (rows of the projection's input width), after the base product
/// (`--numerics ggml`; pocket's kernels run them inside the product, [`super::fused`]).
pub fn add_all(
    pool: &ThreadPool,
    runs: &LoraRuns,
    (l, p): (usize, Proj),
    x: &[f32],
    dest: &mut Dest,
    s: &mut LoraScratch,
) {
    for (set, rows) in &runs.runs {
        for (pair, scale) in set.pairs(l, p) {
            let n_in = pair.n_in;
            let x = &x[rows.start * n_in..rows.end * n_in];
            let mut d = Dest {
                out: &mut dest.out[rows.start * dest.stride..],
                stride: dest.stride,
                offset: dest.offset,
            };
            add_product(pool, pair, scale, x, &mut d, s);
        }
    }
}

/// `dest[t] += scale · B(A x[t])`.
pub fn add_product(
    pool: &ThreadPool,
    pair: &LoraPair,
    scale: f32,
    x: &[f32],
    dest: &mut Dest,
    s: &mut LoraScratch,
) {
    let isa = Isa::active();
    let (rank, n_in, n_out) = (pair.rank, pair.n_in, pair.n_out);
    let tokens = x.len() / n_in;
    debug_assert_eq!(x.len(), tokens * n_in, "lora input width");
    s.mid.resize(tokens * rank, 0.0);
    // ggml's kernel for each product: a batch (2+ tokens) whose weight has a multiple of
    // 4 rows goes to llamafile's sgemm, anything else to `ggml_vec_dot_f32`.
    let batched = |rows: usize| tokens >= 2 && rows.is_multiple_of(4);
    let (a_batched, b_batched) = (batched(rank), batched(n_out));
    fill(pool, &mut s.mid, n_in, |i| {
        let (t, r) = (i / rank, i % rank);
        ggml_dot(isa, &pair.a, r * n_in, &x[t * n_in..][..n_in], a_batched)
    });
    let mid = &s.mid;
    let row = |t: usize| t * dest.stride + dest.offset;
    if pair.bt.is_some() {
        // Bᵀ: per row, one pass over the outputs, added in place.
        for t in 0..tokens {
            let out = &mut dest.out[row(t)..][..n_out];
            pair.add_b_product(isa, &mid[t * rank..][..rank], scale, 0, out);
        }
        return;
    }
    s.delta.resize(tokens * n_out, 0.0);
    fill(pool, &mut s.delta, rank, |i| {
        let (t, o) = (i / n_out, i % n_out);
        ggml_dot(isa, &pair.b, o * rank, &mid[t * rank..][..rank], b_batched)
    });
    for (t, d) in s.delta.chunks_exact(n_out).enumerate() {
        let out = &mut dest.out[row(t)..][..n_out];
        out.iter_mut().zip(d).for_each(|(o, &d)| *o += scale * d);
    }
}

/// `Σ m[start + i] · x[i]` as ggml's CPU backend sums an f32 adapter's product: one output
/// of llamafile's sgemm (`batched`) or `ggml_vec_dot_f32` (the twins in
/// `pocket_kernels::ggml_exact::vec`). bf16 elements (the fast path's) have no twin.
fn ggml_dot(isa: Isa, m: &LoraMat, start: usize, x: &[f32], batched: bool) -> f32 {
    match m {
        LoraMat::F32(v) => {
            let w = &v[start..start + x.len()];
            if batched {
                vec::sgemm_dot_f32(w, x)
            } else {
                vec::vec_dot_f32(w, x)
            }
        }
        LoraMat::Bf16(_) => m.dot(isa, start, x),
    }
}

/// `buf[i] = f(i)` for every `i`, each `f` about `macs_each` multiply-adds; split in
/// contiguous chunks across the pool when the total is worth it.
fn fill(pool: &ThreadPool, buf: &mut [f32], macs_each: usize, f: impl Fn(usize) -> f32 + Sync) {
    let n = pool.threads();
    if n == 1 || buf.len() * macs_each < PAR_MACS {
        buf.iter_mut().enumerate().for_each(|(i, v)| *v = f(i));
        return;
    }
    // Items of the pool (claimed as the threads go), each a contiguous chunk of `buf`.
    let len = buf.len();
    let n_items = n * 4;
    let range = |k| ThreadPool::split(len, n_items, k);
    let parts = Disjoint::split(buf, (0..n_items).map(|k| range(k).len()));
    pool.run_items(n_items, |_, k| {
        let start = range(k).start;
        parts
            .piece(k)
            .iter_mut()
            .enumerate()
            .for_each(|(j, v)| *v = f(start + j));
    });
}
