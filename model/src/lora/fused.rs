//! Adapters inside the base product (pocket's numerics): `out += s · B(A x)` runs in the
//! items of the projection's own pool job ([`Linear::forward_then`]), on the output piece
//! each item has just written, so an adapter adds no pool job (each costs ~15 µs of
//! wake-up and wait, more than a decode step's whole low-rank product) and its `B` product
//! is split across the threads with the base rows.
//!
//! * One token (decode), and 2-7 tokens (the base product split by output panels, every
//!   item all tokens): `A x` of every token and every part that shares the input (Q, K, V
//!   of a fused matrix; gate and up of a stacked one) is one set of rows (those of each
//!   pair's `A`) that the threads claim a few at a time, each thread's first item of the
//!   job claiming until none is left ([`ItemTail::lead`]); each row block then adds `s ·
//!   B[its rows] · mid` to its rows of every token (a block done while another thread is
//!   still computing a claimed row adds it after the job).
//! * A larger batch: each item takes its tokens' `A x` and `B` products whole.
//!
//! Each output element gets the same arithmetic whichever item computes it and however
//! many tokens the step has: `A x` of a token is the same row of the same kernel on that
//! token's f32 input (int8 or bf16 `A`), `B` the same per-column sum.
//!
//! [`Linear::forward_then`]: crate::linear::Linear::forward_then

use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use pocket_kernels::Isa;

use super::apply::LoraRuns;
use super::{LoraPair, Proj};
use crate::linear::{ItemTail, PANEL_SPLIT_TOKENS};

/// Rows of `A x` a thread claims at a time ([`Fused::claim_rows`]): a claim is two atomic
/// adds on lines both threads use, a row ~0.1 µs of work. 16 (a rank-16 pair, its `A x`
/// one cache line of `mids`) rather than 4, with which both threads wrote into one
/// line: rank-16 adapter on MNN-Pocket Q4_1, 2 threads, `pocket bench --interleave`, four
/// alternating rounds on the Sapphire Rapids-class VM: decode cost +14.0 / 16.4 / 15.1 /
/// 12.0 % against +19.3 / 21.7 / 15.8 / 17.7 % with 4.
const CLAIM: usize = 16;

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

/// One pair applied to one token of a few-token product: its `A x` is `mids[first ..
/// first + rank]`.
struct Seg<'a> {
    t: usize,
    pair: &'a LoraPair,
    scale: f32,
    part: usize,
    first: usize,
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
    /// Fewer than `PANEL_SPLIT_TOKENS` tokens: every (token, part, pair) in that order,
    /// with the products `A x` (f32 bits) written by the leads; `done` counts the values
    /// written.
    segs: Vec<Seg<'a>>,
    mids: Vec<AtomicU32>,
    /// Few tokens: the first token's adapters of the product that comes next
    /// ([`Proj::next_product`]), whose `A` the row blocks prefetch, each its share.
    after: Vec<&'a LoraPair>,
    /// The next unclaimed row of `mids` ([`Self::claim_rows`]).
    next: AtomicUsize,
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
        let n_in = x.len() / tokens;
        let mut segs = Vec::new();
        let mut n_mid = 0;
        let seg_tokens = if tokens < PANEL_SPLIT_TOKENS {
            tokens
        } else {
            0
        };
        for t in 0..seg_tokens {
            let Some(set) = runs.set_of(t) else { continue };
            for (pi, part) in parts.iter().enumerate() {
                for (pair, scale) in set.pairs(l, part.proj) {
                    segs.push(Seg {
                        t,
                        pair,
                        scale,
                        part: pi,
                        first: n_mid,
                    });
                    n_mid += pair.rank;
                }
            }
        }
        let after = match (runs.set_of(0), parts.last()) {
            (Some(set), Some(last)) if seg_tokens > 0 => {
                let (dl, projs) = last.proj.next_product();
                projs
                    .iter()
                    .flat_map(|&p| set.pairs(l + dl, p).map(|(pair, _)| pair))
                    .collect()
            }
            _ => Vec::new(),
        };
        Some(Fused {
            isa,
            after,
            l,
            runs,
            parts,
            x,
            n_in,
            row_len,
            segs,
            mids: (0..n_mid).map(|_| AtomicU32::new(0)).collect(),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        })
    }

    /// Token `t`'s input row.
    fn x_of(&self, t: usize) -> &[f32] {
        &self.x[t * self.n_in..][..self.n_in]
    }

    /// Rows `u` (local to `seg`) of `seg`'s `A x` into the atomics; the values written.
    fn a_rows(&self, seg: &Seg, u: Range<usize>, buf: &mut [f32]) -> usize {
        let buf = &mut buf[..u.len()];
        seg.pair.a_rows(self.isa, self.x_of(seg.t), u.clone(), buf);
        for (r, b) in u.clone().zip(buf.iter()) {
            self.mids[seg.first + r].store(b.to_bits(), Ordering::Relaxed);
        }
        u.len()
    }
}

impl Fused<'_> {
    /// Claims rows of `A x` (all tokens, parts and pairs, [`CLAIM`] at a time) until none
    /// is left, computing each into the atomics: whichever thread comes first does most,
    /// so a thread late to the job delays no row block.
    fn claim_rows(&self) {
        let n = self.mids.len();
        let (mut small, mut big) = ([0f32; 64], Vec::new());
        loop {
            let c0 = self.next.fetch_add(CLAIM, Ordering::Relaxed);
            if c0 >= n {
                return;
            }
            let claim = c0..(c0 + CLAIM).min(n);
            let mut written = 0;
            for seg in &self.segs {
                let lo = claim.start.max(seg.first);
                let hi = claim.end.min(seg.first + seg.pair.rank);
                if lo >= hi {
                    continue;
                }
                let buf = if seg.pair.rank <= small.len() {
                    &mut small[..]
                } else {
                    big.resize(seg.pair.rank, 0.0);
                    &mut big[..]
                };
                written += self.a_rows(seg, lo - seg.first..hi - seg.first, buf);
            }
            // Publishes the stores above to the item that sees the count complete.
            self.done.fetch_add(written, Ordering::Release);
        }
    }
}

impl ItemTail for Fused<'_> {
    /// Every thread's first item claims rows of `A x` until none is left (the split is
    /// dynamic: a static half per thread left ~24 % of a decode step's row blocks waiting
    /// for a thread that came late, their `B` product then run after the job on one
    /// thread).
    fn lead(&self, _k: usize, _n: usize) {
        self.claim_rows();
    }

    fn prefetch(&self, rows: Range<usize>) {
        for seg in self.segs.iter().filter(|s| s.t == 0) {
            let part = &self.parts[seg.part];
            let lo = rows.start.max(part.offset);
            let hi = rows.end.min(part.offset + part.n_out);
            if lo < hi {
                seg.pair
                    .prefetch_b(self.isa, lo - part.offset..hi - part.offset);
            }
        }
        for pair in &self.after {
            pair.prefetch_a_part(self.isa, rows.clone(), self.row_len);
        }
    }

    fn rows(&self, rows: Range<usize>, out: &mut [f32]) -> bool {
        if self.done.load(Ordering::Acquire) < self.mids.len() {
            // Rows nobody has claimed yet are done here; rows another thread is computing
            // are not waited for.
            self.claim_rows();
        }
        if self.done.load(Ordering::Acquire) < self.mids.len() {
            return false;
        }
        let width = rows.len();
        // `A x` of a pair, copied out of the atomics (no allocation up to rank 64).
        let (mut small, mut big) = ([0f32; 64], Vec::new());
        for seg in &self.segs {
            let part = &self.parts[seg.part];
            // The part's columns among `rows`.
            let lo = rows.start.max(part.offset);
            let hi = rows.end.min(part.offset + part.n_out);
            if lo >= hi {
                continue;
            }
            let rank = seg.pair.rank;
            let mid = if rank <= small.len() {
                &mut small[..rank]
            } else {
                big.resize(rank, 0.0);
                &mut big[..]
            };
            for (m, v) in mid.iter_mut().zip(&self.mids[seg.first..seg.first + rank]) {
                *m = f32::from_bits(v.load(Ordering::Relaxed));
            }
            let o = &mut out[seg.t * width + lo - rows.start..][..hi - lo];
            seg.pair
                .add_b_product(self.isa, mid, seg.scale, lo - part.offset, o);
        }
        true
    }

    fn tokens(&self, toks: Range<usize>, out: &mut [f32]) {
        let mut mid = Vec::new();
        for (j, t) in toks.enumerate() {
            let Some(set) = self.runs.set_of(t) else {
                continue;
            };
            let row = &mut out[j * self.row_len..][..self.row_len];
            for part in self.parts {
                for (pair, scale) in set.pairs(self.l, part.proj) {
                    mid.resize(pair.rank, 0.0);
                    pair.a_product(self.isa, self.x_of(t), &mut mid);
                    let o = &mut row[part.offset..][..part.n_out];
                    pair.add_b_product(self.isa, &mid, scale, 0, o);
                }
            }
        }
    }
}
