//! Pocket's own numerics for the layer walker: repacked weights through the SIMD kernels,
//! one quantized activation shared by the matrices that read the same input (Q/K/V,
//! gate/up), a batch through each matrix as one gemm and one token as a gemv split by
//! output panels, attention on tiles of 16 keys. A row's arithmetic never depends on the
//! other rows of the batch (prompt rows equal the same tokens decoded one by one, bit for
//! bit), which is what lets sequences be batched together.

use std::sync::Mutex;

use pocket_kernels::ops::rope::{RopeMode, RopeTable};
use pocket_kernels::ops::{activation, norm, rope};
use pocket_kernels::Isa;

use super::walk::{Adapted, AttnJob, Cx, LayerOps};
use super::Bufs;
use crate::attention::{AttnScratch, LayerRows};
use crate::config::FfnAct;
use crate::linear::{Input, ItemTail, Linear};
use crate::lora::apply::{LoraRuns, LoraScratch};
use crate::lora::fused::{Fused, Part};
use crate::lora::Proj;
use crate::profile::Op;
use crate::threadpool::ThreadPool;
use crate::weights::{GateUp, Qkv};
use pocket_kernels::attention::{
    attend, attend_segments, merge_rows, QueryBlock, RowState, Segments,
};

pub(super) struct FastOps {
    isa: Isa,
    mode: RopeMode,
    head_dim: usize,
    /// The activation of the current matrix input, quantized for its readers.
    inp: Input,
    /// One attention scratch per pool thread.
    scratch: Vec<Mutex<(AttnScratch, Vec<f32>)>>,
}

impl FastOps {
    pub fn new(isa: Isa, mode: RopeMode, head_dim: usize, threads: usize) -> FastOps {
        FastOps {
            isa,
            mode,
            head_dim,
            inp: Input::default(),
            scratch: (0..threads).map(|_| Mutex::default()).collect(),
        }
    }

    /// Quantizes `x` once for `lins` (they read the same input).
    fn quantize(&mut self, cx: &mut Cx, x: &[f32], tokens: usize, lins: &[&Linear]) {
        self.inp.set(cx.pool, x, tokens, lins);
        cx.obs.mark(Op::ActQuant);
    }

    /// [`Self::quantize`] for products with adapters: the packed form too (an int8
    /// adapter's `A` reads it even beside a generic matrix).
    fn quantize_lora(&mut self, cx: &mut Cx, x: &[f32], tokens: usize, lins: &[&Linear]) {
        self.inp.set_with(cx.pool, x, tokens, lins, true);
        cx.obs.mark(Op::ActQuant);
    }

    fn product(&self, cx: &mut Cx, op: Op, lin: &Linear, out: &mut Vec<f32>) {
        self.product_then(cx, op, lin, out, None);
    }

    /// The product with `lora`'s adapters added inside its items.
    fn product_then(
        &self,
        cx: &mut Cx,
        op: Op,
        lin: &Linear,
        out: &mut Vec<f32>,
        lora: Option<&Fused>,
    ) {
        out.resize(self.inp.tokens * lin.rows(), 0.0);
        cx.obs.matrix(op, &[lin], self.inp.tokens);
        let tail = lora.map(|f| f as &dyn ItemTail);
        lin.forward_then(cx.pool, &self.inp, out, self.isa, tail);
    }

    /// The tail adding `runs`' adapters of `parts` to a product of `lin` on `x`.
    fn lora<'a>(
        &'a self,
        cx: &Cx,
        runs: &'a LoraRuns<'a>,
        parts: &'a [Part],
        x: &'a [f32],
        lin: &Linear,
    ) -> Option<Fused<'a>> {
        Fused::new(
            self.isa,
            (cx.l, runs),
            parts,
            x,
            self.inp.tokens,
            lin.rows(),
        )
    }
}

/// The rows of a fused Q/K/V product (`b.qkv`) into `b.q`, `b.k`, `b.v`.
fn split_qkv(b: &mut Bufs, tokens: usize, qd: usize, kvd: usize) {
    let w3 = qd + 2 * kvd;
    b.q.resize(tokens * qd, 0.0);
    b.k.resize(tokens * kvd, 0.0);
    b.v.resize(tokens * kvd, 0.0);
    for t in 0..tokens {
        let r = &b.qkv[t * w3..(t + 1) * w3];
        b.q[t * qd..(t + 1) * qd].copy_from_slice(&r[..qd]);
        b.k[t * kvd..(t + 1) * kvd].copy_from_slice(&r[qd..qd + kvd]);
        b.v[t * kvd..(t + 1) * kvd].copy_from_slice(&r[qd + kvd..]);
    }
}

impl LayerOps for FastOps {
    fn trims_last_layer(&self) -> bool {
        true
    }

    fn norm_row(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
        norm::rms_norm_with(self.isa, x, w, eps, out);
    }

    fn norm_row_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) {
        norm::rms_norm_inplace_with(self.isa, x, w, eps);
    }

    fn norm_heads(&self, x: &mut [f32], w: &[f32], eps: f32) {
        norm::rms_norm_heads_with(self.isa, x, w, eps);
    }

    fn rope(&self, x: &mut [f32], table: &RopeTable, pos: usize) {
        rope::rope_with(self.isa, self.mode, x, self.head_dim, table, pos);
    }

    fn qkv(&mut self, cx: &mut Cx, w: &Qkv, tokens: usize, b: &mut Bufs) {
        let (qd, kvd) = (cx.c.q_dim(), cx.c.kv_dim());
        match w {
            Qkv::Fused(lin) => {
                self.quantize(cx, &b.xn, tokens, &[lin]);
                self.product(cx, Op::Qkv, lin, &mut b.qkv);
                split_qkv(b, tokens, qd, kvd);
            }
            Qkv::Split { q, k, v } => {
                self.quantize(cx, &b.xn, tokens, &[q, k, v]);
                self.product(cx, Op::Qkv, q, &mut b.q);
                self.product(cx, Op::Qkv, k, &mut b.k);
                self.product(cx, Op::Qkv, v, &mut b.v);
            }
        }
    }

    fn attention(&mut self, cx: &mut Cx, job: &AttnJob, q: &mut [f32], att: &mut Vec<f32>) {
        let c = cx.c;
        let (qd, hd) = (c.q_dim(), c.head_dim);
        let nt = job.live.len();
        att.resize(nt * qd, 0.0);
        if nt == 0 {
            return;
        }
        let (group, n_kv, window) = (c.group(), c.n_head_kv, c.window_of(job.l));
        let gw = group * hd;
        let nth = cx.pool.threads();
        // Items of blocks of up to BT consecutive tokens of one sequence ([`attention_items`]);
        // the block size changes no bits (a row's keys go by absolute chunks and segments).
        const BT: usize = 32;
        let blocks = job.batch.runs(job.live, BT);
        let (rows, live, scratch, isa, q) =
            (&job.batch.rows, job.live, &self.scratch, self.isa, &*q);
        let items = attention_items(
            &blocks,
            |b| rows[live[b.start]].pos,
            window,
            n_kv,
            group,
            nth,
        );
        // Items write disjoint (row, head-range) pieces of `att`, or hand in their segments'
        // partial results; the copy is tiny beside the attention, so a lock per item costs
        // nothing measurable.
        let out = Mutex::new(&mut att[..]);
        let parts = Mutex::new(Vec::new());
        cx.pool.run_items(items.len(), |me, idx| {
            let mut guard = scratch[me].lock().unwrap();
            let (s, o) = &mut *guard;
            let item = &items[idx];
            let tb = blocks[item.block].clone();
            let t = live[tb.start];
            let first = &rows[t];
            let (a, len) = (item.g * gw + item.heads.start * hd, item.heads.len() * hd);
            let block = QueryBlock {
                q: &q[t * qd + a..],
                q_stride: qd,
                len,
                head_dim: hd,
                kv_off: item.g * hd,
                pos0: first.pos,
                window,
                scale: c.attn_scale,
            };
            let kv = LayerRows::new(&job.seqs[first.seq].cache, job.l);
            if let Some(segs) = item.segs.clone() {
                let n = segs.len() * tb.len() * item.heads.len();
                let mut states = vec![RowState::EMPTY; n];
                let mut outs = vec![0f32; n * hd];
                let out = Segments {
                    segs,
                    states: &mut states,
                    outs: &mut outs,
                };
                attend_segments(&kv, &block, out, s, isa);
                parts.lock().unwrap().push((idx, states, outs));
                return;
            }
            o.resize(tb.len() * len, 0.0);
            attend(&kv, &block, o, s, isa);
            let mut att = out.lock().unwrap();
            for (k, r) in o.chunks_exact(len).enumerate() {
                att[(tb.start + k) * qd + a..][..len].copy_from_slice(r);
            }
        });
        // The key-split items' segments, merged in order (items are listed in segment order
        // within a block's KV head).
        let mut parts = parts.into_inner().unwrap();
        if parts.is_empty() {
            return;
        }
        parts.sort_by_key(|p| p.0);
        let att = out.into_inner().unwrap();
        let mut i = 0;
        while i < parts.len() {
            let head = &items[parts[i].0];
            let same = |p: &(usize, Vec<RowState>, Vec<f32>)| {
                let it = &items[p.0];
                (it.block, it.g) == (head.block, head.g)
            };
            let n = parts[i..].iter().take_while(|p| same(p)).count();
            let states: Vec<RowState> = parts[i..i + n].iter().flat_map(|p| p.1.clone()).collect();
            let outs: Vec<f32> = parts[i..i + n].iter().flat_map(|p| p.2.clone()).collect();
            let tb = blocks[head.block].clone();
            let mut o = vec![0f32; tb.len() * gw];
            merge_rows(&states, &outs, &mut o, hd, isa);
            for (k, r) in o.chunks_exact(gw).enumerate() {
                att[(tb.start + k) * qd + head.g * gw..][..gw].copy_from_slice(r);
            }
            i += n;
        }
    }

    fn linear(&mut self, cx: &mut Cx, op: Op, w: &Linear, x: &[f32], n: usize, out: &mut Vec<f32>) {
        self.quantize(cx, x, n, &[w]);
        self.product(cx, op, w, out);
    }

    fn gate_up(&mut self, cx: &mut Cx, w: &GateUp, tokens: usize, b: &mut Bufs) {
        let (ff, act) = (cx.c.n_ff, cx.c.ffn_act);
        match w {
            GateUp::SwiGlu(lin) => {
                self.quantize(cx, &b.xn, tokens, &[lin]);
                self.product(cx, Op::GateUp, lin, &mut b.h);
            }
            GateUp::Stacked(lin) => {
                self.quantize(cx, &b.xn, tokens, &[lin]);
                self.product(cx, Op::GateUp, lin, &mut b.g);
                b.h.resize(tokens * ff, 0.0);
                for (r, h) in b.g.chunks_exact(2 * ff).zip(b.h.chunks_exact_mut(ff)) {
                    gate(self.isa, act, &r[..ff], &r[ff..], h);
                }
            }
            GateUp::Split { gate: wg, up: wu } => {
                self.quantize(cx, &b.xn, tokens, &[wg, wu]);
                self.product(cx, Op::GateUp, wg, &mut b.g);
                self.product(cx, Op::GateUp, wu, &mut b.u);
                b.h.resize(tokens * ff, 0.0);
                gate(self.isa, act, &b.g, &b.u, &mut b.h);
            }
        }
    }

    fn qkv_lora(&mut self, cx: &mut Cx, w: &Qkv, tokens: usize, b: &mut Bufs, runs: &LoraRuns) {
        let (qd, kvd) = (cx.c.q_dim(), cx.c.kv_dim());
        match w {
            Qkv::Fused(lin) => {
                self.quantize_lora(cx, &b.xn, tokens, &[lin]);
                let parts = [
                    Part::new(Proj::Q, 0, qd),
                    Part::new(Proj::K, qd, kvd),
                    Part::new(Proj::V, qd + kvd, kvd),
                ];
                let tail = self.lora(cx, runs, &parts, &b.xn, lin);
                self.product_then(cx, Op::Qkv, lin, &mut b.qkv, tail.as_ref());
                split_qkv(b, tokens, qd, kvd);
            }
            Qkv::Split { q, k, v } => {
                self.quantize_lora(cx, &b.xn, tokens, &[q, k, v]);
                for (p, lin, out) in [
                    (Proj::Q, q, &mut b.q),
                    (Proj::K, k, &mut b.k),
                    (Proj::V, v, &mut b.v),
                ] {
                    let parts = [Part::new(p, 0, lin.rows())];
                    let tail = self.lora(cx, runs, &parts, &b.xn, lin);
                    self.product_then(cx, Op::Qkv, lin, out, tail.as_ref());
                }
            }
        }
    }

    fn linear_lora(&mut self, cx: &mut Cx, a: Adapted, out: &mut Vec<f32>, _: &mut LoraScratch) {
        let Adapted {
            p,
            op,
            lin,
            x,
            n,
            runs,
        } = a;
        self.quantize_lora(cx, x, n, &[lin]);
        let parts = [Part::new(p, 0, lin.rows())];
        let tail = self.lora(cx, runs, &parts, x, lin);
        self.product_then(cx, op, lin, out, tail.as_ref());
    }

    fn gate_up_lora(&mut self, cx: &mut Cx, w: &GateUp, n: usize, b: &mut Bufs, runs: &LoraRuns) {
        let (ff, act) = (cx.c.n_ff, cx.c.ffn_act);
        b.h.resize(n * ff, 0.0);
        match w {
            GateUp::Stacked(lin) => {
                self.quantize_lora(cx, &b.xn, n, &[lin]);
                let parts = [Part::new(Proj::Gate, 0, ff), Part::new(Proj::Up, ff, ff)];
                let tail = self.lora(cx, runs, &parts, &b.xn, lin);
                self.product_then(cx, Op::GateUp, lin, &mut b.g, tail.as_ref());
                for (r, h) in b.g.chunks_exact(2 * ff).zip(b.h.chunks_exact_mut(ff)) {
                    gate(self.isa, act, &r[..ff], &r[ff..], h);
                }
            }
            GateUp::Split { gate: wg, up: wu } => {
                self.quantize_lora(cx, &b.xn, n, &[wg, wu]);
                for (p, lin, out) in [(Proj::Gate, wg, &mut b.g), (Proj::Up, wu, &mut b.u)] {
                    let parts = [Part::new(p, 0, ff)];
                    let tail = self.lora(cx, runs, &parts, &b.xn, lin);
                    self.product_then(cx, Op::GateUp, lin, out, tail.as_ref());
                }
                gate(self.isa, act, &b.g, &b.u, &mut b.h);
            }
            GateUp::SwiGlu(_) => unreachable!("Session::set_lora refuses unprepared layers"),
        }
    }

    fn activate(&self, act: FfnAct, g: &[f32], u: &[f32], h: &mut Vec<f32>) {
        h.resize(g.len(), 0.0);
        gate(self.isa, act, g, u, h);
    }
}

fn gate(isa: Isa, act: FfnAct, g: &[f32], u: &[f32], h: &mut [f32]) {
    match act {
        // The fused SwiGLU kernel's own `silu·mul` (`matmul::swiglu_rows`): a layer whose
        // gate/up was stacked for a LoRA adapter gives, for rows without an active adapter,
        // the bits of the fused matrix (`pocket serve --lora A` answering a request without
        // adapters as `pocket run` without `--lora` does).
        FfnAct::Silu => pocket_kernels::matmul::swiglu_rows(isa, g, u, h),
        FfnAct::GeluTanh => {
            activation::gelu_with(isa, g, h);
            h.iter_mut().zip(u).for_each(|(h, &u)| *h *= u);
        }
    }
}

/// One attention work item: block `block`'s query heads `heads` of KV head `g`, over all
/// its keys or (`segs`) the keys of some segments only.
struct AttnItem {
    block: usize,
    g: usize,
    heads: std::ops::Range<usize>,
    segs: Option<std::ops::Range<usize>>,
}

/// The attention items of a layer: one per block and KV head, claimed as the threads go
/// (later tokens see more keys, so a static split would be uneven; claiming evens it
/// out). Fewer than two items a thread (decode, a verify step; gemma3's one KV head): each
/// is split, by its keys at segment boundaries when the cache spans several segments (each
/// key converted once; the segments are merged in order: the same bits as one item), else
/// by its query heads. Why blocks of 32 tokens: every item converts (f16 -> f32) and
/// transposes the keys and values it sees, once for its rows; with 8-token blocks that was
/// as much work as the scores on SmolLM2 (3 heads a group): attention in pp512 0.28-0.30
/// -> 0.18-0.19 ms/token at 32, 64 no better (Zen5 VM, breakdown, interleaved).
fn attention_items(
    blocks: &[std::ops::Range<usize>],
    pos0: impl Fn(&std::ops::Range<usize>) -> usize,
    window: usize,
    n_kv: usize,
    group: usize,
    threads: usize,
) -> Vec<AttnItem> {
    let nb = blocks.len();
    let split = if nb * n_kv >= 2 * threads {
        1
    } else {
        (2 * threads).div_ceil(nb * n_kv)
    };
    let mut items = Vec::new();
    for (block, tb) in blocks.iter().enumerate() {
        let segs = pocket_kernels::attention::segments(pos0(tb), tb.len(), window);
        for g in 0..n_kv {
            if split > 1 && segs.len() >= 2 {
                let parts = split.min(segs.len());
                for p in 0..parts {
                    let r = ThreadPool::split(segs.len(), parts, p);
                    items.push(AttnItem {
                        block,
                        g,
                        heads: 0..group,
                        segs: Some(segs.start + r.start..segs.start + r.end),
                    });
                }
            } else {
                let parts = split.min(group);
                for p in 0..parts {
                    items.push(AttnItem {
                        block,
                        g,
                        heads: ThreadPool::split(group, parts, p),
                        segs: None,
                    });
                }
            }
        }
    }
    items
}
