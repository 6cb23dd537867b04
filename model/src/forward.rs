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
//! as gemv split by output panels. Every matmul / attention step is one pool `run`.

use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use pocket_kernels::{formats, Isa};

use crate::attention::{attend_group, AttnScratch};
use crate::config::{Config, ConfigError, FfnAct};
use crate::gguf::{GgufError, GgufFile};
use crate::kv_cache::{KvCache, KvType};
use crate::linear::{Input, Linear};
use crate::ops_fallback::{gelu_tanh, rms_norm, rms_norm_inplace, rope_apply, rope_cache, silu};
use crate::threadpool::ThreadPool;
use crate::tokenizer::{Tokenizer, TokenizerError};
use crate::weights::{GateUp, LoadOptions, Qkv, WeightError, Weights};

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
}

pub type Result<T> = std::result::Result<T, ModelError>;

pub struct Model<'a> {
    pub config: Config,
    pub weights: Weights<'a>,
    pub tokenizer: Tokenizer,
    pub isa: Isa,
}

impl Model<'static> {
    /// Maps and loads a GGUF model. The mapping lives for the rest of the process (the
    /// generic matrices borrow it zero-copy); use [`Model::from_gguf`] to control its life.
    pub fn load(path: impl AsRef<Path>) -> Result<Model<'static>> {
        Self::load_with(path, LoadOptions::default())
    }

    pub fn load_with(path: impl AsRef<Path>, o: LoadOptions) -> Result<Model<'static>> {
        let file: &'static GgufFile = Box::leak(Box::new(GgufFile::open(path)?));
        Model::from_gguf(file, o)
    }
}

impl<'a> Model<'a> {
    pub fn from_gguf(g: &'a GgufFile, o: LoadOptions) -> Result<Model<'a>> {
        let config = Config::from_gguf(g)?;
        let weights = Weights::load(g, &config, o)?;
        let tokenizer = Tokenizer::from_gguf(g)?;
        Ok(Model {
            config,
            weights,
            tokenizer,
            isa: Isa::active(),
        })
    }
}

#[derive(Clone, Copy, Debug)]
pub struct SessionOptions {
    pub n_ctx: usize,
    pub n_threads: usize,
    pub kv_type: KvType,
    /// Pin pool threads to cores.
    pub pin: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 2048,
            n_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            kv_type: KvType::F16,
            pin: false,
        }
    }
}

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
    cs: Vec<(f32, f32)>,
    inp: Input,
}

/// One sequence being evaluated: its KV cache, thread pool and buffers.
pub struct Session<'m> {
    pub model: &'m Model<'m>,
    cache: KvCache,
    pool: ThreadPool,
    pos: usize,
    b: Bufs,
    /// `prefill` returns logits for every prompt row, not only the last.
    pub logits_all: bool,
}

impl<'m> Session<'m> {
    pub fn new(model: &'m Model<'m>, o: SessionOptions) -> Session<'m> {
        let c = &model.config;
        Session {
            model,
            cache: KvCache::new(c.n_layer, o.n_ctx.max(1), c.kv_dim(), o.kv_type),
            pool: ThreadPool::new(o.n_threads, o.pin),
            pos: 0,
            b: Bufs::default(),
            logits_all: false,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }
    /// Tokens in the cache.
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }
    /// Forgets the sequence (the cache is overwritten in place).
    pub fn clear(&mut self) {
        self.pos = 0;
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

    /// Evaluates `tokens` at the next positions; returns the logits of the batch rows in
    /// `want` (row-major, `n_vocab` each). Fails before any work if they do not fit.
    pub fn forward(&mut self, tokens: &[u32], want: Range<usize>) -> Result<&[f32]> {
        let m = self.model;
        let c = &m.config;
        let t_n = tokens.len();
        if t_n == 0 {
            return Err(ModelError::Empty);
        }
        if self.pos + t_n > self.cache.n_ctx() {
            return Err(ModelError::ContextFull {
                need: self.pos + t_n,
                n_ctx: self.cache.n_ctx(),
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
            return Err(ModelError::BadToken(bad, c.n_vocab));
        }
        assert!(want.end <= t_n);
        let (e, qd, kvd, hd, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.head_dim, c.n_ff);
        let isa = m.isa;
        let pos0 = self.pos;
        let Session { cache, pool, b, .. } = self;

        // Embeddings.
        let (ety, edata) = m.weights.tok_embd;
        let rb = ety.row_bytes(e as u64).unwrap() as usize;
        b.x.resize(t_n * e, 0.0);
        for (t, &tok) in tokens.iter().enumerate() {
            let row = &mut b.x[t * e..(t + 1) * e];
            let tok = tok as usize;
            formats::dequantize(ety, &edata[tok * rb..(tok + 1) * rb], row).expect("validated");
            if c.embd_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= c.embd_scale);
            }
        }
        b.xn.resize(t_n * e, 0.0);

        for (l, w) in m.weights.layers.iter().enumerate() {
            // Attention block.
            norm_rows(&b.x, &w.attn_norm, c.eps, &mut b.xn, e);
            b.q.resize(t_n * qd, 0.0);
            b.k.resize(t_n * kvd, 0.0);
            b.v.resize(t_n * kvd, 0.0);
            match &w.qkv {
                Qkv::Fused(lin) => {
                    let w3 = qd + 2 * kvd;
                    b.inp.set(&b.xn, t_n, &[lin]);
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
                    q.forward(pool, &b.inp, &mut b.q, isa);
                    k.forward(pool, &b.inp, &mut b.k, isa);
                    v.forward(pool, &b.inp, &mut b.v, isa);
                }
            }
            if let Some([bq, bk, bv]) = &w.bias {
                add_rows(&mut b.q, bq);
                add_rows(&mut b.k, bk);
                add_rows(&mut b.v, bv);
            }
            let base = c.rope_base_of(l);
            for t in 0..t_n {
                let pos = pos0 + t;
                rope_cache(pos, c.n_rot, base, c.rope_freq_scale, &mut b.cs);
                for h in b.q[t * qd..(t + 1) * qd].chunks_exact_mut(hd) {
                    if let Some(qn) = &w.q_norm {
                        rms_norm_inplace(h, qn, c.eps);
                    }
                    rope_apply(h, &b.cs, c.rope_type);
                }
                for h in b.k[t * kvd..(t + 1) * kvd].chunks_exact_mut(hd) {
                    if let Some(kn) = &w.k_norm {
                        rms_norm_inplace(h, kn, c.eps);
                    }
                    rope_apply(h, &b.cs, c.rope_type);
                }
                cache.write(
                    l,
                    pos,
                    &b.k[t * kvd..(t + 1) * kvd],
                    &b.v[t * kvd..(t + 1) * kvd],
                );
            }
            b.att.resize(t_n * qd, 0.0);
            {
                let group = c.group();
                let gw = group * hd;
                let n_kv = c.n_head_kv;
                let window = c.window_of(l);
                let chunks: Vec<Mutex<&mut [f32]>> = b.att.chunks_mut(gw).map(Mutex::new).collect();
                let total = chunks.len();
                let nth = pool.threads();
                let (q, cache) = (&b.q, &*cache);
                pool.run(|i| {
                    let mut s = AttnScratch::default();
                    for idx in ThreadPool::split(total, nth, i) {
                        let (t, g) = (idx / n_kv, idx % n_kv);
                        let qs = &q[t * qd + g * gw..t * qd + (g + 1) * gw];
                        let mut out = chunks[idx].lock().unwrap();
                        attend_group(
                            cache,
                            l,
                            g,
                            hd,
                            qs,
                            pos0 + t,
                            window,
                            c.attn_scale,
                            &mut out,
                            &mut s,
                        );
                    }
                });
            }
            b.inp.set(&b.att, t_n, &[&w.wo]);
            b.o.resize(t_n * e, 0.0);
            w.wo.forward(pool, &b.inp, &mut b.o, isa);
            if let Some(pn) = &w.post_attn_norm {
                for r in b.o.chunks_exact_mut(e) {
                    rms_norm_inplace(r, pn, c.eps);
                }
            }
            add(&mut b.x, &b.o);

            // Feed-forward block.
            norm_rows(&b.x, &w.ffn_norm, c.eps, &mut b.xn, e);
            b.h.resize(t_n * ff, 0.0);
            match &w.gate_up {
                GateUp::SwiGlu(lin) => {
                    b.inp.set(&b.xn, t_n, &[lin]);
                    lin.forward(pool, &b.inp, &mut b.h, isa);
                }
                GateUp::Stacked(lin) => {
                    b.inp.set(&b.xn, t_n, &[lin]);
                    b.g.resize(t_n * 2 * ff, 0.0);
                    lin.forward(pool, &b.inp, &mut b.g, isa);
                    for t in 0..t_n {
                        let r = &b.g[t * 2 * ff..(t + 1) * 2 * ff];
                        gate(
                            c.ffn_act,
                            &r[..ff],
                            &r[ff..],
                            &mut b.h[t * ff..(t + 1) * ff],
                        );
                    }
                }
                GateUp::Split { gate: wg, up: wu } => {
                    b.inp.set(&b.xn, t_n, &[wg, wu]);
                    b.g.resize(t_n * ff, 0.0);
                    b.u.resize(t_n * ff, 0.0);
                    wg.forward(pool, &b.inp, &mut b.g, isa);
                    wu.forward(pool, &b.inp, &mut b.u, isa);
                    gate(c.ffn_act, &b.g, &b.u, &mut b.h);
                }
            }
            b.inp.set(&b.h, t_n, &[&w.down]);
            w.down.forward(pool, &b.inp, &mut b.o, isa);
            if let Some(pn) = &w.post_ffw_norm {
                for r in b.o.chunks_exact_mut(e) {
                    rms_norm_inplace(r, pn, c.eps);
                }
            }
            add(&mut b.x, &b.o);
        }
        self.pos += t_n;

        // Logits for the wanted rows only.
        let nw = want.len();
        if nw == 0 {
            b.logits.clear();
            return Ok(&b.logits);
        }
        b.xn.resize(nw * e, 0.0);
        for (j, t) in want.enumerate() {
            rms_norm(
                &b.x[t * e..(t + 1) * e],
                &m.weights.output_norm,
                c.eps,
                &mut b.xn[j * e..(j + 1) * e],
            );
        }
        let head: &Linear = &m.weights.output;
        b.inp.set(&b.xn, nw, &[head]);
        b.logits.resize(nw * c.n_vocab, 0.0);
        head.forward(pool, &b.inp, &mut b.logits, isa);
        if c.final_logit_softcap > 0.0 {
            let s = c.final_logit_softcap;
            b.logits.iter_mut().for_each(|v| *v = (*v / s).tanh() * s);
        }
        Ok(&b.logits)
    }
}

fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], e: usize) {
    for (xr, or) in x.chunks_exact(e).zip(out.chunks_exact_mut(e)) {
        rms_norm(xr, w, eps, or);
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

fn gate(act: FfnAct, g: &[f32], u: &[f32], h: &mut [f32]) {
    match act {
        FfnAct::Silu => {
            for ((h, &g), &u) in h.iter_mut().zip(g).zip(u) {
                *h = silu(g) * u;
            }
        }
        FfnAct::GeluTanh => {
            for ((h, &g), &u) in h.iter_mut().zip(g).zip(u) {
                *h = gelu_tanh(g) * u;
            }
        }
    }
}

/// Wall-clock milliseconds since `t`.
pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
