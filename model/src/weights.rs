//! The model's tensors: every one is looked up and shape-checked ([`validate`]) before
//! any is packed, so a bad file fails fast with the tensor's name. Matrices become
//! [`Linear`]s (packed, or zero-copy generic); norms and biases are small f32 copies.

use pocket_kernels::formats;
use pocket_kernels::matmul::PackedMatrix;
use pocket_kernels::GgmlType;

use crate::config::{Config, FfnAct};
use std::sync::Arc;

use crate::gguf::{Gguf, GgufFile, TensorBytes};
use crate::linear::{packable, Linear};

#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error("tensor {0} is missing")]
    Missing(String),
    #[error("tensor {name} has shape {got:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<u64>,
        got: Vec<u64>,
    },
    #[error("tensor {name}: {why}")]
    Bad { name: String, why: String },
}

/// The Q/K/V projections: one fused packed matrix, or three.
#[allow(clippy::large_enum_variant)] // one per layer: its size is irrelevant, a box is noise
pub enum Qkv {
    /// `Linear::Packed` with parts `[q_dim, kv_dim, kv_dim]`.
    Fused(Linear),
    Split {
        q: Linear,
        k: Linear,
        v: Linear,
    },
}

/// Gate and up projections.
pub enum GateUp {
    /// Packed gate/up pair whose kernel writes `silu(gate)·up` directly.
    SwiGlu(Linear),
    /// Gate rows then up rows in one packed matrix (`2·n_ff` outputs).
    Stacked(Linear),
    Split {
        gate: Linear,
        up: Linear,
    },
}

pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub qkv: Qkv,
    pub bias: Option<[Vec<f32>; 3]>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Linear,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub gate_up: GateUp,
    pub down: Linear,
    pub post_ffw_norm: Option<Vec<f32>>,
}

pub struct Weights {
    /// Token embeddings, raw (rows dequantized on lookup).
    pub tok_embd: (GgmlType, TensorBytes),
    pub output_norm: Vec<f32>,
    /// The LM head (the token embedding when the file has no `output.weight`).
    pub output: Linear,
    pub tied: bool,
    pub layers: Vec<Layer>,
}

/// Options for loading.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Repack Q4_0/Q4_1/Q8_0 matrices for the SIMD kernels (else every matrix is generic).
    pub pack: bool,
    /// Fuse Q/K/V and gate/up when packed.
    pub fuse: bool,
    /// Drop the mapped pages of each tensor from the resident set once it is packed
    /// (`GgufFile::release_pages`).
    pub release_mapped: bool,
    /// The arithmetic of the forward pass (`Numerics::Ggml` implies no packing).
    pub numerics: Numerics,
}

/// Which arithmetic the forward pass uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Numerics {
    /// pocket's own kernels (packed, SIMD, multi-threaded).
    #[default]
    Fast,
    /// llama.cpp's x86 CPU arithmetic bit for bit (`pocket_kernels::ggml_exact`): the same
    /// logits, hence the same greedy text, as llama.cpp b11434 on x86-64 AVX2. Scalar and
    /// many times slower; for parity checks. Covers the formats and ops its twins exist for.
    Ggml,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            pack: true,
            fuse: true,
            release_mapped: true,
            numerics: Numerics::Fast,
        }
    }
}

/// Every tensor the config calls for: (name, ggml dims innermost first, required).
pub fn tensor_specs(c: &Config) -> Vec<(String, Vec<u64>, bool)> {
    let (e, q, kv, ff, hd, v) = (
        c.n_embd as u64,
        c.q_dim() as u64,
        c.kv_dim() as u64,
        c.n_ff as u64,
        c.head_dim as u64,
        c.n_vocab as u64,
    );
    let mut s = vec![
        ("token_embd.weight".to_string(), vec![e, v], true),
        ("output_norm.weight".to_string(), vec![e], true),
        ("output.weight".to_string(), vec![e, v], false),
    ];
    for l in 0..c.n_layer {
        let n = |t: &str| format!("blk.{l}.{t}");
        s.push((n("attn_norm.weight"), vec![e], true));
        s.push((n("attn_q.weight"), vec![e, q], true));
        s.push((n("attn_k.weight"), vec![e, kv], true));
        s.push((n("attn_v.weight"), vec![e, kv], true));
        if c.qkv_bias {
            s.push((n("attn_q.bias"), vec![q], true));
            s.push((n("attn_k.bias"), vec![kv], true));
            s.push((n("attn_v.bias"), vec![kv], true));
        }
        if c.qk_norm {
            s.push((n("attn_q_norm.weight"), vec![hd], true));
            s.push((n("attn_k_norm.weight"), vec![hd], true));
        }
        s.push((n("attn_output.weight"), vec![q, e], true));
        if c.post_norms {
            s.push((n("post_attention_norm.weight"), vec![e], true));
            s.push((n("post_ffw_norm.weight"), vec![e], true));
        }
        s.push((n("ffn_norm.weight"), vec![e], true));
        s.push((n("ffn_gate.weight"), vec![e, ff], true));
        s.push((n("ffn_up.weight"), vec![e, ff], true));
        s.push((n("ffn_down.weight"), vec![ff, e], true));
    }
    s
}

/// Checks presence, shape and that the type has a matmul/dequantize path, for every
/// tensor, before any work.
pub fn validate<B: AsRef<[u8]>>(g: &Gguf<B>, c: &Config) -> Result<(), WeightError> {
    for (name, dims, required) in tensor_specs(c) {
        let Some(info) = g.tensor_info(&name) else {
            if required {
                return Err(WeightError::Missing(name));
            }
            continue;
        };
        if info.dims != dims {
            return Err(WeightError::Shape {
                name,
                expected: dims,
                got: info.dims.clone(),
            });
        }
        let is_matrix = dims.len() == 2;
        let ok = if is_matrix {
            crate::linear::act_format(info.ggml_type).is_some()
        } else {
            let mut probe = vec![0f32; info.ggml_type.block_size()];
            let unit = info.ggml_type.type_size();
            formats::dequantize(info.ggml_type, &vec![0u8; unit], &mut probe).is_ok()
        };
        if !ok {
            return Err(WeightError::Bad {
                name,
                why: format!("type {} is not supported", info.ggml_type),
            });
        }
    }
    Ok(())
}

fn vector<B: AsRef<[u8]>>(g: &Gguf<B>, name: &str) -> Result<Vec<f32>, WeightError> {
    let (info, bytes) = g
        .tensor(name)
        .map_err(|_| WeightError::Missing(name.to_string()))?;
    let mut v = vec![0f32; info.n_elements() as usize];
    formats::dequantize(info.ggml_type, bytes, &mut v).map_err(|e| WeightError::Bad {
        name: name.to_string(),
        why: e.to_string(),
    })?;
    Ok(v)
}

/// Called with the mapped bytes of each tensor once an owned packed copy of it exists.
pub type Release<'r> = &'r dyn Fn(&[u8]);

fn matrix(
    g: &Arc<GgufFile>,
    name: &str,
    pack: bool,
    release: Release,
) -> Result<Linear, WeightError> {
    let (info, bytes) = g
        .tensor(name)
        .map_err(|_| WeightError::Missing(name.to_string()))?;
    let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
    let ty = info.ggml_type;
    if pack && packable(ty, cols) {
        // Packed: the mapped pages are released as the panels are written.
        return PackedMatrix::pack_releasing(ty, bytes, rows, cols, Default::default(), release)
            .map(Linear::Packed)
            .map_err(pack_err(name.to_string()));
    }
    let bytes = TensorBytes::of(g, name).map_err(|_| WeightError::Missing(name.to_string()))?;
    Linear::new(ty, bytes, rows, cols, false).map_err(|e| WeightError::Bad {
        name: name.to_string(),
        why: e.to_string(),
    })
}

fn raw<'a, B: AsRef<[u8]>>(g: &'a Gguf<B>, name: &str) -> (GgmlType, &'a [u8]) {
    let (info, bytes) = g.tensor(name).expect("validated");
    (info.ggml_type, bytes)
}

fn pack_err(name: String) -> impl FnOnce(pocket_kernels::matmul::PackError) -> WeightError {
    move |e| WeightError::Bad {
        name,
        why: e.to_string(),
    }
}

impl Weights {
    /// Loads (validates, packs, borrows) every weight. `release` is called with the mapped
    /// bytes of each tensor right after its packed copy is made, so the loader can drop
    /// those pages from the resident set before the next tensor is read: peak memory is then
    /// the packed weights plus one tensor, not the file plus its packed copy.
    pub fn load(
        g: &Arc<GgufFile>,
        c: &Config,
        o: LoadOptions,
        release: Release,
    ) -> Result<Weights, WeightError> {
        validate(g, c)?;
        let (ety, _) = raw(g, "token_embd.weight");
        let edata = TensorBytes::of(g, "token_embd.weight").expect("validated");
        let tok_embd = (ety, edata);
        let tied = g.tensor_info("output.weight").is_none();
        let head = if tied {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let output = matrix(g, head, o.pack, release)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for l in 0..c.n_layer {
            let n = |t: &str| format!("blk.{l}.{t}");
            // The layer's vectors are copied before its matrices are packed: a read faults
            // in whole page-cache folios (up to 2 MiB), so a norm read after the packing
            // re-mapped the released pages of the matrices around it (~2 MiB a layer
            // resident until the end of the load, +57 MiB peak on the MNN-Pocket shape).
            let opt = |t: &str, on: bool| -> Result<Option<Vec<f32>>, WeightError> {
                on.then(|| vector(g, &n(t))).transpose()
            };
            let attn_norm = vector(g, &n("attn_norm.weight"))?;
            let bias = if c.qkv_bias {
                Some([
                    vector(g, &n("attn_q.bias"))?,
                    vector(g, &n("attn_k.bias"))?,
                    vector(g, &n("attn_v.bias"))?,
                ])
            } else {
                None
            };
            let q_norm = opt("attn_q_norm.weight", c.qk_norm)?;
            let k_norm = opt("attn_k_norm.weight", c.qk_norm)?;
            let post_attn_norm = opt("post_attention_norm.weight", c.post_norms)?;
            let ffn_norm = vector(g, &n("ffn_norm.weight"))?;
            let post_ffw_norm = opt("post_ffw_norm.weight", c.post_norms)?;
            let (tq, bq) = raw(g, &n("attn_q.weight"));
            let (tk, bk) = raw(g, &n("attn_k.weight"));
            let (tv, bv) = raw(g, &n("attn_v.weight"));
            let qkv = if o.pack && o.fuse && packable(tq, c.n_embd) && tq == tk && tk == tv {
                Qkv::Fused(Linear::Packed(
                    PackedMatrix::pack_stacked(
                        tq,
                        &[(bq, c.q_dim()), (bk, c.kv_dim()), (bv, c.kv_dim())],
                        c.n_embd,
                    )
                    .map_err(pack_err(n("attn_q.weight")))?,
                ))
                .released([bq, bk, bv], release)
            } else {
                Qkv::Split {
                    q: matrix(g, &n("attn_q.weight"), o.pack, release)?,
                    k: matrix(g, &n("attn_k.weight"), o.pack, release)?,
                    v: matrix(g, &n("attn_v.weight"), o.pack, release)?,
                }
            };
            let (tg, bg) = raw(g, &n("ffn_gate.weight"));
            let (tu, bu) = raw(g, &n("ffn_up.weight"));
            let fusable = o.pack && o.fuse && packable(tg, c.n_embd) && tg == tu;
            let gate_up = if fusable && c.ffn_act == FfnAct::Silu {
                GateUp::SwiGlu(Linear::Packed(
                    PackedMatrix::pack_swiglu(tg, bg, bu, c.n_ff, c.n_embd)
                        .map_err(pack_err(n("ffn_gate.weight")))?,
                ))
                .released([bg, bu], release)
            } else if fusable {
                GateUp::Stacked(Linear::Packed(
                    PackedMatrix::pack_stacked(tg, &[(bg, c.n_ff), (bu, c.n_ff)], c.n_embd)
                        .map_err(pack_err(n("ffn_gate.weight")))?,
                ))
                .released([bg, bu], release)
            } else {
                GateUp::Split {
                    gate: matrix(g, &n("ffn_gate.weight"), o.pack, release)?,
                    up: matrix(g, &n("ffn_up.weight"), o.pack, release)?,
                }
            };
            layers.push(Layer {
                attn_norm,
                qkv,
                bias,
                q_norm,
                k_norm,
                wo: matrix(g, &n("attn_output.weight"), o.pack, release)?,
                post_attn_norm,
                ffn_norm,
                gate_up,
                down: matrix(g, &n("ffn_down.weight"), o.pack, release)?,
                post_ffw_norm,
            });
        }
        Ok(Weights {
            tok_embd,
            output_norm: vector(g, "output_norm.weight")?,
            output,
            tied,
            layers,
        })
    }

    /// Bytes of repacked (copied) weights.
    pub fn packed_bytes(&self) -> usize {
        let lin = |l: &Linear| match l {
            Linear::Packed(p) => p.bytes(),
            _ => 0,
        };
        let mut s = lin(&self.output);
        for l in &self.layers {
            s += match &l.qkv {
                Qkv::Fused(x) => lin(x),
                Qkv::Split { q, k, v } => lin(q) + lin(k) + lin(v),
            };
            s += match &l.gate_up {
                GateUp::SwiGlu(x) | GateUp::Stacked(x) => lin(x),
                GateUp::Split { gate, up } => lin(gate) + lin(up),
            };
            s += lin(&l.wo) + lin(&l.down);
        }
        s
    }
}

/// `x.released(tensors, release)`: calls `release` on each source tensor of a packed
/// fused matrix, then returns `x`.
trait Released: Sized {
    fn released<const N: usize>(self, tensors: [&[u8]; N], release: Release) -> Self {
        tensors.into_iter().for_each(release);
        self
    }
}
impl Released for Qkv {}
impl Released for GateUp {}
