//! The base model's side of LoRA.
//!
//! * [`prepare`]: pocket's fused gate/up kernel (`GateUp::SwiGlu`) writes `silu(gate)·up`
//!   and never the gate or up rows themselves, so an adapter of `ffn_gate` / `ffn_up`
//!   has nothing to add to. The layers an adapter adapts there get a stacked gate/up
//!   matrix instead (repacked from the mapped file); the other layers keep the fused
//!   kernel. Fused Q/K/V needs nothing: the walker adds to each part's rows.
//! * [`merge`] (`--lora-merge`; llama.cpp merges offline with `llama-export-lora`): the
//!   adapter folded into the weights at load: `W + s·B·A` dequantized, added and
//!   requantized to `W`'s own type, then packed; zero run-time cost, at the price of the
//!   requantization of every adapted matrix (measured in `tests/lora_parity.rs`).

use pocket_kernels::formats;
use pocket_kernels::matmul::PackedMatrix;

use super::load::Base;
use super::{LoraAdapter, LoraError, LoraPair, LoraSet, Proj};
use crate::linear::Linear;
use crate::weights::{GateUp, Qkv};
use crate::Model;

impl LoraAdapter {
    /// Opens an adapter and checks it against `model`.
    pub fn open_for(path: impl AsRef<std::path::Path>, model: &Model) -> Result<Self, LoraError> {
        let base = Base {
            gguf: model.gguf(),
            n_layer: model.config.n_layer,
        };
        LoraAdapter::open(path, &base)
    }
}

fn err(layer: usize, why: impl Into<String>) -> LoraError {
    LoraError::Prepare {
        layer,
        why: why.into(),
    }
}

/// Whether `set` can run on `model` as loaded: every adapted matrix's shape matches and
/// no adapted gate/up is a fused SwiGLU matrix.
pub fn check(model: &Model, set: &LoraSet) -> Result<(), LoraError> {
    for (a, _) in &set.active {
        if a.layers.len() != model.weights.layers.len() {
            return Err(err(0, format!("{} was loaded for another model", a.name)));
        }
        for (l, w) in model.weights.layers.iter().enumerate() {
            let gate_up = a.pair(l, Proj::Gate).is_some() || a.pair(l, Proj::Up).is_some();
            if gate_up && matches!(w.gate_up, GateUp::SwiGlu(_)) {
                return Err(err(
                    l,
                    "its gate/up is fused (call lora::prepare::prepare first)",
                ));
            }
        }
    }
    Ok(())
}

/// Makes `model` able to run `adapters`: each layer whose gate or up one of them adapts
/// gets a stacked gate/up matrix in place of the fused SwiGLU one.
pub fn prepare(model: &mut Model, adapters: &[&LoraAdapter]) -> Result<(), LoraError> {
    let n_ff = model.config.n_ff;
    let n_embd = model.config.n_embd;
    for l in 0..model.weights.layers.len() {
        let adapted = adapters
            .iter()
            .any(|a| a.pair(l, Proj::Gate).is_some() || a.pair(l, Proj::Up).is_some());
        let GateUp::SwiGlu(Linear::Packed(p)) = &model.weights.layers[l].gate_up else {
            continue;
        };
        if !adapted {
            continue;
        }
        let ty = p.ty;
        let g = model.gguf();
        let bytes = |t: &str| {
            g.tensor(&format!("blk.{l}.{t}.weight"))
                .map(|(_, b)| b)
                .map_err(|e| err(l, e.to_string()))
        };
        let (bg, bu) = (bytes("ffn_gate")?, bytes("ffn_up")?);
        let stacked = PackedMatrix::pack_stacked(ty, &[(bg, n_ff), (bu, n_ff)], n_embd)
            .map_err(|e| err(l, e.to_string()))?;
        g.release_pages(bg);
        g.release_pages(bu);
        model.weights.layers[l].gate_up = GateUp::Stacked(Linear::Packed(stacked));
    }
    Ok(())
}

/// Folds `adapters` at their user scales into `model`'s packed weights, each adapted
/// matrix requantized once (fast numerics only: ggml numerics reads the file's own blocks
/// in place).
pub fn merge(model: &mut Model, adapters: &[(&LoraAdapter, f32)]) -> Result<(), LoraError> {
    let c = model.config.clone();
    let (e, qd, kvd, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff);
    for l in 0..model.weights.layers.len() {
        let pairs_of = |p: Proj| -> Vec<(&LoraPair, f32)> {
            adapters
                .iter()
                .filter(|(_, s)| *s != 0.0)
                .filter_map(|(a, s)| a.pair(l, p).map(|x| (x, a.scale_of(x, *s))))
                .collect()
        };
        if Proj::ALL.iter().all(|&p| pairs_of(p).is_empty()) {
            continue;
        }
        let w = &model.weights.layers[l];
        let all_packed = [&w.wo, &w.down].iter().all(|x| x.is_packed())
            && match &w.qkv {
                Qkv::Fused(x) => x.is_packed(),
                Qkv::Split { q, k, v } => q.is_packed() && k.is_packed() && v.is_packed(),
            };
        if !all_packed {
            return Err(err(
                l,
                "--lora-merge needs packed weights (fast numerics, packable types)",
            ));
        }
        // The bytes of each projection: the file's, or requantized with the adapter added.
        let g = model.gguf();
        let part = |p: Proj| -> Result<(pocket_kernels::GgmlType, Vec<u8>), LoraError> {
            let name = format!("blk.{l}.{}.weight", p.stem());
            let (info, bytes) = g.tensor(&name).map_err(|e| err(l, e.to_string()))?;
            let ty = info.ggml_type;
            let pairs = pairs_of(p);
            if pairs.is_empty() {
                return Ok((ty, bytes.to_vec()));
            }
            Ok((ty, merged(ty, bytes, &pairs, l)?))
        };
        let packed = |ty, bytes: &[u8], rows, cols| {
            PackedMatrix::pack(ty, bytes, rows, cols)
                .map(Linear::Packed)
                .map_err(|x| err(l, x.to_string()))
        };
        let (q, k, v) = (part(Proj::Q)?, part(Proj::K)?, part(Proj::V)?);
        let (gt, up) = (part(Proj::Gate)?, part(Proj::Up)?);
        let (o, d) = (part(Proj::Out)?, part(Proj::Down)?);
        let w = &model.weights.layers[l];
        let qkv = match &w.qkv {
            Qkv::Fused(_) => Qkv::Fused(Linear::Packed(
                PackedMatrix::pack_stacked(q.0, &[(&q.1, qd), (&k.1, kvd), (&v.1, kvd)], e)
                    .map_err(|x| err(l, x.to_string()))?,
            )),
            Qkv::Split { .. } => Qkv::Split {
                q: packed(q.0, &q.1, qd, e)?,
                k: packed(k.0, &k.1, kvd, e)?,
                v: packed(v.0, &v.1, kvd, e)?,
            },
        };
        let gate_up = match &w.gate_up {
            GateUp::SwiGlu(_) => GateUp::SwiGlu(Linear::Packed(
                PackedMatrix::pack_swiglu(gt.0, &gt.1, &up.1, ff, e)
                    .map_err(|x| err(l, x.to_string()))?,
            )),
            GateUp::Stacked(_) => GateUp::Stacked(Linear::Packed(
                PackedMatrix::pack_stacked(gt.0, &[(&gt.1, ff), (&up.1, ff)], e)
                    .map_err(|x| err(l, x.to_string()))?,
            )),
            GateUp::Split { .. } => GateUp::Split {
                gate: packed(gt.0, &gt.1, ff, e)?,
                up: packed(up.0, &up.1, ff, e)?,
            },
        };
        let (wo, down) = (packed(o.0, &o.1, e, qd)?, packed(d.0, &d.1, e, ff)?);
        let w = &mut model.weights.layers[l];
        (w.qkv, w.gate_up, w.wo, w.down) = (qkv, gate_up, wo, down);
    }
    Ok(())
}

/// `W + Σ s·B·A` in `W`'s type `ty`, over `pairs` (pair, final scale).
fn merged(
    ty: pocket_kernels::GgmlType,
    w: &[u8],
    pairs: &[(&LoraPair, f32)],
    l: usize,
) -> Result<Vec<u8>, LoraError> {
    let (n_in, n_out) = (pairs[0].0.n_in, pairs[0].0.n_out);
    let mut x = vec![0f32; n_in * n_out];
    formats::dequantize(ty, w, &mut x).map_err(|e| err(l, e.to_string()))?;
    for &(p, s) in pairs {
        let (pa, pb) = (p.a.to_f32(), p.b_rows());
        for (o, row) in x.chunks_exact_mut(n_in).enumerate() {
            let b = &pb[o * p.rank..][..p.rank];
            for (r, &br) in b.iter().enumerate() {
                let f = s * br;
                let a = &pa[r * n_in..][..n_in];
                row.iter_mut().zip(a).for_each(|(v, &a)| *v += f * a);
            }
        }
    }
    let mut out = Vec::with_capacity(w.len());
    formats::quantize(ty, &x, &mut out).map_err(|e| err(l, e.to_string()))?;
    Ok(out)
}
