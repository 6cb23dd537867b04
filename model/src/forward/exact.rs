//! The forward pass in llama.cpp's arithmetic (`Numerics::Ggml`): the same layer order as
//! [`super::Session::forward`], but every operation is a `pocket_kernels::ggml_exact` twin
//! of the ggml kernel llama.cpp runs for it, over the GGUF's own blocks (no repacking), so
//! the logits equal llama.cpp's bit for bit. Matrices are split by rows across the pool;
//! everything else is scalar. Only what the twins cover loads ([`check`]).

use std::ops::Range;

use pocket_kernels::formats::{self, q8_0::BlockQ8_0, q8_1::BlockQ8_1, q8_k::BlockQ8K};
use pocket_kernels::ggml_exact::{
    attention, dots, gelu, q4_0, q4_k, q5_0, q6_k, q8_k, quantize, rope, tiled, vec,
};
use pocket_kernels::ops::norm;
use pocket_kernels::ops::rope::RopeMode;
use pocket_kernels::GgmlType;

use super::{add, qk_into_cache, ModelError, Result, Session};
use crate::batch::Batch;
use crate::config::{Arch, FfnAct, RopeType};
use crate::linear::Linear;
use crate::threadpool::ThreadPool;
use crate::weights::{GateUp, Qkv, Weights};

/// Why `Numerics::Ggml` cannot run this model, if it cannot.
pub(super) fn check(w: &Weights) -> std::result::Result<(), String> {
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
            if data.as_ptr() as usize % 2 != 0 {
                return Err("a tensor's data is not 2-byte aligned in the file".into());
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
            Linear::Generic { ty, rows, .. } => {
                return Err(format!(
                    "weights of type {ty} ({rows} rows) have no bit-exact twin yet"
                ))
            }
            Linear::Packed(_) => return Err("packed weights (load without packing)".into()),
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
    pool.run(|i| {
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
/// A batch as ggml numerics run it: the tokens of sequence 0 and the contiguous range of
/// rows that want logits (llama.cpp's one-sequence CLI tools, which the twins follow).
pub(super) fn one_sequence(batch: &Batch) -> Result<(Vec<u32>, Range<usize>)> {
    if let Some(r) = batch.rows.iter().find(|r| r.seq != 0) {
        return Err(ModelError::Numerics(format!(
            "its forward pass runs one sequence (the batch has a row of sequence {})",
            r.seq
        )));
    }
    let want = batch.logit_rows();
    let range = match (want.first(), want.last()) {
        (Some(&a), Some(&b)) if b - a + 1 == want.len() => a..b + 1,
        (None, _) => 0..0,
        _ => {
            return Err(ModelError::Numerics(
                "its forward pass returns one contiguous range of logit rows".into(),
            ))
        }
    };
    Ok((batch.rows.iter().map(|r| r.token).collect(), range))
}

fn cast<B: bytemuck::Pod>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

/// `POCKET_TRACE_DIR=DIR`: writes each traced tensor as raw f32 to `DIR/<name>-<layer>.bin`,
/// named as llama.cpp's graph names them, so a run can be compared op by op with the
/// tensors `tests/oracle/dump_logits.cpp` writes under `DUMP_TENSORS` (same names).
fn trace(name: &str, l: usize, x: &[f32]) {
    if let Some(dir) = std::env::var_os("POCKET_TRACE_DIR") {
        let path = std::path::Path::new(&dir).join(format!("{name}-{l}.bin"));
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("trace: cannot write {}: {e}", path.display());
        }
    }
}

fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut Vec<f32>) {
    out.resize(x.len(), 0.0);
    for (xr, or) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        // ggml's rms_norm (f64 sum of f32 squares, one f32 scale, `(x*scale)*w`).
        norm::rms_norm_ref(xr, w, eps, or);
    }
}

impl Session<'_> {
    /// [`Session::forward`] in `Numerics::Ggml` (inputs already validated there).
    pub(super) fn forward_exact(&mut self, tokens: &[u32], want: Range<usize>) -> Result<&[f32]> {
        // llama.cpp evaluates a batch in ubatches of `n_ubatch` (512 by default) tokens, and
        // its kernels choose their paths (tiled attention, token groups) per ubatch.
        const N_UBATCH: usize = 512;
        if tokens.len() <= N_UBATCH {
            return self.forward_exact_ubatch(tokens, want);
        }
        let mut logits = Vec::with_capacity(want.len() * self.model.config.n_vocab);
        for c0 in (0..tokens.len()).step_by(N_UBATCH) {
            let c1 = (c0 + N_UBATCH).min(tokens.len());
            let (w0, w1) = (want.start.clamp(c0, c1), want.end.clamp(c0, c1));
            let l = self.forward_exact_ubatch(&tokens[c0..c1], w0 - c0..w1.max(w0) - c0)?;
            logits.extend_from_slice(l);
        }
        self.b.logits = logits;
        Ok(&self.b.logits)
    }

    fn forward_exact_ubatch(&mut self, tokens: &[u32], want: Range<usize>) -> Result<&[f32]> {
        let m = self.model;
        let c = &m.config;
        let t_n = tokens.len();
        let (e, qd, kvd, hd) = (c.n_embd, c.q_dim(), c.kv_dim(), c.head_dim);
        let pos0 = self.seqs[0].tokens.len();
        let rows = Batch::sequence(tokens, pos0, 0, 0..0).rows;
        let Session {
            seqs,
            pool,
            b,
            ropes,
            rope_of,
            ..
        } = self;
        let mode = match c.rope_type {
            RopeType::Normal => RopeMode::Normal,
            RopeType::Neox => RopeMode::Neox,
        };
        let (ety, edata) = (m.weights.tok_embd.0, &m.weights.tok_embd.1[..]);
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
        for (l, w) in m.weights.layers.iter().enumerate() {
            norm_rows(&b.x, &w.attn_norm, c.eps, &mut b.xn);
            trace("attn_norm", l, &b.xn);
            let Qkv::Split { q, k, v } = &w.qkv else {
                unreachable!("checked at load")
            };
            matmul(pool, q, &b.xn, t_n, &mut b.q);
            matmul(pool, k, &b.xn, t_n, &mut b.k);
            matmul(pool, v, &b.xn, t_n, &mut b.v);
            let table = &ropes[rope_of[l]];
            let norm = |x: &mut [f32], w: &[f32]| norm::rms_norm_heads_ref(x, w, c.eps);
            let rot =
                |x: &mut [f32], pos: usize| rope::rope(mode, x, hd, table.cos(pos), table.sin(pos));
            qk_into_cache(c, w, l, &rows, b, seqs, norm, rot);
            let cache = &seqs[0].cache;
            trace("Qcur", l, &b.q);
            trace("Kcur", l, &b.k);
            trace("Vcur", l, &b.v);
            // Gemma 3 scales Q (`ggml_scale`) and runs attention with a scale of 1; the others
            // pass the scale to flash attention, which applies it to each score.
            let fa_scale = if c.arch == Arch::Gemma3 {
                b.q.iter_mut().for_each(|v| *v *= c.attn_scale);
                1.0
            } else {
                c.attn_scale
            };
            // Attention, one query row and head at a time, over the f16 cache in place, on
            // the path llama.cpp's flash attention takes for this ubatch: tiled for 64+
            // rows, split across the threads for one row once its padded KV view reaches
            // 512 cells (llama.cpp pads n_kv to 256), else one chunk.
            let (ks, vs) = cache
                .f16_rows(l)
                .expect("f16 cache checked at session start");
            let window = c.window_of(l);
            let cells = cache.n_ctx().next_multiple_of(256);
            let nth = pool.threads();
            b.att.resize(t_n * qd, 0.0);
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
                    let q = &b.q[t * qd + h * hd..t * qd + (h + 1) * hd];
                    let out = &mut b.att[t * qd + h * hd..t * qd + (h + 1) * hd];
                    let key = |i: usize| &ks[i * kvd + off..][..hd];
                    let value = |i: usize| &vs[i * kvd + off..][..hd];
                    if t_n >= attention::FA_TILE_Q {
                        attention::flash_attn_row_tiled(
                            q,
                            pos + 1,
                            visible,
                            key,
                            value,
                            fa_scale,
                            out,
                        );
                    } else if t_n == 1 && n_kv >= 512 {
                        attention::flash_attn_row_split_kv(
                            q, n_kv, visible, key, value, fa_scale, nth, out,
                        );
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
            trace("kqv_out", l, &b.att);
            matmul(pool, &w.wo, &b.att, t_n, &mut b.o);
            trace("attn_out", l, &b.o);
            if let Some(pn) = &w.post_attn_norm {
                for r in b.o.chunks_exact_mut(e) {
                    norm::rms_norm_heads_ref(r, pn, c.eps);
                }
            }
            trace("attn_post_norm", l, &b.o);
            add(&mut b.x, &b.o);
            trace("sa_out", l, &b.x);

            norm_rows(&b.x, &w.ffn_norm, c.eps, &mut b.xn);
            trace("ffn_norm", l, &b.xn);
            let GateUp::Split { gate, up } = &w.gate_up else {
                unreachable!("checked at load")
            };
            matmul(pool, gate, &b.xn, t_n, &mut b.g);
            matmul(pool, up, &b.xn, t_n, &mut b.u);
            b.h.resize(b.g.len(), 0.0);
            match c.ffn_act {
                FfnAct::Silu => vec::swiglu(&b.g, &b.u, &mut b.h),
                FfnAct::GeluTanh => gelu::geglu(&b.g, &b.u, &mut b.h),
            }
            trace("ffn_gate", l, &b.g);
            trace("ffn_up", l, &b.u);
            trace("ffn_geglu", l, &b.h);
            matmul(pool, &w.down, &b.h, t_n, &mut b.o);
            trace("ffn_out", l, &b.o);
            if let Some(pn) = &w.post_ffw_norm {
                for r in b.o.chunks_exact_mut(e) {
                    norm::rms_norm_heads_ref(r, pn, c.eps);
                }
            }
            trace("ffn_post_norm", l, &b.o);
            add(&mut b.x, &b.o);
            trace("l_out", l, &b.x);
        }
        self.seqs[0].tokens.extend_from_slice(tokens);
        let b = &mut self.b;
        let rows = &b.x[want.start * e..want.end * e];
        let mut xn = Vec::new();
        norm_rows(rows, &m.weights.output_norm, c.eps, &mut xn);
        matmul(
            &self.pool,
            &m.weights.output,
            &xn,
            want.len(),
            &mut b.logits,
        );
        if c.final_logit_softcap > 0.0 {
            let s = c.final_logit_softcap;
            b.logits.iter_mut().for_each(|v| *v = (*v / s).tanh() * s);
        }
        Ok(&b.logits)
    }
}
