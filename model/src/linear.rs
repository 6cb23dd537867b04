//! Linear layers: `out[t][r] = Σ_c W[r][c] · x[t][c]`, split across the pool.
//!
//! * [`Linear::Packed`]: Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q4_K / Q5_K / Q6_K / F16 repacked at load into 8-row panels
//!   (pocket-kernels `matmul`), times a q8_0-style [`QuantizedActivation`].
//! * [`Linear::Generic`]: every other format, zero-copy over the mapped bytes. Decode
//!   (one token) quantizes the input once into the format's activation pair (q8_0, q8_1
//!   or q8_K, as ggml's `vec_dot_type`) and uses the format's scalar `vec_dot`; a batch
//!   dequantizes each weight row once and takes f32 dot products with every token.
//!
//! An [`Input`] is prepared once per layer input and shared by every matrix that reads
//! it (Q, K, V; gate, up), quantized into each activation format they need.

use std::ops::Range;
use std::sync::Mutex;

use pocket_kernels::formats::{self, q8_0::BlockQ8_0, q8_1::BlockQ8_1, q8_k::BlockQ8K};
use pocket_kernels::matmul::{self, Kind, Layout, PackedMatrix, QuantizedActivation};
use pocket_kernels::{GgmlType, Isa};

use crate::gguf::TensorBytes;
use crate::threadpool::{Disjoint, ThreadPool};

/// The activation format a weight type's dot product pairs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActFormat {
    /// f32 (F32, F16, BF16 weights).
    F32,
    Q8_0,
    Q8_1,
    Q8K,
}

pub fn act_format(ty: GgmlType) -> Option<ActFormat> {
    use GgmlType as T;
    Some(match ty {
        T::F32 | T::F16 | T::BF16 => ActFormat::F32,
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4_NL => ActFormat::Q8_0,
        T::Q4_1 | T::Q5_1 => ActFormat::Q8_1,
        T::Q2_K | T::Q3_K | T::Q4_K | T::Q5_K | T::Q6_K | T::IQ4_XS => ActFormat::Q8K,
        _ => return None,
    })
}

/// Whether pocket-kernels has a packed layout for `ty` at rows of `cols` elements.
pub fn packable(ty: GgmlType, cols: usize) -> bool {
    use GgmlType as T;
    matches!(
        ty,
        T::Q4_0 | T::Q4_1 | T::Q8_0 | T::Q5_0 | T::Q4_K | T::Q5_K | T::Q6_K | T::F16
    ) && cols.is_multiple_of(ty.block_size().max(32))
}

pub enum Linear {
    Packed(PackedMatrix),
    Generic {
        ty: GgmlType,
        /// Row-major raw blocks, in the mapped file.
        data: TensorBytes,
        rows: usize,
        cols: usize,
    },
}

/// Why a tensor cannot be a linear layer.
#[derive(Debug, thiserror::Error)]
pub enum LinearError {
    #[error(transparent)]
    Pack(#[from] pocket_kernels::matmul::PackError),
    #[error("no matmul for weights of type {0}")]
    NoMatmul(GgmlType),
}

impl Linear {
    /// A linear layer over raw bytes: packed when `pack` and the type allows, else generic.
    pub fn new(
        ty: GgmlType,
        data: TensorBytes,
        rows: usize,
        cols: usize,
        pack: bool,
    ) -> Result<Self, LinearError> {
        if pack && packable(ty, cols) {
            return Ok(Linear::Packed(PackedMatrix::pack(ty, &data, rows, cols)?));
        }
        if act_format(ty).is_none() {
            return Err(LinearError::NoMatmul(ty));
        }
        Ok(Linear::Generic {
            ty,
            data,
            rows,
            cols,
        })
    }

    /// Output rows (for a gate/up pair: gate rows).
    pub fn rows(&self) -> usize {
        match self {
            Linear::Packed(p) => p.rows,
            Linear::Generic { rows, .. } => *rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Linear::Packed(p) => p.cols,
            Linear::Generic { cols, .. } => *cols,
        }
    }

    /// Bytes of weights one pass over the matrix reads.
    pub fn weight_bytes(&self) -> usize {
        match self {
            Linear::Packed(p) => p.bytes(),
            Linear::Generic { data, .. } => data.len(),
        }
    }

    /// Multiply-adds per token (for a fused gate/up: both halves).
    pub fn macs(&self) -> usize {
        match self {
            Linear::Packed(p) if matches!(p.kind, Kind::SwiGlu) => 2 * p.rows * p.cols,
            _ => self.rows() * self.cols(),
        }
    }

    pub fn is_packed(&self) -> bool {
        matches!(self, Linear::Packed(_))
    }

    fn needs(&self, tokens: usize) -> Needs {
        let mut n = Needs::default();
        match self {
            Linear::Packed(p) => {
                n.packed = true;
                n.packed_f32 = p.layout == Layout::F16;
            }
            Linear::Generic { ty, .. } if tokens == 1 => match act_format(*ty).unwrap() {
                ActFormat::F32 => n.f32 = true,
                ActFormat::Q8_0 => n.q8_0 = true,
                ActFormat::Q8_1 => n.q8_1 = true,
                ActFormat::Q8K => n.q8_k = true,
            },
            Linear::Generic { .. } => n.f32 = true,
        }
        n
    }

    /// `out[t·rows + r]` for every token of `inp` (`out.len() == tokens · rows`), split
    /// across the pool in items the threads claim as they go (`ThreadPool::run_items`):
    /// blocks of output panels/rows for one token, blocks of tokens for a batch. Every
    /// element is computed by the same arithmetic whichever item and thread it falls in.
    pub fn forward(&self, pool: &ThreadPool, inp: &Input, out: &mut [f32], isa: Isa) {
        self.forward_then(pool, inp, out, isa, None)
    }

    /// [`Self::forward`], each item then running `tail` on the piece of `out` it just
    /// wrote (a LoRA adapter's `B` product: in the same job, on rows still in cache).
    pub fn forward_then(
        &self,
        pool: &ThreadPool,
        inp: &Input,
        out: &mut [f32],
        isa: Isa,
        tail: Option<&dyn ItemTail>,
    ) {
        let rows = self.rows();
        let t = inp.tokens;
        assert_eq!(out.len(), t * rows, "linear output size");
        assert_eq!(inp.cols, self.cols(), "linear input width");
        let n = pool.threads();
        if t == 1 {
            // Items: ITEMS_PER_THREAD row blocks per thread, thread `i` starting on the
            // rows a static split would give it (the panels it read last step stay warm).
            let n_base = n * ITEMS_PER_THREAD;
            match self {
                Linear::Packed(w) => {
                    let ranges = w.split_panels(n_base);
                    let outs = Disjoint::from_pieces(w.split_out(out, &ranges));
                    let rows_of = |k: usize| {
                        let r = &ranges[k];
                        (r.start * matmul::PANEL).min(rows)..(r.end * matmul::PANEL).min(rows)
                    };
                    gemv_items(pool, n_base, &outs, rows_of, tail, |k, o| {
                        let act = &inp.packed;
                        if matches!(w.kind, Kind::SwiGlu) {
                            matmul::gemv_swiglu(w, act, o, ranges[k].clone(), isa);
                        } else {
                            matmul::gemv(w, act, o, ranges[k].clone(), isa);
                        }
                    });
                }
                Linear::Generic { .. } => {
                    let split = |k| ThreadPool::split(rows, n_base, k);
                    let outs = Disjoint::split(out, (0..n_base).map(|k| split(k).len()));
                    gemv_items(pool, n_base, &outs, split, tail, |k, o| {
                        self.gemv_rows(inp, split(k), o);
                    });
                }
            }
        } else if let (Linear::Packed(w), true) = (self, t < PANEL_SPLIT_TOKENS) {
            few_tokens(pool, w, inp, out, isa, tail);
        } else {
            let n_items = token_items(t, n);
            let toks = |k: usize| ThreadPool::split(t, n_items, k);
            let outs = Disjoint::split(out, (0..n_items).map(|k| toks(k).len() * rows));
            pool.run_items(n_items, |_, k| {
                let mut o = outs.piece(k);
                match self {
                    Linear::Packed(w) => {
                        matmul::gemm_tokens(
                            w,
                            &inp.packed,
                            toks(k),
                            &mut o,
                            rows,
                            0..w.panels(),
                            isa,
                        );
                    }
                    Linear::Generic { .. } => self.gemm_rows_f32(inp, toks(k), &mut o),
                }
                if let Some(tail) = tail {
                    tail.tokens(toks(k), &mut o);
                }
            });
        }
    }

    /// One token, output rows `r` (generic only).
    fn gemv_rows(&self, inp: &Input, r: Range<usize>, out: &mut [f32]) {
        let Linear::Generic { ty, data, cols, .. } = self else {
            unreachable!()
        };
        let rb = ty.row_bytes(*cols as u64).unwrap() as usize;
        let mut tmp = Vec::new();
        for (o, row) in out.iter_mut().zip(r) {
            let w = &data[row * rb..(row + 1) * rb];
            *o = dot_row(*ty, w, inp, &mut tmp);
        }
    }

    /// Tokens `toks` (generic only): each weight row dequantized once, then f32 dots.
    fn gemm_rows_f32(&self, inp: &Input, toks: Range<usize>, out: &mut [f32]) {
        let Linear::Generic {
            ty,
            data,
            rows,
            cols,
        } = self
        else {
            unreachable!()
        };
        let rb = ty.row_bytes(*cols as u64).unwrap() as usize;
        let mut wrow = vec![0f32; *cols];
        for r in 0..*rows {
            formats::dequantize(*ty, &data[r * rb..(r + 1) * rb], &mut wrow).unwrap();
            for (j, t) in toks.clone().enumerate() {
                out[j * rows + r] = dot_f32(&wrow, inp.row(t));
            }
        }
    }
}

/// Work a product's item does on the output piece it has just written
/// ([`Linear::forward_then`]). Each output element is in exactly one piece, so a tail that
/// computes each element the same way wherever it falls gives the same result on any split.
pub trait ItemTail: Sync {
    /// One token, or a few (the split by output panels): part `k` of `n` of what the rows
    /// need first (a LoRA adapter's `A x`), run as the first item of thread `k`'s share of
    /// the job.
    fn lead(&self, k: usize, n: usize);
    /// What `rows` will read, requested into the cache before the block's base rows are
    /// computed.
    fn prefetch(&self, rows: Range<usize>);
    /// `out` holds output rows `rows` of every token (token `t`'s at `t·rows.len()`).
    /// `false`: the leads are not all done yet; the product runs it again after the job.
    fn rows(&self, rows: Range<usize>, out: &mut [f32]) -> bool;
    /// A batch of [`PANEL_SPLIT_TOKENS`] or more: `out` holds the whole output rows of
    /// tokens `toks`.
    fn tokens(&self, toks: Range<usize>, out: &mut [f32]);
}

/// One item of a one-token product with a tail.
#[derive(Clone, Copy)]
enum GemvItem {
    Lead(usize),
    Rows(usize),
}

/// The items of a one-token product: `base(k, piece k)` for row blocks `0..n_base`, each
/// followed by `tail`'s rows on its piece; `tail`'s leads (one per thread) first in every
/// thread's share, so each thread starts on one. A block done before every lead (another
/// thread late to the job) has its tail run after the job instead: no item ever waits.
fn gemv_items(
    pool: &ThreadPool,
    n_base: usize,
    outs: &Disjoint<f32>,
    rows_of: impl Fn(usize) -> Range<usize> + Sync,
    tail: Option<&dyn ItemTail>,
    base: impl Fn(usize, &mut [f32]) + Sync,
) {
    let n = pool.threads();
    let Some(tail) = tail else {
        pool.run_items(n_base, |_, k| {
            if !rows_of(k).is_empty() {
                base(k, &mut outs.piece(k));
            }
        });
        return;
    };
    let n_items = n_base + n;
    let mut items = Vec::with_capacity(n_items);
    for i in 0..n {
        items.push(GemvItem::Lead(i));
        let share = pool.share(n_items, i);
        let before = share.start - i; // row blocks in the shares before this one
        items.extend((before..before + share.len() - 1).map(GemvItem::Rows));
    }
    let late = std::sync::Mutex::new(Vec::new());
    pool.run_items(n_items, |_, j| match items[j] {
        GemvItem::Lead(i) => tail.lead(i, n),
        GemvItem::Rows(k) => {
            let rows = rows_of(k);
            if rows.is_empty() {
                return;
            }
            tail.prefetch(rows.clone());
            let mut o = outs.piece(k);
            base(k, &mut o);
            if !tail.rows(rows, &mut o) {
                late.lock().unwrap().push(k);
            }
        }
    });
    for k in late.into_inner().unwrap() {
        let done = tail.rows(rows_of(k), &mut outs.piece(k));
        debug_assert!(done, "every lead has run");
    }
}

/// Row blocks per thread of a one-token matmul: enough that a preempted or slower thread
/// holds up a step by an eighth of its share at most, few enough that the per-item cost
/// (a claim, a lock, a kernel call) stays below 1 % of a decode matmul.
const ITEMS_PER_THREAD: usize = 8;

/// Tokens per item of a batched matmul, about: the kernels' token chunk. Items are a
/// multiple of the thread count and of equal size, so the static shares stay balanced.
const TOKEN_BLOCK: usize = 24;

/// Below this many tokens a batched matmul is split by output panels, not by tokens: a
/// few tokens cost little more than one, so the weights' bytes are the step's time, and a
/// split by tokens makes every thread read all of them (pp2 ran slower than pp4 here).
/// 16, not 8: a 9-row step (speculative verify of 1 + 8) split by panels ran 10-30 %
/// faster than split 4 + 5 by tokens (SmolLM2 Q4_1, 2 threads, Sapphire Rapids).
pub const PANEL_SPLIT_TOKENS: usize = 16;

thread_local! {
    /// [`few_tokens`]' item outputs, kept by the calling thread from call to call.
    static PANEL_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A matmul of a few tokens (`1 < tokens < PANEL_SPLIT_TOKENS`), split like a one-token
/// matmul: [`ITEMS_PER_THREAD`] output-panel ranges per thread, each for every token.
/// Item `k` writes its `tokens × rows_k` block to a scratch piece (`ld = rows_k`), copied
/// into `out` after the job. Every output element comes from the same tile arithmetic as
/// under the split by tokens (the kernels' results do not depend on the panel range or
/// the token count), so a row's bits do not change. A `tail` runs as in a one-token
/// product ([`gemv_items`]), on every token of each piece.
fn few_tokens(
    pool: &ThreadPool,
    w: &PackedMatrix,
    inp: &Input,
    out: &mut [f32],
    isa: Isa,
    tail: Option<&dyn ItemTail>,
) {
    let (t, rows) = (inp.tokens, w.rows);
    let ranges = w.split_panels(pool.threads() * ITEMS_PER_THREAD);
    PANEL_SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        scratch.resize(t * rows, 0.0);
        let widths: Vec<usize> = ranges.iter().map(|r| w.rows_in(r.clone())).collect();
        let pieces = Disjoint::split(&mut scratch, widths.iter().map(|&n| t * n));
        let rows_of = |k: usize| {
            let r = &ranges[k];
            (r.start * matmul::PANEL).min(rows)..(r.end * matmul::PANEL).min(rows)
        };
        gemv_items(pool, ranges.len(), &pieces, rows_of, tail, |k, o| {
            let (panels, ld) = (ranges[k].clone(), widths[k]);
            matmul::gemm_tokens(w, &inp.packed, 0..t, o, ld, panels, isa);
        });
        drop(pieces);
        let mut r0 = 0;
        let mut from = &scratch[..];
        for &n in &widths {
            let (piece, rest) = from.split_at(t * n);
            for (j, src) in piece.chunks_exact(n.max(1)).enumerate().take(t) {
                out[j * rows + r0..][..n].copy_from_slice(src);
            }
            (r0, from) = (r0 + n, rest);
        }
    });
}

/// Tokens from which a layer input is quantized by every thread of the pool (below, the
/// hand-off costs more than the rows).
const PARALLEL_QUANTIZE_TOKENS: usize = 16;

fn token_items(tokens: usize, threads: usize) -> usize {
    (threads * tokens.div_ceil(threads * TOKEN_BLOCK))
        .min(tokens)
        .max(1)
}

/// `bytes` viewed as blocks, copied only when misaligned.
fn blocks<'b, B: bytemuck::Pod>(bytes: &'b [u8], tmp: &'b mut Vec<B>) -> &'b [B] {
    match bytemuck::try_cast_slice::<u8, B>(bytes) {
        Ok(b) => b,
        Err(_) => {
            tmp.clear();
            tmp.extend(
                bytes
                    .chunks_exact(std::mem::size_of::<B>())
                    .map(bytemuck::pod_read_unaligned::<B>),
            );
            tmp
        }
    }
}

fn dot_row(ty: GgmlType, w: &[u8], inp: &Input, tmp: &mut Vec<f32>) -> f32 {
    use formats::*;
    use GgmlType as T;
    macro_rules! q {
        ($m:ident, $act:expr) => {{
            let mut t = Vec::new();
            $m::vec_dot(blocks(w, &mut t), $act)
        }};
    }
    match ty {
        T::Q4_0 => q!(q4_0, &inp.q8_0),
        T::Q5_0 => q!(q5_0, &inp.q8_0),
        T::Q8_0 => q!(q8_0, &inp.q8_0),
        T::IQ4_NL => q!(iq4_nl, &inp.q8_0),
        T::Q4_1 => q!(q4_1, &inp.q8_1),
        T::Q5_1 => q!(q5_1, &inp.q8_1),
        T::Q2_K => q!(q2_k, &inp.q8_k),
        T::Q3_K => q!(q3_k, &inp.q8_k),
        T::Q4_K => q!(q4_k, &inp.q8_k),
        T::Q5_K => q!(q5_k, &inp.q8_k),
        T::Q6_K => q!(q6_k, &inp.q8_k),
        T::IQ4_XS => q!(iq4_xs, &inp.q8_k),
        _ => {
            tmp.resize(inp.cols, 0.0);
            formats::dequantize(ty, w, tmp).unwrap();
            dot_f32(tmp, inp.row(0))
        }
    }
}

/// f32 dot product with 16 independent partial sums (vectorizes without fast-math).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[derive(Clone, Copy, Default, Debug)]
struct Needs {
    packed: bool,
    /// The packed activation keeps its f32 rows (F16 panels read them).
    packed_f32: bool,
    /// The f32 rows themselves (generic matrices: [`Input::row`]).
    f32: bool,
    q8_0: bool,
    q8_1: bool,
    q8_k: bool,
}

/// One layer input (`tokens` rows of `cols`), with the quantized forms its matrices need.
#[derive(Default)]
pub struct Input {
    pub tokens: usize,
    pub cols: usize,
    pub x: Vec<f32>,
    packed: QuantizedActivation,
    q8_0: Vec<BlockQ8_0>,
    q8_1: Vec<BlockQ8_1>,
    q8_k: Vec<BlockQ8K>,
    /// Whether `packed` holds these rows.
    has_packed: bool,
}

impl Input {
    /// Takes `x` (`tokens × cols`) and quantizes it for every matrix in `users`; a batch
    /// is quantized by the pool's threads, rows split between them (the same bits as one
    /// thread: rows are independent).
    pub fn set(&mut self, pool: &ThreadPool, x: &[f32], tokens: usize, users: &[&Linear]) {
        self.set_with(pool, x, tokens, users, false)
    }

    /// [`Self::set`], with the packed activation also when no user needs it but
    /// `packed` (a LoRA adapter's int8 `A` reads it; rows of a multiple of 32 only).
    pub fn set_with(
        &mut self,
        pool: &ThreadPool,
        x: &[f32],
        tokens: usize,
        users: &[&Linear],
        packed: bool,
    ) {
        self.tokens = tokens;
        self.cols = x.len() / tokens;
        let mut n = Needs::default();
        for u in users {
            let m = u.needs(tokens);
            n.packed |= m.packed;
            n.packed_f32 |= m.packed_f32;
            n.f32 |= m.f32;
            n.q8_0 |= m.q8_0;
            n.q8_1 |= m.q8_1;
            n.q8_k |= m.q8_k;
        }
        n.packed |= packed && self.cols.is_multiple_of(matmul::QK);
        self.has_packed = n.packed;
        self.x.clear();
        if n.f32 {
            self.x.extend_from_slice(x);
        }
        if n.packed {
            // Four parts a thread, claimed as the threads go: with one part each, a worker
            // still waking left both to the caller (perf: 85 % of prefill's quantization
            // on the calling thread, SmolLM2 pp512).
            let n_parts = if tokens >= PARALLEL_QUANTIZE_TOKENS {
                (4 * pool.threads()).min(tokens / 4)
            } else {
                1
            };
            let parts = self
                .packed
                .parts_keeping(x, tokens, n_parts, Isa::active(), n.packed_f32);
            if parts.len() == 1 {
                parts.into_iter().for_each(|p| p.fill());
            } else {
                let parts: Vec<_> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
                pool.run_items(parts.len(), |_, i| {
                    if let Some(p) = parts[i].lock().unwrap_or_else(|e| e.into_inner()).take() {
                        p.fill();
                    }
                });
            }
        }
        // The generic vec_dot path is used for one token only.
        if n.q8_0 {
            self.q8_0
                .resize(self.cols / 32, bytemuck::Zeroable::zeroed());
            formats::q8_0::quantize_row(&x[..self.cols], &mut self.q8_0);
        }
        if n.q8_1 {
            self.q8_1
                .resize(self.cols / 32, bytemuck::Zeroable::zeroed());
            formats::q8_1::quantize_row(&x[..self.cols], &mut self.q8_1);
        }
        if n.q8_k {
            self.q8_k
                .resize(self.cols / 256, bytemuck::Zeroable::zeroed());
            formats::q8_k::quantize_row(&x[..self.cols], &mut self.q8_k);
        }
    }

    /// The rows quantized for the packed kernels, if they are.
    pub fn packed(&self) -> Option<&QuantizedActivation> {
        self.has_packed.then_some(&self.packed)
    }

    pub fn row(&self, t: usize) -> &[f32] {
        &self.x[t * self.cols..(t + 1) * self.cols]
    }
}
