//! The forward pass of the decoder-only transformers pocket runs (llama, qwen2, qwen3,
//! gemma3), one layer top to bottom:
//!
//! RMSNorm → Q/K/V (fused when packed; qwen2 biases) → per-head q/k RMSNorm (qwen3,
//! gemma3) → RoPE (normal for llama, neox otherwise; gemma3's local layers have their own
//! base) → K/V into the cache → grouped-query attention (sliding window on gemma3's local
//! layers) → output projection → (gemma3: post-attention norm) → residual → RMSNorm →
//! gated FFN (SiLU, or GELU-tanh for gemma3) → down → (gemma3: post-FFN norm) → residual.
//! Then, for the rows that need logits only: final RMSNorm → LM head (→ softcap).
//! A row's logits never depend on the other rows of its batch, in either numerics.
//!
//! Where things are:
//! * this file: [`Session`] (KV caches of its sequences, the pool, buffers) and its
//!   forward calls over a [`Batch`] of rows (token, position, sequence, wants logits);
//! * [`walk`]: the layer walker, the order above written once;
//! * [`fast`] / [`exact`]: the two numerics the walker runs on (pocket's kernels, or the
//!   bit-exact twins of llama.cpp's), chosen when the session is made;
//! * [`observe`]: the one hook for the time breakdown and tensor traces;
//! * [`sequences`]: per-sequence truncate / fork / clear and the batch checks;
//! * [`model`]: [`Model`] (owns its mapped file) and [`SessionOptions`].

mod exact;
mod fast;
mod model;
mod observe;
mod sequences;
mod walk;

pub use model::{Model, SessionOptions};

use std::ops::Range;
use std::time::Instant;

use pocket_kernels::ops::rope::{RopeMode, RopeTable};

use crate::batch::{Batch, SeqId};
use crate::config::{ConfigError, RopeType};
use crate::gguf::GgufError;
use crate::kv_cache::{KvCache, KvType};
use crate::profile::Breakdown;
use crate::threadpool::ThreadPool;
use crate::tokenizer::TokenizerError;
use crate::weights::{Numerics, WeightError};
use exact::GgmlOps;
pub use exact::GgmlUnsupported;
use fast::FastOps;
use observe::Observer;
use walk::Walker;

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
    #[error(transparent)]
    KvType(#[from] crate::kv_cache::KvTypeError),
    #[error("ggml numerics cannot run this model: {0}")]
    Numerics(#[from] GgmlUnsupported),
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
    /// Grammar-constrained sampling failed mid-generation (`crate::grammar`).
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, ModelError>;

/// Activations of one forward call (resized per batch, reused).
#[derive(Default)]
pub(crate) struct Bufs {
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
    /// LoRA products' scratch.
    lora: crate::lora::apply::LoraScratch,
}

/// One sequence of a session: its KV cache and the tokens in it (its length is the
/// position of its next token).
pub(crate) struct Sequence {
    cache: KvCache,
    tokens: Vec<u32>,
}

/// The operations of the numerics the model was loaded for, chosen once per session.
#[allow(clippy::large_enum_variant)] // one per session: its size is irrelevant, a box is noise
enum Ops {
    Fast(FastOps),
    Ggml(GgmlOps),
}

/// The sequences being evaluated (sequence 0 unless a batch names others): their KV
/// caches, the thread pool and buffers.
pub struct Session<'m> {
    pub model: &'m Model,
    seqs: Vec<Sequence>,
    pool: ThreadPool,
    ops: Ops,
    b: Bufs,
    /// RoPE cos/sin tables (one per distinct base) and each layer's table.
    ropes: Vec<RopeTable>,
    rope_of: Vec<usize>,
    /// `prefill` returns logits for every prompt row, not only the last.
    pub logits_all: bool,
    /// Per-operation accounting, when on ([`Session::set_breakdown`]).
    prof: Option<Box<Breakdown>>,
    /// The LoRA adapters each sequence applies (`set_lora`, `set_seq_lora`; empty: the
    /// base model).
    lora: Vec<crate::lora::LoraSet>,
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
            ty.check(c.head_dim)?;
        }
        let mode = match c.rope_type {
            RopeType::Normal => RopeMode::Normal,
            RopeType::Neox => RopeMode::Neox,
        };
        let pool = ThreadPool::with_placement(o.n_threads, o.pin, o.placement);
        let ops = match model.numerics {
            Numerics::Fast => Ops::Fast(FastOps::new(model.isa, mode, c.head_dim, pool.threads())),
            Numerics::Ggml => {
                if (o.type_k, o.type_v) != (KvType::F16, KvType::F16) {
                    return Err(GgmlUnsupported::KvNotF16.into());
                }
                Ops::Ggml(GgmlOps::new(mode, c.head_dim))
            }
        };
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
            ops,
            b: Bufs::default(),
            ropes,
            rope_of,
            logits_all: false,
            prof: None,
            lora: vec![model.lora_default.clone(); o.n_seq.max(1)],
        })
    }

    /// Turns per-operation accounting on (fresh counters) or off.
    /// The LoRA adapters (with their scales) the next steps apply; refused when an adapted
    /// layer was not prepared for it (`lora::prepare::prepare`).
    pub fn set_lora(
        &mut self,
        set: crate::lora::LoraSet,
    ) -> std::result::Result<(), crate::lora::LoraError> {
        crate::lora::prepare::check(self.model, &set)?;
        self.lora.iter_mut().for_each(|s| *s = set.clone());
        Ok(())
    }
    /// The same for sequence `seq` alone (a server request's `lora` field); an unknown
    /// sequence is ignored.
    pub fn set_seq_lora(
        &mut self,
        seq: SeqId,
        set: crate::lora::LoraSet,
    ) -> std::result::Result<(), crate::lora::LoraError> {
        crate::lora::prepare::check(self.model, &set)?;
        if let Some(s) = self.lora.get_mut(seq) {
            *s = set;
        }
        Ok(())
    }
    /// The adapters sequence `seq` applies.
    pub fn lora(&self, seq: SeqId) -> Option<&crate::lora::LoraSet> {
        self.lora.get(seq)
    }

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

    /// Whether the thread pool is in its contended mode (workers park between jobs: it
    /// saw its threads preempted), as after the last forward call.
    pub fn pool_parking(&self) -> bool {
        self.pool.parking()
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
        let Session {
            model,
            seqs,
            pool,
            ops,
            b,
            ropes,
            rope_of,
            prof,
            lora,
            ..
        } = self;
        let mut w = Walker {
            model,
            seqs,
            pool,
            b,
            ropes,
            rope_of,
            obs: Observer::new(prof.as_deref_mut(), batch.len()),
            lora: lora.as_slice(),
        };
        match ops {
            Ops::Fast(f) => w.run(f, batch),
            Ops::Ggml(g) => exact::forward(&mut w, g, batch),
        }
        Ok(&self.b.logits)
    }
}

/// Wall-clock milliseconds since `t`.
pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
