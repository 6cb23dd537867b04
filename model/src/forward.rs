//! The forward pass of the decoder-only transformers pocket runs (llama, qwen2, qwen3,
//! gemma3), one layer top to bottom:
//!
//! RMSNorm → Q/K/V (fused when packed; qwen2 biases) → per-head q/k RMSNorm (qwen3,
//! gemma3) → RoPE (normal for llama, neox otherwise; gemma3's local layers have their own
//! base) → K/V into the cache → grouped-query attention (sliding window on gemma3's local
//! layers) → output projection → (gemma3: post-attention norm) → residual → RMSNorm →
//! gated FFN (SiLU, or GELU-tanh for gemma3) → down → (gemma3: post-FFN norm) → residual.
//! Then, for the rows that need logits only: final RMSNorm → LM head (→ softcap).
//!
//! A batch of tokens (prefill) goes through each matrix as one gemm; one token (decode)
//! as gemv split by output panels. Every matmul / attention step is one pool `run` (decode:
//! QKV, attention, output, gate/up, down per layer). Element-wise ops are the SIMD
//! `pocket_kernels::ops`; RoPE reads per-session cos/sin tables. In the last layer only
//! the rows that need logits go past the KV-cache write.

mod exact;
mod model;
mod sequences;

pub use model::{Model, SessionOptions};

use std::ops::Range;
use std::sync::Mutex;
use std::time::Instant;

use pocket_kernels::ops::rope::{RopeMode, RopeTable};
use pocket_kernels::ops::{activation, norm, rope};
use pocket_kernels::{formats, Isa};

use crate::attention::{attend_block, AttnScratch};
use crate::batch::{Batch, BatchRow, SeqId};
use crate::config::{Config, ConfigError, FfnAct, RopeType};
use crate::gguf::GgufError;
use crate::kv_cache::{KvCache, KvType};
use crate::linear::{Input, Linear};
use crate::profile::{mark, Breakdown, Op};
use crate::threadpool::ThreadPool;
use crate::tokenizer::TokenizerError;
use crate::weights::{GateUp, Numerics, Qkv, WeightError};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("{need} tokens do not fit in the context of {n_ctx} (raise -c / n_ctx)")]
    ContextFull { need: usize, n_ctx: usize },
    #[error("token id {0} is outside the vocabulary of {1}")]
    BadToken(u32, usize),
    #[error("you need at least {need} tokens to evaluate perplexity with a context of {n_ctx}; the text tokenizes to {got}")]
    TooFewTokens {
        need: usize,
        n_ctx: usize,
        got: usize,
    },
    #[error("no tokens to evaluate")]
    Empty,
    #[error("{0}")]
    KvType(String),
    #[error("ggml numerics cannot run this model: {0}")]
    Numerics(String),
    #[error(transparent)]
    LogitsFile(#[from] crate::kld::LogitsFileError),
    #[error(
        "batch row {row}: sequence {seq} does not exist (the session holds {n_seq}; raise n_seq)"
    )]
    BadSeq {
        row: usize,
        seq: SeqId,
        n_seq: usize,
    },
    #[error("batch row {row}: position {pos} of sequence {seq}, which is at position {next} (positions continue the sequence; truncate it first)")]
    BadPos {
        row: usize,
        seq: SeqId,
        pos: usize,
        next: usize,
    },
    #[error("{0}")]
    Io(String),
}

pub type Result<T> = std::result::Result<T, ModelError>;

/// Activations of one forward call (resized per batch, reused).
#[derive(Default)]
struct Bufs {
    x: Vec<f32>,
    xn: Vec<f32>,
    qkv: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    h: Vec<f32>,
    logits: Vec<f32>,
    inp: Input,
    /// One attention scratch per pool thread.
    scratch: Vec<Mutex<(AttnScratch, Vec<f32>)>>,
}

/// One sequence of a session: its KV cache and the tokens in it (its length is the
/// position of its next token).
pub(crate) struct Sequence {
    cache: KvCache,
    tokens: Vec<u32>,
}

/// The sequences being evaluated (sequence 0 unless a batch names others): their KV
/// caches, the thread pool and buffers.
pub struct Session<'m> {
    pub model: &'m Model,
    seqs: Vec<Sequence>,
    pool: ThreadPool,
    b: Bufs,
    /// RoPE cos/sin tables (one per distinct base) and each layer's table.
    ropes: Vec<RopeTable>,
    rope_of: Vec<usize>,
    /// `prefill` returns logits for every prompt row, not only the last.
    pub logits_all: bool,
    /// Per-operation accounting, when on ([`Session::set_breakdown`]).
    prof: Option<Box<Breakdown>>,
}

impl<'m> Session<'m> {
    /// Panics if a KV cache type does not fit the model's head size; see [`Session::try_new`].
    pub fn new(model: &'m Model, o: SessionOptions) -> Session<'m> {
        Self::try_new(model, o).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A session, or an error when a KV cache type cannot store this model's heads.
    pub fn try_new(model: &'m Model, o: SessionOptions) -> Result<Session<'m>> {
        let c = &model.config;
        for ty in [o.type_k, o.type_v] {
            ty.check(c.head_dim).map_err(ModelError::KvType)?;
        }
        if model.numerics == Numerics::Ggml && (o.type_k, o.type_v) != (KvType::F16, KvType::F16) {
            return Err(ModelError::Numerics(
                "its attention twin reads an f16 KV cache (drop -ctk/-ctv)".into(),
            ));
        }
        let n_ctx = o.n_ctx.max(1);
        let mut bases: Vec<f32> = Vec::new();
        let rope_of = (0..c.n_layer)
            .map(|l| {
                let b = c.rope_base_of(l);
                bases.iter().position(|&x| x == b).unwrap_or_else(|| {
                    bases.push(b);
                    bases.len() - 1
                })
            })
            .collect();
        let ropes = bases
            .iter()
            .map(|&b| RopeTable::with_freq_scale(c.n_rot, b, c.rope_freq_scale, n_ctx))
            .collect();
        let pool = ThreadPool::with_placement(o.n_threads, o.pin, o.placement);
        let b = Bufs {
            scratch: (0..pool.threads()).map(|_| Mutex::default()).collect(),
            ..Bufs::default()
        };
        let seqs = (0..o.n_seq.max(1))
            .map(|_| Sequence {
                cache: KvCache::with_types(c.n_layer, n_ctx, c.kv_dim(), o.type_k, o.type_v),
                tokens: Vec::new(),
            })
            .collect();
        Ok(Session {
            model,
            seqs,
            pool,
            b,
            ropes,
            rope_of,
            logits_all: false,
            prof: None,
        })
    }

    /// Turns per-operation accounting on (fresh counters) or off.
    pub fn set_breakdown(&mut self, on: bool) {
        self.prof = on.then(Box::default);
    }
    /// The per-operation accounting so far, when on.
    pub fn breakdown(&self) -> Option<&Breakdown> {
        self.prof.as_deref()
    }
    pub fn breakdown_mut(&mut self) -> Option<&mut Breakdown> {
        self.prof.as_deref_mut()
    }
    /// The logits the last forward call returned.
    pub fn last_logits(&self) -> &[f32] {
        &self.b.logits
    }

    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Evaluates the prompt in one batch; returns the last row's logits (every row's,
    /// `n_vocab` each, when `logits_all`).
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        let n = tokens.len();
        if n == 0 {
            return Err(ModelError::Empty);
        }
        let want = if self.logits_all { 0..n } else { n - 1..n };
        self.forward(tokens, want)
    }

    /// Evaluates one token; returns its logits.
    pub fn decode(&mut self, token: u32) -> Result<&[f32]> {
        self.forward(&[token], 0..1)
    }

    /// Evaluates `tokens` of sequence 0 at its next positions; returns the logits of the
    /// rows in `want` (row-major, `n_vocab` each). Fails before any work if they do not fit.
    pub fn forward(&mut self, tokens: &[u32], want: Range<usize>) -> Result<&[f32]> {
        assert!(want.end <= tokens.len());
        let batch = Batch::sequence(tokens, self.seq_len(0), 0, want);
        self.forward_batch(&batch)
    }

    /// Evaluates every row of `batch` (rows of one or several sequences, each continuing
    /// its sequence); returns the logits of the rows that ask for them, in batch order.
    /// Fails before any work on a bad row (unknown sequence, token or position, or a full
    /// context).
    pub fn forward_batch(&mut self, batch: &Batch) -> Result<&[f32]> {
        self.check_batch(batch)?;
        if self.model.numerics == Numerics::Ggml {
            let (tokens, want) = exact::one_sequence(batch)?;
            return self.forward_exact(&tokens, want);
        }
        let m = self.model;
        let c = &m.config;
        let rows = &batch.rows[..];
        let t_n = rows.len();
        let want = batch.logit_rows();
        let (e, qd, kvd, hd, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.head_dim, c.n_ff);
        let isa = m.isa;
        let Session {
            seqs,
            pool,
            b,
            ropes,
            rope_of,
            prof,
            ..
        } = self;
        if let Some(p) = prof {
            p.begin(t_n);
        }
        let mode = match c.rope_type {
            RopeType::Normal => RopeMode::Normal,
            RopeType::Neox => RopeMode::Neox,
        };
        // Rows still live: every batch row until the last layer's attention, then only
        // the rows that need logits (`trimmed`).
        let mut tn = t_n;
        let mut trimmed = false;

        // Embeddings.
        let (ety, edata) = (m.weights.tok_embd.0, &m.weights.tok_embd.1[..]);
        let rb = ety.row_bytes(e as u64).unwrap() as usize;
        b.x.resize(t_n * e, 0.0);
        for (t, r) in rows.iter().enumerate() {
            let row = &mut b.x[t * e..(t + 1) * e];
            let tok = r.token as usize;
            formats::dequantize(ety, &edata[tok * rb..(tok + 1) * rb], row).expect("validated");
            if c.embd_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= c.embd_scale);
            }
        }
        // Each looked-up row faults in the kernel's whole fault-around window (64 KiB) of
        // the map: 512 random tokens left ~32 MB resident for 0.5 MB read. Nothing else
        // reads these pages, so drop them again (one madvise, tens of microseconds).
        if m.release_embd {
            m.file.release_pages(edata);
        }
        mark(prof, Op::Other);

        for (l, w) in m.weights.layers.iter().enumerate() {
            // Attention block.
            norm_rows(isa, &b.x, &w.attn_norm, c.eps, &mut b.xn, e);
            mark(prof, Op::NormRope);
            b.q.resize(t_n * qd, 0.0);
            b.k.resize(t_n * kvd, 0.0);
            b.v.resize(t_n * kvd, 0.0);
            match &w.qkv {
                Qkv::Fused(lin) => {
                    let w3 = qd + 2 * kvd;
                    b.inp.set(&b.xn, t_n, &[lin]);
                    mark(prof, Op::ActQuant);
                    matrix(prof, Op::Qkv, &[lin], t_n);
                    b.qkv.resize(t_n * w3, 0.0);
                    lin.forward(pool, &b.inp, &mut b.qkv, isa);
                    for t in 0..t_n {
                        let r = &b.qkv[t * w3..(t + 1) * w3];
                        b.q[t * qd..(t + 1) * qd].copy_from_slice(&r[..qd]);
                        b.k[t * kvd..(t + 1) * kvd].copy_from_slice(&r[qd..qd + kvd]);
                        b.v[t * kvd..(t + 1) * kvd].copy_from_slice(&r[qd + kvd..]);
                    }
                }
                Qkv::Split { q, k, v } => {
                    b.inp.set(&b.xn, t_n, &[q, k, v]);
                    mark(prof, Op::ActQuant);
                    matrix(prof, Op::Qkv, &[q, k, v], t_n);
                    q.forward(pool, &b.inp, &mut b.q, isa);
                    k.forward(pool, &b.inp, &mut b.k, isa);
                    v.forward(pool, &b.inp, &mut b.v, isa);
                }
            }
            mark(prof, Op::Qkv);
            let table = &ropes[rope_of[l]];
            let norm = |x: &mut [f32], w: &[f32]| norm::rms_norm_heads_with(isa, x, w, c.eps);
            let rot = |x: &mut [f32], pos: usize| rope::rope_with(isa, mode, x, hd, table, pos);
            qk_into_cache(c, w, l, rows, b, seqs, norm, rot);
            mark(prof, Op::NormRope);
            // The last layer attends (and goes on) with the rows that need logits only.
            let ts: Vec<usize> = if l + 1 == c.n_layer && !want.is_empty() && want.len() < t_n {
                trimmed = true;
                want.clone()
            } else {
                (0..t_n).collect()
            };
            let nt = ts.len();
            b.att.resize(nt * qd, 0.0);
            if nt > 0 {
                let group = c.group();
                let gw = group * hd;
                let n_kv = c.n_head_kv;
                let window = c.window_of(l);
                let nth = pool.threads();
                // Work items (block of up to BT consecutive tokens of one sequence, KV head,
                // part of its query heads), dealt round-robin (later tokens see more keys).
                // Few items (decode; one KV head, gemma3): the group's query heads are split
                // so every thread has work.
                const BT: usize = 8;
                let blocks = batch.runs(&ts, BT);
                let nb = blocks.len();
                let parts = if nb * n_kv >= 2 * nth {
                    1
                } else {
                    (2 * nth).div_ceil(nb * n_kv).min(group)
                };
                let items = nb * n_kv * parts;
                // Items write disjoint (row, head-range) pieces of `att`; the copy is tiny
                // beside the attention, so a lock per item costs nothing measurable.
                let out = Mutex::new(&mut b.att[..]);
                let (q, seqs, scratch, ts) = (&b.q, &*seqs, &b.scratch, &ts);
                pool.run(|i| {
                    let mut guard = scratch[i].lock().unwrap();
                    let (s, o) = &mut *guard;
                    let mut idx = i;
                    while idx < items {
                        let (blk, rest) = (idx / (n_kv * parts), idx % (n_kv * parts));
                        let (g, p) = (rest / parts, rest % parts);
                        let hr = ThreadPool::split(group, parts, p);
                        let tb = blocks[blk].clone();
                        let first = &rows[ts[tb.start]];
                        let t = ts[tb.start];
                        let (a, len) = (g * gw + hr.start * hd, hr.len() * hd);
                        o.resize(tb.len() * len, 0.0);
                        attend_block(
                            &seqs[first.seq].cache,
                            l,
                            g,
                            hd,
                            &q[t * qd + a..],
                            qd,
                            len,
                            first.pos,
                            window,
                            c.attn_scale,
                            o,
                            s,
                            isa,
                        );
                        let mut att = out.lock().unwrap();
                        for (k, r) in o.chunks_exact(len).enumerate() {
                            att[(tb.start + k) * qd + a..][..len].copy_from_slice(r);
                        }
                        drop(att);
                        idx += nth;
                    }
                });
            }
            mark(prof, Op::Attention);
            if trimmed {
                for (j, &t) in ts.iter().enumerate() {
                    b.x.copy_within(t * e..(t + 1) * e, j * e);
                }
                b.x.truncate(nt * e);
                tn = nt;
            }
            b.inp.set(&b.att, tn, &[&w.wo]);
            mark(prof, Op::ActQuant);
            b.o.resize(tn * e, 0.0);
            w.wo.forward(pool, &b.inp, &mut b.o, isa);
            matrix(prof, Op::OutProj, &[&w.wo], tn);
            mark(prof, Op::OutProj);
            if let Some(pn) = &w.post_attn_norm {
                for r in b.o.chunks_exact_mut(e) {
                    norm::rms_norm_inplace_with(isa, r, pn, c.eps);
                }
            }
            add(&mut b.x, &b.o);

            // Feed-forward block.
            norm_rows(isa, &b.x, &w.ffn_norm, c.eps, &mut b.xn, e);
            mark(prof, Op::NormRope);
            b.h.resize(tn * ff, 0.0);
            match &w.gate_up {
                GateUp::SwiGlu(lin) => {
                    b.inp.set(&b.xn, tn, &[lin]);
                    mark(prof, Op::ActQuant);
                    matrix(prof, Op::GateUp, &[lin], tn);
                    lin.forward(pool, &b.inp, &mut b.h, isa);
                }
                GateUp::Stacked(lin) => {
                    b.inp.set(&b.xn, tn, &[lin]);
                    mark(prof, Op::ActQuant);
                    matrix(prof, Op::GateUp, &[lin], tn);
                    b.g.resize(tn * 2 * ff, 0.0);
                    lin.forward(pool, &b.inp, &mut b.g, isa);
                    for t in 0..tn {
                        let r = &b.g[t * 2 * ff..(t + 1) * 2 * ff];
                        gate(
                            isa,
                            c.ffn_act,
                            &r[..ff],
                            &r[ff..],
                            &mut b.h[t * ff..(t + 1) * ff],
                        );
                    }
                }
                GateUp::Split { gate: wg, up: wu } => {
                    b.inp.set(&b.xn, tn, &[wg, wu]);
                    mark(prof, Op::ActQuant);
                    matrix(prof, Op::GateUp, &[wg, wu], tn);
                    b.g.resize(tn * ff, 0.0);
                    b.u.resize(tn * ff, 0.0);
                    wg.forward(pool, &b.inp, &mut b.g, isa);
                    wu.forward(pool, &b.inp, &mut b.u, isa);
                    gate(isa, c.ffn_act, &b.g, &b.u, &mut b.h);
                }
            }
            mark(prof, Op::GateUp);
            b.inp.set(&b.h, tn, &[&w.down]);
            mark(prof, Op::ActQuant);
            w.down.forward(pool, &b.inp, &mut b.o, isa);
            matrix(prof, Op::Down, &[&w.down], tn);
            mark(prof, Op::Down);
            if let Some(pn) = &w.post_ffw_norm {
                for r in b.o.chunks_exact_mut(e) {
                    norm::rms_norm_inplace_with(isa, r, pn, c.eps);
                }
            }
            add(&mut b.x, &b.o);
            mark(prof, Op::NormRope);
        }
        for r in rows {
            seqs[r.seq].tokens.push(r.token);
        }

        // Logits for the wanted rows only.
        let nw = want.len();
        if nw == 0 {
            b.logits.clear();
            mark(prof, Op::Other);
            return Ok(&b.logits);
        }
        b.xn.resize(nw * e, 0.0);
        let at: Vec<usize> = if trimmed { (0..nw).collect() } else { want };
        for (j, t) in at.into_iter().enumerate() {
            norm::rms_norm_with(
                isa,
                &b.x[t * e..(t + 1) * e],
                &m.weights.output_norm,
                c.eps,
                &mut b.xn[j * e..(j + 1) * e],
            );
        }
        let head: &Linear = &m.weights.output;
        mark(prof, Op::NormRope);
        b.inp.set(&b.xn, nw, &[head]);
        mark(prof, Op::ActQuant);
        b.logits.resize(nw * c.n_vocab, 0.0);
        head.forward(pool, &b.inp, &mut b.logits, isa);
        if c.final_logit_softcap > 0.0 {
            let s = c.final_logit_softcap;
            b.logits.iter_mut().for_each(|v| *v = (*v / s).tanh() * s);
        }
        matrix(prof, Op::Head, &[head], nw);
        mark(prof, Op::Head);
        Ok(&b.logits)
    }
}

/// Counts the weights and arithmetic of `lins` on `tokens` rows when accounting is on.
#[inline(always)]
fn matrix(p: &mut Option<Box<Breakdown>>, op: Op, lins: &[&Linear], tokens: usize) {
    if let Some(p) = p {
        for l in lins {
            p.matrix(op, l.weight_bytes(), l.macs(), 1, tokens);
        }
    }
}

fn norm_rows(isa: Isa, x: &[f32], w: &[f32], eps: f32, out: &mut Vec<f32>, e: usize) {
    out.resize(x.len(), 0.0);
    for (xr, or) in x.chunks_exact(e).zip(out.chunks_exact_mut(e)) {
        norm::rms_norm_with(isa, xr, w, eps, or);
    }
}

/// Between the Q/K/V projections and attention, for both forward passes: the biases
/// (qwen2), then per row the per-head q/k norms (qwen3, gemma3) and RoPE, and K/V into its
/// sequence's cache at its position. `norm` and `rope` are the pass's own kernels.
#[allow(clippy::too_many_arguments)]
fn qk_into_cache(
    c: &Config,
    w: &crate::weights::Layer,
    l: usize,
    rows: &[BatchRow],
    b: &mut Bufs,
    seqs: &mut [Sequence],
    norm: impl Fn(&mut [f32], &[f32]),
    rope: impl Fn(&mut [f32], usize),
) {
    let (qd, kvd) = (c.q_dim(), c.kv_dim());
    if let Some([bq, bk, bv]) = &w.bias {
        add_rows(&mut b.q, bq);
        add_rows(&mut b.k, bk);
        add_rows(&mut b.v, bv);
    }
    for (t, r) in rows.iter().enumerate() {
        let pos = r.pos;
        let qr = &mut b.q[t * qd..(t + 1) * qd];
        if let Some(qn) = &w.q_norm {
            norm(qr, qn);
        }
        rope(qr, pos);
        let kr = &mut b.k[t * kvd..(t + 1) * kvd];
        if let Some(kn) = &w.k_norm {
            norm(kr, kn);
        }
        rope(kr, pos);
        seqs[r.seq]
            .cache
            .write(l, pos, kr, &b.v[t * kvd..(t + 1) * kvd]);
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

fn add_rows(x: &mut [f32], bias: &[f32]) {
    for r in x.chunks_exact_mut(bias.len()) {
        add(r, bias);
    }
}

fn gate(isa: Isa, act: FfnAct, g: &[f32], u: &[f32], h: &mut [f32]) {
    match act {
        FfnAct::Silu => activation::swiglu_with(isa, g, u, h),
        FfnAct::GeluTanh => {
            activation::gelu_with(isa, g, h);
            h.iter_mut().zip(u).for_each(|(h, &u)| *h *= u);
        }
    }
}

/// Wall-clock milliseconds since `t`.
pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
