//! The layer walker: the forward pass written once, for every architecture and both
//! numerics. It reads top to bottom as the model computes:
//!
//! embed → for each layer: [`attention_block`], [`ffn_block`] → [`head`].
//!
//! What differs between pocket's kernels and the ggml twins (how a matrix, a norm, RoPE or
//! attention is computed) is a [`LayerOps`]; what is reported (time breakdown, tensor
//! traces) goes through one [`Observer`].

use pocket_kernels::formats;
use pocket_kernels::ops::rope::RopeTable;

use super::observe::Observer;
use super::{Bufs, Sequence};
use crate::batch::{Batch, BatchRow};
use crate::config::{Config, FfnAct};
use crate::linear::Linear;
use crate::lora::apply::{add_all, Dest, LoraRuns, LoraScratch};
use crate::lora::{LoraSet, Proj};
use crate::profile::Op;
use crate::threadpool::ThreadPool;
use crate::weights::{GateUp, Layer, Qkv};
use crate::Model;

/// A projection's product with its adapters ([`LayerOps::linear_lora`]): `x` (`n` rows) ·
/// `lin`ᵀ, counted as `op`, plus the low-rank products of projection `p` for the rows'
/// adapters `runs`.
pub(super) struct Adapted<'a> {
    pub p: Proj,
    pub op: Op,
    pub lin: &'a Linear,
    pub x: &'a [f32],
    pub n: usize,
    pub runs: &'a LoraRuns<'a>,
}

/// The operations of one numerics.
pub(super) trait LayerOps {
    /// Whether the last layer attends and goes on with the rows that need logits only.
    /// Pocket's kernels give a row the same result whatever else is in the batch, so
    /// dropping rows changes nothing; ggml's kernels pick their paths by row count, so its
    /// twin keeps every row, as llama.cpp does through attention.
    fn trims_last_layer(&self) -> bool;
    /// `out` = the row `x` RMS-normed and scaled by `w`.
    fn norm_row(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]);
    /// The same in place.
    fn norm_row_inplace(&self, x: &mut [f32], w: &[f32], eps: f32);
    /// `out` = each row of `x` RMS-normed and scaled by `w` (rows of `w.len()`).
    fn norm_rows(&self, x: &[f32], w: &[f32], eps: f32, out: &mut Vec<f32>) {
        out.resize(x.len(), 0.0);
        for (xr, or) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
            self.norm_row(xr, w, eps, or);
        }
    }
    /// The same in place (gemma3's post-attention / post-FFN norms).
    fn norm_rows_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) {
        for r in x.chunks_exact_mut(w.len()) {
            self.norm_row_inplace(r, w, eps);
        }
    }
    /// Per-head RMSNorm of one row (qwen3 and gemma3's q/k norms).
    fn norm_heads(&self, x: &mut [f32], w: &[f32], eps: f32);
    /// RoPE of one row's heads at `pos`.
    fn rope(&self, x: &mut [f32], table: &RopeTable, pos: usize);
    /// `b.q`, `b.k`, `b.v` from the normed rows `b.xn`.
    fn qkv(&mut self, cx: &mut Cx, w: &Qkv, tokens: usize, b: &mut Bufs);
    /// Attention of the rows `job.live` into `att` (`live.len() × q_dim`).
    fn attention(&mut self, cx: &mut Cx, job: &AttnJob, q: &mut [f32], att: &mut Vec<f32>);
    /// `out = x · wᵀ` for `n` rows; counts it as `op`.
    fn linear(&mut self, cx: &mut Cx, op: Op, w: &Linear, x: &[f32], n: usize, out: &mut Vec<f32>);
    /// The gated FFN's hidden rows `b.h` from the normed rows `b.xn`.
    fn gate_up(&mut self, cx: &mut Cx, w: &GateUp, tokens: usize, b: &mut Bufs);

    // --- LoRA (model/src/lora): the products with the rows' adapters (`runs`) added,
    // in llama.cpp's `build_lora_mm` order (before qwen2's biases; gate and up before the
    // activation). These defaults add them after each base product (`apply::add_all`);
    // pocket's kernels run them inside the product's items (`lora::fused`). An adapted
    // gate/up is stacked or split (`lora::prepare`): the fused SwiGLU kernel writes only
    // `silu(gate)·up`.
    /// [`Self::qkv`] with Q, K and V adapted.
    fn qkv_lora(&mut self, cx: &mut Cx, w: &Qkv, tokens: usize, b: &mut Bufs, runs: &LoraRuns) {
        self.qkv(cx, w, tokens, b);
        let (qd, kvd) = (cx.c.q_dim(), cx.c.kv_dim());
        for (p, out, n) in [
            (Proj::Q, &mut b.q, qd),
            (Proj::K, &mut b.k, kvd),
            (Proj::V, &mut b.v, kvd),
        ] {
            let dest = &mut Dest::rows(out, n);
            add_all(cx.pool, runs, (cx.l, p), &b.xn, dest, &mut b.lora);
        }
    }
    /// [`Self::linear`] of a projection with one input (`wo`, `down`), adapted.
    fn linear_lora(&mut self, cx: &mut Cx, a: Adapted, out: &mut Vec<f32>, s: &mut LoraScratch) {
        self.linear(cx, a.op, a.lin, a.x, a.n, out);
        let dest = &mut Dest::rows(out, a.lin.rows());
        add_all(cx.pool, a.runs, (cx.l, a.p), a.x, dest, s);
    }
    /// [`Self::gate_up`] with gate and up adapted.
    fn gate_up_lora(&mut self, cx: &mut Cx, w: &GateUp, n: usize, b: &mut Bufs, runs: &LoraRuns) {
        let ff = cx.c.n_ff;
        match w {
            GateUp::Split { gate, up } => {
                self.linear(cx, Op::GateUp, gate, &b.xn, n, &mut b.g);
                self.linear(cx, Op::GateUp, up, &b.xn, n, &mut b.u);
            }
            GateUp::Stacked(lin) => {
                self.linear(cx, Op::GateUp, lin, &b.xn, n, &mut b.h);
                b.g.resize(n * ff, 0.0);
                b.u.resize(n * ff, 0.0);
                for (t, r) in b.h.chunks_exact(2 * ff).enumerate() {
                    b.g[t * ff..(t + 1) * ff].copy_from_slice(&r[..ff]);
                    b.u[t * ff..(t + 1) * ff].copy_from_slice(&r[ff..]);
                }
            }
            GateUp::SwiGlu(_) => unreachable!("Session::set_lora refuses unprepared layers"),
        }
        for (p, out) in [(Proj::Gate, &mut b.g), (Proj::Up, &mut b.u)] {
            let dest = &mut Dest::rows(out, ff);
            add_all(cx.pool, runs, (cx.l, p), &b.xn, dest, &mut b.lora);
        }
        self.activate(cx.c.ffn_act, &b.g, &b.u, &mut b.h);
    }
    /// `h = act(g) · u`, as this numerics' `gate_up` computes it.
    fn activate(&self, act: FfnAct, g: &[f32], u: &[f32], h: &mut Vec<f32>);
}

/// What every operation may use: the model's configuration, the pool, the observer.
pub(super) struct Cx<'a, 'p> {
    pub c: &'a Config,
    /// The layer (for traces).
    pub l: usize,
    pub pool: &'a ThreadPool,
    pub obs: &'a mut Observer<'p>,
}

/// One layer's attention: which rows attend, and the caches they read.
pub(super) struct AttnJob<'a> {
    pub l: usize,
    pub batch: &'a Batch,
    /// The rows that attend (indices into `batch.rows`); output row `j` is `live[j]`.
    pub live: &'a [usize],
    pub seqs: &'a [Sequence],
}

/// A session's state as the walker needs it (split borrows of [`super::Session`]).
pub(super) struct Walker<'s, 'p> {
    pub model: &'s Model,
    pub seqs: &'s mut [Sequence],
    pub pool: &'s ThreadPool,
    pub b: &'s mut Bufs,
    pub ropes: &'s [RopeTable],
    pub rope_of: &'s [usize],
    pub obs: Observer<'p>,
    /// The adapters each sequence applies (all empty: the base model).
    pub lora: &'s [LoraSet],
}

impl Walker<'_, '_> {
    /// Evaluates every row of `batch` (checked); leaves the logits of the rows that ask
    /// for them in `b.logits`, in batch order.
    pub fn run<O: LayerOps>(&mut self, ops: &mut O, batch: &Batch) {
        let m = self.model;
        let c = &m.config;
        let rows = &batch.rows[..];
        self.embed(rows);
        self.obs.mark(Op::Other);
        let want = batch.logit_rows();
        // The rows still live: all of them, until the last layer of a numerics that trims.
        let mut live: Vec<usize> = (0..rows.len()).collect();
        let runs_all = LoraRuns::new(self.lora, rows.iter().map(|r| r.seq));
        let mut runs_live = None;
        for (l, w) in m.weights.layers.iter().enumerate() {
            let last = l + 1 == c.n_layer;
            if last && ops.trims_last_layer() && !want.is_empty() && want.len() < rows.len() {
                live = want.clone();
            }
            // LoRA: the rows' adapters, of all rows and of the live ones.
            let trimmed = live.len() < rows.len();
            if trimmed && runs_live.is_none() {
                runs_live = Some(LoraRuns::new(self.lora, live.iter().map(|&t| rows[t].seq)));
            }
            let runs_live = runs_live.as_ref().unwrap_or(&runs_all);
            self.attention_block(ops, l, w, batch, &live, [&runs_all, runs_live]);
            self.ffn_block(ops, l, w, live.len(), runs_live);
        }
        for r in rows {
            self.seqs[r.seq].tokens.push(r.token);
        }
        // `x` holds the live rows; the wanted ones among them go to the head.
        let at: Vec<usize> = want
            .iter()
            .map(|t| live.binary_search(t).expect("wanted rows stay live"))
            .collect();
        self.head(ops, &at);
    }

    fn embed(&mut self, rows: &[BatchRow]) {
        let (m, b) = (self.model, &mut *self.b);
        let (c, e) = (&m.config, m.config.n_embd);
        let (ety, edata) = (m.weights.tok_embd.0, &m.weights.tok_embd.1[..]);
        let rb = ety.row_bytes(e as u64).unwrap() as usize;
        b.x.resize(rows.len() * e, 0.0);
        for (r, row) in rows.iter().zip(b.x.chunks_exact_mut(e)) {
            let tok = r.token as usize;
            formats::dequantize(ety, &edata[tok * rb..(tok + 1) * rb], row).expect("validated");
            if c.embd_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= c.embd_scale);
            }
            // Each looked-up row maps more of the file than it reads: at least the
            // kernel's fault-around window (64 KiB), and with the file in the page cache
            // as large folios (Linux 6.18, ext4, after a sequential read) up to 2 MiB: 512
            // random tokens of gemma3's 262144-row table briefly held 100-165 MB resident
            // for 0.3 MB read, the whole prefill peak-RSS excess over llama.cpp. Nothing
            // else reads these pages, so each row's folio span is dropped as soon as the
            // row is read (one small madvise a row). Dropping the whole table every 16
            // rows instead still let 16 rows' folios pile up: +20-25 MiB of peak RSS in a
            // prefill of the MNN-Pocket shape, enough to put its Q8_0 pp512 above
            // llama.cpp's.
            if m.release_embd {
                m.file
                    .release_around(&edata[tok * rb..(tok + 1) * rb], edata);
            }
        }
    }

    /// norm → Q/K/V → q/k norm, RoPE, into the cache → attention of the live rows →
    /// output projection → (post-norm) → residual. Leaves `x` with the live rows only.
    fn attention_block<O: LayerOps>(
        &mut self,
        ops: &mut O,
        l: usize,
        w: &Layer,
        batch: &Batch,
        live: &[usize],
        [runs_all, runs_live]: [&LoraRuns; 2],
    ) {
        let c = &self.model.config;
        let Walker {
            seqs, pool, b, obs, ..
        } = self;
        let t_n = b.x.len() / c.n_embd;
        let mut cx = Cx { c, l, pool, obs };
        ops.norm_rows(&b.x, &w.attn_norm, c.eps, &mut b.xn);
        cx.obs.step(Op::NormRope, "attn_norm", l, &b.xn);
        if runs_all.touches(l, &[Proj::Q, Proj::K, Proj::V]) {
            ops.qkv_lora(&mut cx, &w.qkv, t_n, b, runs_all);
        } else {
            ops.qkv(&mut cx, &w.qkv, t_n, b);
        }
        cx.obs.mark(Op::Qkv);
        let table = &self.ropes[self.rope_of[l]];
        qk_into_cache(ops, c, w, l, &batch.rows, b, seqs, table);
        cx.obs.step(Op::NormRope, "Qcur", l, &b.q);
        cx.obs.step(Op::NormRope, "Kcur", l, &b.k);
        cx.obs.step(Op::NormRope, "Vcur", l, &b.v);
        let job = AttnJob {
            l,
            batch,
            live,
            seqs,
        };
        ops.attention(&mut cx, &job, &mut b.q, &mut b.att);
        cx.obs.step(Op::Attention, "kqv_out", l, &b.att);
        let e = c.n_embd;
        if live.len() < t_n {
            for (j, &t) in live.iter().enumerate() {
                b.x.copy_within(t * e..(t + 1) * e, j * e);
            }
            b.x.truncate(live.len() * e);
        }
        if runs_live.touches(l, &[Proj::Out]) {
            let (p, op, runs) = (Proj::Out, Op::OutProj, runs_live);
            let (lin, x, n) = (&w.wo, &b.att[..], live.len());
            let a = Adapted {
                p,
                op,
                lin,
                x,
                n,
                runs,
            };
            ops.linear_lora(&mut cx, a, &mut b.o, &mut b.lora);
        } else {
            ops.linear(&mut cx, Op::OutProj, &w.wo, &b.att, live.len(), &mut b.o);
        }
        let names = ["attn_out", "attn_post_norm", "sa_out"];
        residual_add(ops, &mut cx, b, Op::OutProj, &w.post_attn_norm, names);
    }

    /// norm → gate/up → activation → down → (post-norm) → residual.
    fn ffn_block<O: LayerOps>(
        &mut self,
        ops: &mut O,
        l: usize,
        w: &Layer,
        tn: usize,
        lora: &LoraRuns,
    ) {
        let c = &self.model.config;
        let Walker { pool, b, obs, .. } = self;
        let mut cx = Cx { c, l, pool, obs };
        ops.norm_rows(&b.x, &w.ffn_norm, c.eps, &mut b.xn);
        cx.obs.step(Op::NormRope, "ffn_norm", l, &b.xn);
        if lora.touches(l, &[Proj::Gate, Proj::Up]) {
            ops.gate_up_lora(&mut cx, &w.gate_up, tn, b, lora);
        } else {
            ops.gate_up(&mut cx, &w.gate_up, tn, b);
        }
        cx.obs.step(Op::GateUp, "ffn_geglu", l, &b.h);
        if lora.touches(l, &[Proj::Down]) {
            let (p, op, lin, x, runs) = (Proj::Down, Op::Down, &w.down, &b.h[..], lora);
            let a = Adapted {
                p,
                op,
                lin,
                x,
                n: tn,
                runs,
            };
            ops.linear_lora(&mut cx, a, &mut b.o, &mut b.lora);
        } else {
            ops.linear(&mut cx, Op::Down, &w.down, &b.h, tn, &mut b.o);
        }
        let names = ["ffn_out", "ffn_post_norm", "l_out"];
        residual_add(ops, &mut cx, b, Op::Down, &w.post_ffw_norm, names);
    }

    /// Final norm → LM head (→ softcap) for rows `at` of `x`.
    fn head<O: LayerOps>(&mut self, ops: &mut O, at: &[usize]) {
        let m = self.model;
        let c = &m.config;
        let Walker { pool, b, obs, .. } = self;
        let e = c.n_embd;
        if at.is_empty() {
            b.logits.clear();
            obs.mark(Op::Other);
            return;
        }
        // Only the wanted rows are normed (`norm_rows` of a gathered copy).
        b.g.clear();
        for &t in at {
            b.g.extend_from_slice(&b.x[t * e..(t + 1) * e]);
        }
        ops.norm_rows(&b.g, &m.weights.output_norm, c.eps, &mut b.xn);
        obs.mark(Op::NormRope);
        let l = c.n_layer;
        let mut cx = Cx { c, l, pool, obs };
        ops.linear(
            &mut cx,
            Op::Head,
            &m.weights.output,
            &b.xn,
            at.len(),
            &mut b.logits,
        );
        if c.final_logit_softcap > 0.0 {
            let s = c.final_logit_softcap;
            b.logits.iter_mut().for_each(|v| *v = (*v / s).tanh() * s);
        }
        cx.obs.mark(Op::Head);
    }
}

/// Between the Q/K/V projections and attention: the biases (qwen2), then per row the
/// per-head q/k norms (qwen3, gemma3) and RoPE, and K/V into its sequence's cache at its
/// position.
#[allow(clippy::too_many_arguments)]
fn qk_into_cache<O: LayerOps>(
    ops: &O,
    c: &Config,
    w: &Layer,
    l: usize,
    rows: &[BatchRow],
    b: &mut Bufs,
    seqs: &mut [Sequence],
    table: &RopeTable,
) {
    let (qd, kvd) = (c.q_dim(), c.kv_dim());
    if let Some([bq, bk, bv]) = &w.bias {
        add_rows(&mut b.q, bq);
        add_rows(&mut b.k, bk);
        add_rows(&mut b.v, bv);
    }
    for (t, r) in rows.iter().enumerate() {
        let qr = &mut b.q[t * qd..(t + 1) * qd];
        if let Some(qn) = &w.q_norm {
            ops.norm_heads(qr, qn, c.eps);
        }
        ops.rope(qr, table, r.pos);
        let kr = &mut b.k[t * kvd..(t + 1) * kvd];
        if let Some(kn) = &w.k_norm {
            ops.norm_heads(kr, kn, c.eps);
        }
        ops.rope(kr, table, r.pos);
        seqs[r.seq]
            .cache
            .write(l, r.pos, kr, &b.v[t * kvd..(t + 1) * kvd]);
    }
}

/// A block's end: its projection `b.o` (counted as `op`), post-normed where the layer has
/// `post_norm` (gemma3), added to the residual stream `b.x`; traced as `names` in turn.
fn residual_add<O: LayerOps>(
    ops: &O,
    cx: &mut Cx,
    b: &mut Bufs,
    op: Op,
    post_norm: &Option<Vec<f32>>,
    names: [&str; 3],
) {
    let l = cx.l;
    cx.obs.step(op, names[0], l, &b.o);
    if let Some(pn) = post_norm {
        ops.norm_rows_inplace(&mut b.o, pn, cx.c.eps);
        cx.obs.step(Op::NormRope, names[1], l, &b.o);
    }
    add(&mut b.x, &b.o);
    cx.obs.step(Op::NormRope, names[2], l, &b.x);
}

pub(super) fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

fn add_rows(x: &mut [f32], bias: &[f32]) {
    for r in x.chunks_exact_mut(bias.len()) {
        add(r, bias);
    }
}
