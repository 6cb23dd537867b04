//! The base model's side of LoRA.
//!
//! * [`prepare`]: pocket's fused gate/up kernel (`GateUp::SwiGlu`) writes `silu(gate)·up`
//!   and never the gate or up rows themselves, so an adapter of `ffn_gate` / `ffn_up`
//!   has nothing to add to. The layers an adapter adapts there get a stacked gate/up
//!   matrix instead (repacked from the mapped file); the other layers keep the fused
//!   kernel. Fused Q/K/V needs nothing: the walker adds to each part's rows.
//! * [`merge`] (`--lora-merge`; llama.cpp merges offline with `llama-export-lora`): the
//!   adapter folded into the weights at load: `W + s·B·A` dequantized, added and
//!   requantized, then packed; zero adapter work per token. A 4-bit grid is too coarse for
//!   the update (requantizing to Q4_1 added a second 4-bit rounding to every adapted
//!   matrix: SmolLM2 PPL 77.6 merged against 68.9 at run time), so matrices of a type
//!   coarser than 8 bits are stored merged as Q8_0 ([`merged_type`]): more bytes per
//!   decode step instead (measured in the README's LoRA section, checked in
//!   `model/tests/lora.rs`).

use pocket_kernels::formats;
use pocket_kernels::matmul::PackedMatrix;
use pocket_kernels::GgmlType;

use super::load::Base;
use super::{LoraAdapter, LoraError, LoraForm, LoraPair, LoraSet, Proj};
use crate::linear::Linear;
use crate::weights::{GateUp, Qkv};
use crate::Model;

impl LoraAdapter {
    /// Opens an adapter, checks it against `model` and holds it in `form`.
    pub fn open_for(
        path: impl AsRef<std::path::Path>,
        model: &Model,
        form: LoraForm,
    ) -> Result<Self, LoraError> {
        let base = Base {
            gguf: model.gguf(),
            n_layer: model.config.n_layer,
        };
        LoraAdapter::open_as(path, &base, form)
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
        // The 2 MiB folio spans a read can have mapped, as the loader releases them.
        g.release_around(bg, g.bytes());
        g.release_around(bu, g.bytes());
        model.weights.layers[l].gate_up = GateUp::Stacked(Linear::Packed(stacked));
    }
    Ok(())
}

/// The type a matrix of type `ty` is stored in once an adapter is merged into it: its own
/// when it has 8 bits a weight or more, Q8_0 for the coarser ones (whose own grid would
/// round most of the update away and add its noise on top).
pub fn merged_type(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0 => ty,
        _ => GgmlType::Q8_0,
    }
}

/// Folds `adapters` at their user scales into `model`'s packed weights, each adapted
/// matrix requantized once to [`merged_type`] (fast numerics only: ggml numerics reads
/// the file's own blocks in place). Matrices packed together with an adapted one (fused
/// Q/K/V, gate/up) are converted to the same type, unchanged otherwise.
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
        let adapted = |ps: &[Proj]| ps.iter().any(|&p| !pairs_of(p).is_empty());
        if !adapted(&Proj::ALL) {
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
        // The projections packed as one matrix share a type.
        let qkv_one = matches!(w.qkv, Qkv::Fused(_));
        let gate_up_one = !matches!(w.gate_up, GateUp::Split { .. });
        let group = |p: Proj| -> Vec<Proj> {
            match p {
                Proj::Q | Proj::K | Proj::V if qkv_one => vec![Proj::Q, Proj::K, Proj::V],
                Proj::Gate | Proj::Up if gate_up_one => vec![Proj::Gate, Proj::Up],
                p => vec![p],
            }
        };
        // The bytes of each projection: the file's, or requantized with the adapter added.
        let g = model.gguf();
        let part = |p: Proj| -> Result<(GgmlType, Vec<u8>), LoraError> {
            let name = format!("blk.{l}.{}.weight", p.stem());
            let (info, bytes) = g.tensor(&name).map_err(|e| err(l, e.to_string()))?;
            let ty = info.ggml_type;
            let out = if adapted(&group(p)) {
                let to = merged_type(ty);
                (to, merged((ty, bytes), to, &pairs_of(p), l)?)
            } else {
                (ty, bytes.to_vec())
            };
            // Packed from the copy: the mapped pages need not stay resident too.
            g.release_pages(bytes);
            Ok(out)
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

/// `W + Σ s·B·A` requantized to `to`, over `pairs` (pair, final scale; none: `W` only
/// converted), `W` of type `w.0`.
fn merged(
    w: (GgmlType, &[u8]),
    to: GgmlType,
    pairs: &[(&LoraPair, f32)],
    l: usize,
) -> Result<Vec<u8>, LoraError> {
    let (ty, w) = w;
    let n = w.len() / ty.type_size() * ty.block_size();
    let mut x = vec![0f32; n];
    formats::dequantize(ty, w, &mut x).map_err(|e| err(l, e.to_string()))?;
    for &(p, s) in pairs {
        if p.q8.is_some() {
            return Err(err(l, "an int8 (run-time) adapter cannot be merged"));
        }
        let (pa, pb) = (p.a.to_f32(), p.b_rows());
        let n_in = p.n_in;
        for (o, row) in x.chunks_exact_mut(n_in).enumerate() {
            let b = &pb[o * p.rank..][..p.rank];
            for (r, &br) in b.iter().enumerate() {
                let f = s * br;
                let a = &pa[r * n_in..][..n_in];
                row.iter_mut().zip(a).for_each(|(v, &a)| *v += f * a);
            }
        }
    }
    let mut out = Vec::with_capacity(n / to.block_size() * to.type_size());
    formats::quantize(to, &x, &mut out).map_err(|e| err(l, e.to_string()))?;
    Ok(out)
}
