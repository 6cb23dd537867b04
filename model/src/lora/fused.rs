//! Adapters inside the base product (pocket's numerics): `out += s · B(A x)` runs in the
//! items of the projection's own pool job ([`Linear::forward_then`]), on the output piece
//! each item has just written, so an adapter adds no pool job (each costs ~15 µs of
//! wake-up and wait, more than a decode step's whole low-rank product) and its `B` product
//! is split across the threads with the base rows.
//!
//! * One token (decode): `A x` of all the parts that share the input (Q, K, V of a fused
//!   matrix; gate and up of a stacked one) is one set of rows split across the threads:
//!   each thread's first item of the job takes its part ([`ItemTail::lead`]); each row
//!   block then adds `s · B[its rows] · mid` to its rows (a block done before all of
//!   `A x` is, because a thread came late, adds it after the job).
//! * A batch: each item takes its tokens' `A x` and `B` products whole.
//!
//! Each output element gets the arithmetic of [`super::apply::add_product`] (the same
//! dot, the same rank-order sum, the same scale-and-add), whichever item computes it.
//!
//! [`Linear::forward_then`]: crate::linear::Linear::forward_then

use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use pocket_kernels::Isa;

use super::apply::LoraRuns;
use super::{LoraPair, Proj};
use crate::linear::ItemTail;
use crate::threadpool::ThreadPool;

/// Where projection `proj`'s outputs are in each output row of a product: columns
/// `offset .. offset + n_out` (a fused Q/K/V or stacked gate/up row holds several).
pub struct Part {
    pub proj: Proj,
    pub offset: usize,
    pub n_out: usize,
}

impl Part {
    pub fn new(proj: Proj, offset: usize, n_out: usize) -> Part {
        Part {
            proj,
            offset,
            n_out,
        }
    }
}

/// The adapters of layer `l` on the parts of one product, as an [`ItemTail`].
pub struct Fused<'a> {
    isa: Isa,
    l: usize,
    runs: &'a LoraRuns<'a>,
    parts: &'a [Part],
    /// The product's input rows (`n_in` wide).
    x: &'a [f32],
    n_in: usize,
    /// Output values per token of the product.
    row_len: usize,
    /// One token: the `A` rows of every part's pairs, in part then pair order (each pair
    /// with its first row there), and their products `A x` (f32 bits), written by the
    /// leads; `done` counts the rows written.
    segs: Vec<(&'a LoraPair, usize)>,
    /// The part of each segment.
    seg_parts: Vec<usize>,
    mids: Vec<AtomicU32>,
    done: AtomicUsize,
}

impl<'a> Fused<'a> {
    /// The tail for a product of `tokens` rows of `x` into rows of `row_len`; `None` when
    /// no row's adapters touch `parts` in layer `l` (the plain product then runs).
    pub fn new(
        isa: Isa,
        (l, runs): (usize, &'a LoraRuns<'a>),
        parts: &'a [Part],
        x: &'a [f32],
        tokens: usize,
        row_len: usize,
    ) -> Option<Fused<'a>> {
        let projs: Vec<Proj> = parts.iter().map(|p| p.proj).collect();
        if tokens == 0 || !runs.touches(l, &projs) {
            return None;
        }
        let (mut segs, mut seg_parts) = (Vec::new(), Vec::new());
        let mut n_mid = 0;
        if tokens == 1 {
            let set = runs.set_of(0)?;
            for (pi, part) in parts.iter().enumerate() {
                for (pair, _) in set.pairs(l, part.proj) {
                    segs.push((pair, n_mid));
                    seg_parts.push(pi);
                    n_mid += pair.rank;
                }
            }
        }
        Some(Fused {
            isa,
            l,
            runs,
            parts,
            x,
            n_in: x.len() / tokens,
            row_len,
            segs,
            seg_parts,
            mids: (0..n_mid).map(|_| AtomicU32::new(0)).collect(),
            done: AtomicUsize::new(0),
        })
    }
}

impl ItemTail for Fused<'_> {
    fn lead(&self, k: usize, n: usize) {
        let rows = ThreadPool::split(self.mids.len(), n, k);
        let x = &self.x[..self.n_in];
        for (pair, first) in &self.segs {
            let mine = rows.start.max(*first)..rows.end.min(first + pair.rank);
            for g in mine {
                let m = pair.a.dot(self.isa, (g - first) * pair.n_in, x);
                self.mids[g].store(m.to_bits(), Ordering::Relaxed);
            }
        }
        // Publishes the stores above to the item that sees the count complete.
        self.done.fetch_add(rows.len(), Ordering::Release);
    }

    fn prefetch(&self, rows: Range<usize>) {
        for (pair, part) in self.segs.iter().map(|(p, _)| p).zip(&self.seg_parts) {
            let part = &self.parts[*part];
            let lo = rows.start.max(part.offset);
            let hi = rows.end.min(part.offset + part.n_out);
            if lo < hi {
                pair.prefetch_b(self.isa, lo - part.offset..hi - part.offset);
            }
        }
    }

    fn rows(&self, rows: Range<usize>, out: &mut [f32]) -> bool {
        if self.done.load(Ordering::Acquire) < self.mids.len() {
            return false;
        }
        let Some(set) = self.runs.set_of(0) else {
            return true;
        };
        let mut seg = self.segs.iter();
        // `A x` of a pair, copied out of the atomics (no allocation up to rank 64).
        let (mut small, mut big) = ([0f32; 64], Vec::new());
        for part in self.parts {
            // The part's columns among `rows`.
            let lo = rows.start.max(part.offset);
            let hi = rows.end.min(part.offset + part.n_out);
            for (pair, scale) in set.pairs(self.l, part.proj) {
                let (_, first) = seg.next().expect("a segment per pair");
                if lo < hi {
                    let mid = if pair.rank <= small.len() {
                        &mut small[..pair.rank]
                    } else {
                        big.resize(pair.rank, 0.0);
                        &mut big[..]
                    };
                    for (m, v) in mid.iter_mut().zip(&self.mids[*first..first + pair.rank]) {
                        *m = f32::from_bits(v.load(Ordering::Relaxed));
                    }
                    let o = &mut out[lo - rows.start..hi - rows.start];
                    pair.add_b_product(self.isa, mid, scale, lo - part.offset, o);
                }
            }
        }
        true
    }

    fn tokens(&self, toks: Range<usize>, out: &mut [f32]) {
        let mut mid = Vec::new();
        for (j, t) in toks.enumerate() {
            let Some(set) = self.runs.set_of(t) else {
                continue;
            };
            let x = &self.x[t * self.n_in..][..self.n_in];
            let row = &mut out[j * self.row_len..][..self.row_len];
            for part in self.parts {
                for (pair, scale) in set.pairs(self.l, part.proj) {
                    mid.resize(pair.rank, 0.0);
                    pair.a_product(self.isa, x, &mut mid);
                    let o = &mut row[part.offset..][..part.n_out];
                    pair.add_b_product(self.isa, &mid, scale, 0, o);
                }
            }
        }
    }
}
