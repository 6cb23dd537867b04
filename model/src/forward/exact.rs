//! The forward pass in llama.cpp's arithmetic (`Numerics::Ggml`): the same layer order as
//! [`super::Session::forward`], but every operation is a `pocket_kernels::ggml_exact` twin
//! of the ggml kernel llama.cpp runs for it, over the GGUF's own blocks (no repacking), so
//! the logits equal llama.cpp's bit for bit. Matrices are split by rows across the pool;
//! everything else is scalar. Only what the twins cover loads ([`check`]).

use std::ops::Range;

use pocket_kernels::formats::{self, q4_1::BlockQ4_1, q8_0::BlockQ8_0, q8_1::BlockQ8_1};
use pocket_kernels::ggml_exact::{attention, dots, quantize, rope, vec};
use pocket_kernels::ops::norm;
use pocket_kernels::ops::rope::RopeMode;
use pocket_kernels::GgmlType;

use super::{add, add_rows, Result, Session, SharedOut};
use crate::config::{Config, FfnAct, RopeType};
use crate::linear::Linear;
use crate::threadpool::ThreadPool;
use crate::weights::{GateUp, Qkv, Weights};

/// Why `Numerics::Ggml` cannot run this model, if it cannot.
pub(super) fn check(c: &Config, w: &Weights) -> std::result::Result<(), String> {
    if c.ffn_act != FfnAct::Silu {
        return Err("its feed-forward activation (GELU) has no bit-exact twin yet".into());
    }
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
        match m {
            Linear::Generic {
                ty: GgmlType::Q4_1 | GgmlType::Q8_0,
                ..
            } => {}
            Linear::Generic { ty, .. } => {
                return Err(format!("weights of type {ty} have no bit-exact twin yet"))
            }
            Linear::Packed(_) => return Err("packed weights (load without packing)".into()),
        }
    }
    Ok(())
}

/// `out[t][r] = W[r] · x[t]` as ggml's `mul_mat` for Q4_1 / Q8_0 weights on x86: each row
/// of `x` quantized once (q8_1 / q8_0), then one `vec_dot` per output (llamafile's sgemm
/// tiles, which take the Q8_0 case, sum each output in the same order).
fn matmul(pool: &ThreadPool, lin: &Linear, x: &[f32], tokens: usize, out: &mut Vec<f32>) {
    let Linear::Generic {
        ty,
        data,
        rows,
        cols,
    } = *lin
    else {
        unreachable!("checked at load")
    };
    let nb = cols / 32;
    out.resize(tokens * rows, 0.0);
    let (mut a1, mut a0) = (Vec::new(), Vec::new());
    match ty {
        GgmlType::Q4_1 => {
            a1 = vec![bytemuck::Zeroable::zeroed(); tokens * nb];
            for (xr, ar) in x.chunks_exact(cols).zip(a1.chunks_exact_mut(nb)) {
                quantize::quantize_row_q8_1(xr, ar);
            }
        }
        _ => {
            a0 = vec![bytemuck::Zeroable::zeroed(); tokens * nb];
            for (xr, ar) in x.chunks_exact(cols).zip(a0.chunks_exact_mut(nb)) {
                quantize::quantize_row_q8_0(xr, ar);
            }
        }
    }
    let (a1, a0): (&[BlockQ8_1], &[BlockQ8_0]) = (&a1, &a0);
    let rb = ty.row_bytes(cols as u64).unwrap() as usize;
    let dst = SharedOut(out.as_mut_ptr());
    let nth = pool.threads();
    pool.run(|i| {
        let (mut t41, mut t80) = (Vec::new(), Vec::new());
        for r in ThreadPool::split(rows, nth, i) {
            let wr = &data[r * rb..(r + 1) * rb];
            for t in 0..tokens {
                let v = match ty {
                    GgmlType::Q4_1 => dots::vec_dot_q4_1_q8_1(
                        blocks::<BlockQ4_1>(wr, &mut t41),
                        &a1[t * nb..(t + 1) * nb],
                    ),
                    _ => dots::vec_dot_q8_0_q8_0(
                        blocks::<BlockQ8_0>(wr, &mut t80),
                        &a0[t * nb..(t + 1) * nb],
                    ),
                };
                // SAFETY: this share owns rows `split(rows, nth, i)` of every token's output
                // (`tokens x rows`, allocated above); shares are disjoint; `run` joins.
                unsafe { *dst.get().add(t * rows + r) = v };
            }
        }
    });
}

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
        let m = self.model;
        let c = &m.config;
        let t_n = tokens.len();
        let (e, qd, kvd, hd) = (c.n_embd, c.q_dim(), c.kv_dim(), c.head_dim);
        let pos0 = self.pos;
        let Session {
            cache,
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
        for (l, w) in m.weights.layers.iter().enumerate() {
            norm_rows(&b.x, &w.attn_norm, c.eps, &mut b.xn);
            let Qkv::Split { q, k, v } = &w.qkv else {
                unreachable!("checked at load")
            };
            matmul(pool, q, &b.xn, t_n, &mut b.q);
            matmul(pool, k, &b.xn, t_n, &mut b.k);
            matmul(pool, v, &b.xn, t_n, &mut b.v);
            if let Some([bq, bk, bv]) = &w.bias {
                add_rows(&mut b.q, bq);
                add_rows(&mut b.k, bk);
                add_rows(&mut b.v, bv);
            }
            let table = &ropes[rope_of[l]];
            for t in 0..t_n {
                let pos = pos0 + t;
                let qr = &mut b.q[t * qd..(t + 1) * qd];
                if let Some(qn) = &w.q_norm {
                    norm::rms_norm_heads_ref(qr, qn, c.eps);
                }
                rope::rope(mode, qr, hd, table.cos(pos), table.sin(pos));
                let kr = &mut b.k[t * kvd..(t + 1) * kvd];
                if let Some(kn) = &w.k_norm {
                    norm::rms_norm_heads_ref(kr, kn, c.eps);
                }
                rope::rope(mode, kr, hd, table.cos(pos), table.sin(pos));
                cache.write(l, pos, kr, &b.v[t * kvd..(t + 1) * kvd]);
            }
            // Attention, one query row and head at a time, over the f16 cache in place.
            let (ks, vs) = cache.f16_rows(l).expect("f16 cache checked at session start");
            let window = c.window_of(l);
            b.att.resize(t_n * qd, 0.0);
            for t in 0..t_n {
                let pos = pos0 + t;
                let lo = if window > 0 {
                    (pos + 1).saturating_sub(window)
                } else {
                    0
                };
                for h in 0..c.n_head {
                    let off = (h / c.group()) * hd;
                    attention::flash_attn_row(
                        &b.q[t * qd + h * hd..t * qd + (h + 1) * hd],
                        pos + 1 - lo,
                        |i| &ks[(lo + i) * kvd + off..][..hd],
                        |i| &vs[(lo + i) * kvd + off..][..hd],
                        c.attn_scale,
                        &mut b.att[t * qd + h * hd..t * qd + (h + 1) * hd],
                    );
                }
            }
            matmul(pool, &w.wo, &b.att, t_n, &mut b.o);
            if let Some(pn) = &w.post_attn_norm {
                for r in b.o.chunks_exact_mut(e) {
                    norm::rms_norm_heads_ref(r, pn, c.eps);
                }
            }
            add(&mut b.x, &b.o);

            norm_rows(&b.x, &w.ffn_norm, c.eps, &mut b.xn);
            let GateUp::Split { gate, up } = &w.gate_up else {
                unreachable!("checked at load")
            };
            matmul(pool, gate, &b.xn, t_n, &mut b.g);
            matmul(pool, up, &b.xn, t_n, &mut b.u);
            b.h.resize(b.g.len(), 0.0);
            vec::swiglu(&b.g, &b.u, &mut b.h);
            matmul(pool, &w.down, &b.h, t_n, &mut b.o);
            if let Some(pn) = &w.post_ffw_norm {
                for r in b.o.chunks_exact_mut(e) {
                    norm::rms_norm_heads_ref(r, pn, c.eps);
                }
            }
            add(&mut b.x, &b.o);
        }
        self.pos += t_n;
        self.tokens.extend_from_slice(tokens);
        let b = &mut self.b;
        let rows = &b.x[want.start * e..want.end * e];
        let mut xn = Vec::new();
        norm_rows(rows, &m.weights.output_norm, c.eps, &mut xn);
        matmul(&self.pool, &m.weights.output, &xn, want.len(), &mut b.logits);
        if c.final_logit_softcap > 0.0 {
            let s = c.final_logit_softcap;
            b.logits.iter_mut().for_each(|v| *v = (*v / s).tanh() * s);
        }
        Ok(&b.logits)
    }
}
