//! llama.cpp's arithmetic for the layer walker (`Numerics::Ggml`): every operation is a
//! `pocket_kernels::ggml_exact` twin of the ggml kernel llama.cpp runs for it, over the
//! GGUF's own blocks (no repacking), so the logits equal llama.cpp's bit for bit. Matrices
//! are split by rows across the pool; everything else is scalar. Only what the twins cover
//! loads ([`check`]); a batch is one sequence, run in llama.cpp's ubatches of 512.

use pocket_kernels::formats::{q8_0::BlockQ8_0, q8_1::BlockQ8_1, q8_k::BlockQ8K};
use pocket_kernels::ggml_exact::{
    attention, dots, gelu, q4_0, q4_k, q5_0, q6_k, q8_k, quantize, rope, tiled, vec,
};
use pocket_kernels::ops::norm;
use pocket_kernels::ops::rope::{RopeMode, RopeTable};
use pocket_kernels::GgmlType;

use super::walk::{AttnJob, Cx, LayerOps, Walker};
use super::Bufs;
use crate::batch::{Batch, SeqId};
use crate::config::{Arch, FfnAct};
use crate::linear::Linear;
use crate::profile::Op;
use crate::threadpool::ThreadPool;
use crate::weights::{GateUp, Qkv, Weights};

/// What the ggml twins cannot reproduce (the load or the batch is refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GgmlUnsupported {
    #[error("a tensor's data is not 2-byte aligned in the file")]
    Misaligned,
    #[error("weights of type {ty} ({rows} rows) have no bit-exact twin yet")]
    NoTwin { ty: GgmlType, rows: usize },
    #[error("packed weights (load without packing)")]
    Packed,
    #[error("its attention twin reads an f16 KV cache (drop -ctk/-ctv)")]
    KvNotF16,
}

/// llama.cpp evaluates a batch in ubatches of `n_ubatch` (512 by default) tokens, and its
/// kernels choose their paths (tiled attention, token groups) per ubatch.
const N_UBATCH: usize = 512;

/// Evaluates a checked batch in ggml's arithmetic; the logits of the rows that want them
/// end in `w.b.logits`, in batch order. ggml's kernels choose their paths by the row count
/// of a ubatch, so rows of different sequences are never evaluated together: each
/// sequence's rows run as llama.cpp's one-sequence tools run them (ubatches of 512), which
/// keeps every sequence bit for bit what it is alone.
pub(super) fn forward(w: &mut Walker, ops: &mut GgmlOps, batch: &Batch) {
    let n_vocab = w.model.config.n_vocab;
    // Where each wanted row's logits go: its rank among the batch's wanted rows.
    let mut slot = vec![usize::MAX; batch.len()];
    let want = batch.logit_rows();
    for (k, &r) in want.iter().enumerate() {
        slot[r] = k;
    }
    let mut logits = vec![0f32; want.len() * n_vocab];
    let mut seqs: Vec<SeqId> = batch.rows.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    for seq in seqs {
        let mine: Vec<usize> = (0..batch.len())
            .filter(|&i| batch.rows[i].seq == seq)
            .collect();
        for ub in mine.chunks(N_UBATCH) {
            let mut sub = Batch::new();
            for &i in ub {
                let r = &batch.rows[i];
                sub.add(r.token, r.pos, r.seq, r.logits);
            }
            w.run(ops, &sub);
            let wanted = ub.iter().filter(|&&i| batch.rows[i].logits);
            for (&i, row) in wanted.zip(w.b.logits.chunks_exact(n_vocab)) {
                logits[slot[i] * n_vocab..][..n_vocab].copy_from_slice(row);
            }
        }
    }
    w.b.logits = logits;
}

pub(super) struct GgmlOps {
    mode: RopeMode,
    head_dim: usize,
}

impl GgmlOps {
    pub fn new(mode: RopeMode, head_dim: usize) -> GgmlOps {
        GgmlOps { mode, head_dim }
    }
}

impl LayerOps for GgmlOps {
    fn trims_last_layer(&self) -> bool {
        false
    }

    fn norm_row(&self, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
        // ggml's rms_norm (f64 sum of f32 squares, one f32 scale, `(x*scale)*w`).
        norm::rms_norm_ref(x, w, eps, out);
    }

    fn norm_row_inplace(&self, x: &mut [f32], w: &[f32], eps: f32) {
        norm::rms_norm_heads_ref(x, w, eps);
    }

    fn norm_heads(&self, x: &mut [f32], w: &[f32], eps: f32) {
        norm::rms_norm_heads_ref(x, w, eps);
    }

    fn rope(&self, x: &mut [f32], table: &RopeTable, pos: usize) {
        rope::rope(self.mode, x, self.head_dim, table.cos(pos), table.sin(pos));
    }

    fn qkv(&mut self, cx: &mut Cx, w: &Qkv, tokens: usize, b: &mut Bufs) {
        let Qkv::Split { q, k, v } = w else {
            unreachable!("checked at load")
        };
        matmul(cx.pool, q, &b.xn, tokens, &mut b.q);
        matmul(cx.pool, k, &b.xn, tokens, &mut b.k);
        matmul(cx.pool, v, &b.xn, tokens, &mut b.v);
    }

    fn attention(&mut self, cx: &mut Cx, job: &AttnJob, q: &mut [f32], att: &mut Vec<f32>) {
        let c = cx.c;
        let (qd, kvd, hd) = (c.q_dim(), c.kv_dim(), c.head_dim);
        let rows = &job.batch.rows;
        let (t_n, pos0) = (rows.len(), rows.first().map_or(0, |r| r.pos));
        // Gemma 3 scales Q (`ggml_scale`) and runs attention with a scale of 1; the others
        // pass the scale to flash attention, which applies it to each score.
        let fa_scale = if c.arch == Arch::Gemma3 {
            q.iter_mut().for_each(|v| *v *= c.attn_scale);
            1.0
        } else {
            c.attn_scale
        };
        // One query row and head at a time, over the f16 cache in place, on the path
        // llama.cpp's flash attention takes for this ubatch: tiled for 64+ rows, split
        // across the threads for one row once its padded KV view reaches 512 cells
        // (llama.cpp pads n_kv to 256), else one chunk.
        let cache = &job.seqs[rows[0].seq].cache;
        let (ks, vs) = cache
            .f16_rows(job.l)
            .expect("f16 cache checked at session start");
        let window = c.window_of(job.l);
        let cells = cache.n_ctx().next_multiple_of(256);
        let nth = cx.pool.threads();
        att.resize(t_n * qd, 0.0);
        for t in 0..t_n {
            let pos = pos0 + t;
            let lo = if window > 0 {
                (pos + 1).saturating_sub(window)
            } else {
                0
            };
            let n_kv = cells.min((pos0 + t_n).next_multiple_of(256));
            let visible = |i: usize| lo <= i && i <= pos;
            for h in 0..c.n_head {
                let off = (h / c.group()) * hd;
                let q = &q[t * qd + h * hd..t * qd + (h + 1) * hd];
                let out = &mut att[t * qd + h * hd..t * qd + (h + 1) * hd];
                let key = |i: usize| &ks[i * kvd + off..][..hd];
                let value = |i: usize| &vs[i * kvd + off..][..hd];
                let cells = |n_kv| attention::KvCells {
                    n_kv,
                    visible,
                    keys: key,
                    values: value,
                };
                if t_n >= attention::FA_TILE_Q {
                    cells(pos + 1).flash_attn_row_tiled(q, fa_scale, out);
                } else if t_n == 1 && n_kv >= 512 {
                    cells(n_kv).flash_attn_row_split_kv(q, fa_scale, nth, out);
                } else {
                    attention::flash_attn_row(
                        q,
                        pos + 1 - lo,
                        |i| key(lo + i),
                        |i| value(lo + i),
                        fa_scale,
                        out,
                    );
                }
            }
        }
    }

    fn linear(&mut self, cx: &mut Cx, _: Op, w: &Linear, x: &[f32], n: usize, out: &mut Vec<f32>) {
        matmul(cx.pool, w, x, n, out);
    }

    fn gate_up(&mut self, cx: &mut Cx, w: &GateUp, tokens: usize, b: &mut Bufs) {
        let GateUp::Split { gate, up } = w else {
            unreachable!("checked at load")
        };
        matmul(cx.pool, gate, &b.xn, tokens, &mut b.g);
        matmul(cx.pool, up, &b.xn, tokens, &mut b.u);
        b.h.resize(b.g.len(), 0.0);
        match cx.c.ffn_act {
            FfnAct::Silu => vec::swiglu(&b.g, &b.u, &mut b.h),
            FfnAct::GeluTanh => gelu::geglu(&b.g, &b.u, &mut b.h),
        }
        cx.obs.step(Op::GateUp, "ffn_gate", cx.l, &b.g);
        cx.obs.step(Op::GateUp, "ffn_up", cx.l, &b.u);
    }

    fn activate(&self, act: FfnAct, g: &[f32], u: &[f32], h: &mut Vec<f32>) {
        h.resize(g.len(), 0.0);
        match act {
            FfnAct::Silu => vec::swiglu(g, u, h),
            FfnAct::GeluTanh => gelu::geglu(g, u, h),
        }
    }
}

/// Why `Numerics::Ggml` cannot run this model, if it cannot.
pub(super) fn check(w: &Weights) -> std::result::Result<(), GgmlUnsupported> {
    let mut mats: Vec<&Linear> = vec![&w.output];
    for l in &w.layers {
        match &l.qkv {
            Qkv::Split { q, k, v } => mats.extend([q, k, v]),
            Qkv::Fused(m) => mats.push(m),
        }
        match &l.gate_up {
            GateUp::Split { gate, up } => mats.extend([gate, up]),
            GateUp::SwiGlu(m) | GateUp::Stacked(m) => mats.push(m),
        }
        mats.extend([&l.wo, &l.down]);
    }
    for m in mats {
        if let Linear::Generic { data, .. } = m {
            // The twins read rows as block slices in place (every block type here is
            // 2-byte aligned with an even size); GGUF's default 32-byte alignment gives that.
            if !(data.as_ptr() as usize).is_multiple_of(2) {
                return Err(GgmlUnsupported::Misaligned);
            }
        }
        match *m {
            Linear::Generic {
                ty: GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q6_K,
                ..
            } => {}
            // Q4_0: repacked (q4_0_8x8) when the row count is a multiple of 8, else
            // vec_dot / sgemm; both orders have a twin.
            Linear::Generic {
                ty: GgmlType::Q4_0, ..
            } => {}
            // llama.cpp repacks (and so multiplies in its own order) Q4_K matrices whose
            // row count is a multiple of 8; that is the order the twin reproduces.
            Linear::Generic {
                ty: GgmlType::Q4_K,
                rows,
                ..
            } if rows % 8 == 0 => {}
            Linear::Generic { ty, rows, .. } => return Err(GgmlUnsupported::NoTwin { ty, rows }),
            Linear::Packed(_) => return Err(GgmlUnsupported::Packed),
        }
    }
    Ok(())
}

/// One token's activation, quantized as ggml quantizes it for the weight type.
enum Act {
    Q8_0(Vec<BlockQ8_0>),
    Q8_1(Vec<BlockQ8_1>),
    /// Q8_K, and whether it came from the four-row quantizer (Q4_K's grouped tokens).
    Q8K(Vec<BlockQ8K>, bool),
}

/// `out[t][r] = W[r] · x[t]` as ggml's `mul_mat` on x86 computes it: each token quantized
/// once into the type's `vec_dot_type`, then one dot product per output in the order of the
/// kernel llama.cpp picks (`vec_dot`; llamafile's sgemm tiles for Q8_0 / Q5_0 batches sum
/// each output in the same order; repacked Q4_K: groups of four tokens through the 4x8
/// quantizer and the gemm, the remaining tokens through the gemv; repacked Q4_0 (rows % 8
/// == 0): one whole-block `fmadd` per block, the same for its gemv and gemm and for both
/// Q8_0 quantizers; Q6_K batches of 8+ tokens: ggml's tiled K-quant matmul).
fn matmul(pool: &ThreadPool, lin: &Linear, x: &[f32], tokens: usize, out: &mut Vec<f32>) {
    let Linear::Generic {
        ty,
        ref data,
        rows,
        cols,
    } = *lin
    else {
        unreachable!("checked at load")
    };
    let data: &[u8] = data;
    out.resize(tokens * rows, 0.0);
    let grouped = tokens - tokens % 4;
    let acts: Vec<Act> = x
        .chunks_exact(cols)
        .enumerate()
        .map(|(t, xr)| match ty {
            GgmlType::Q4_1 => {
                let mut a = vec![bytemuck::Zeroable::zeroed(); cols / 32];
                quantize::quantize_row_q8_1(xr, &mut a);
                Act::Q8_1(a)
            }
            GgmlType::Q4_K | GgmlType::Q6_K => {
                let mut a = vec![bytemuck::Zeroable::zeroed(); cols / 256];
                let four = ty == GgmlType::Q4_K && t < grouped;
                if four {
                    q8_k::quantize_row_q8_k_4x8(xr, &mut a);
                } else {
                    q8_k::quantize_row_q8_k(xr, &mut a);
                }
                Act::Q8K(a, four)
            }
            _ => {
                let mut a = vec![bytemuck::Zeroable::zeroed(); cols / 32];
                quantize::quantize_row_q8_0(xr, &mut a);
                Act::Q8_0(a)
            }
        })
        .collect();
    let rb = ty.row_bytes(cols as u64).unwrap() as usize;
    // Each share computes its rows for every token, then writes them under the lock (one
    // lock per share and matrix: no contention worth measuring beside the dots).
    let dst = std::sync::Mutex::new(&mut out[..]);
    let nth = pool.threads();
    pool.run_items(nth, |_, i| {
        let mine = ThreadPool::split(rows, nth, i);
        let mut vals = Vec::with_capacity(mine.len() * tokens);
        for r in mine.clone() {
            let wr = &data[r * rb..(r + 1) * rb];
            for a in &acts {
                let v = match (ty, a) {
                    (GgmlType::Q4_1, Act::Q8_1(a)) => dots::vec_dot_q4_1_q8_1(cast(wr), a),
                    (GgmlType::Q8_0, Act::Q8_0(a)) => dots::vec_dot_q8_0_q8_0(cast(wr), a),
                    (GgmlType::Q5_0, Act::Q8_0(a)) => q5_0::vec_dot_q5_0_q8_0(cast(wr), a),
                    (GgmlType::Q4_0, Act::Q8_0(a)) if rows % 8 == 0 => {
                        q4_0::gemv_q4_0_8x8_q8_0(cast(wr), a)
                    }
                    (GgmlType::Q4_0, Act::Q8_0(a)) => q4_0::vec_dot_q4_0_q8_0(cast(wr), a),
                    // ggml's tiled K-quant matmul takes batches of 8+ tokens.
                    (GgmlType::Q6_K, Act::Q8K(a, _)) if tiled::takes_tiled_path(tokens) => {
                        tiled::dot_tiled_q6_k(cast(wr), a)
                    }
                    (GgmlType::Q6_K, Act::Q8K(a, _)) => q6_k::vec_dot_q6_k_q8_k(cast(wr), a),
                    (GgmlType::Q4_K, Act::Q8K(a, true)) => q4_k::gemm_q4_k_8x8_q8_k(cast(wr), a),
                    (GgmlType::Q4_K, Act::Q8K(a, false)) => q4_k::gemv_q4_k_8x8_q8_k(cast(wr), a),
                    _ => unreachable!("checked at load"),
                };
                vals.push(v);
            }
        }
        let mut out = dst.lock().unwrap();
        for (k, r) in mine.enumerate() {
            for t in 0..tokens {
                out[t * rows + r] = vals[k * tokens + t];
            }
        }
    });
}

/// A weight row as blocks. GGUF tensor data is 32-byte aligned and every block type here
/// has 2- or 4-byte alignment and a size that keeps rows aligned, so the cast holds; a
/// file that breaks that was rejected by the loader's validation.
fn cast<B: bytemuck::Pod>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}
