//! Reading an adapter file and checking it against the base model, as llama.cpp's
//! `llama_adapter_lora_init_impl` does (same rules, same order), with a typed error for
//! each way an adapter can be wrong.

use std::collections::BTreeMap;
use std::path::Path;

use pocket_kernels::formats;
use pocket_kernels::GgmlType;

use super::{LoraAdapter, LoraForm, LoraMat, LoraPair, Proj};
use crate::gguf::{Gguf, GgufError, GgufFile, TensorInfo, Value};

#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// Unreadable, truncated or corrupt file (the reader bounds-checks every tensor).
    #[error("LoRA adapter {path}: {source}")]
    Gguf { path: String, source: GgufError },
    #[error("{path} is not an adapter: general.type is {got:?} (expected \"adapter\")")]
    NotAdapter { path: String, got: String },
    #[error("{path}: adapter.type is {got:?}; only \"lora\" adapters are supported")]
    NotLora { path: String, got: String },
    #[error("{path} was made for architecture {adapter:?}, the model is {model:?}")]
    Arch {
        path: String,
        adapter: String,
        model: String,
    },
    #[error("{path}: tensor {name:?} is neither a .lora_a nor a .lora_b")]
    UnexpectedTensor { path: String, name: String },
    #[error("{path}: the LoRA pair of {name:?} has no {missing}")]
    HalfPair {
        path: String,
        name: String,
        missing: &'static str,
    },
    #[error("{path}: {name:?} does not exist in the base model (an adapter for another model?)")]
    NotInBase { path: String, name: String },
    #[error("{path}: {name:?}: pocket adapts the attention and FFN projections only")]
    Unsupported { path: String, name: String },
    #[error("{path}: {name:?} has the wrong shape (an adapter for another model?): {why}")]
    Shape {
        path: String,
        name: String,
        why: String,
    },
    #[error("{path}: {name:?}: tensors of type {ty} cannot be read")]
    Type {
        path: String,
        name: String,
        ty: GgmlType,
    },
    #[error("{0:?} is not FILE:SCALE with a number for SCALE")]
    BadScaled(String),
    #[error("POCKET_LORA_FORM={0:?}: expected int8, bf16 or f32")]
    Form(String),
    #[error("LoRA on layer {layer}: {why}")]
    Prepare { layer: usize, why: String },
}

/// The base tensors of the model an adapter is checked against: the base file's
/// architecture and tensor shapes.
pub struct Base<'g, B: AsRef<[u8]>> {
    pub gguf: &'g Gguf<B>,
    pub n_layer: usize,
}

impl LoraAdapter {
    /// Opens `path` and checks it against the base model `base` (elements as read, f32).
    pub fn open<B: AsRef<[u8]>>(
        path: impl AsRef<Path>,
        base: &Base<B>,
    ) -> Result<LoraAdapter, LoraError> {
        Self::open_as(path, base, LoraForm::F32)
    }

    /// [`Self::open`], each pair converted to `form` as soon as it is read and its mapped
    /// pages released: the load never holds the whole adapter in f32 beside its mapped
    /// file and its converted copy (a rank-16 adapter of the MNN-Pocket shape is 28.7 MB
    /// in f32 and 8.1 MiB in int8; holding all three raised the load's peak RSS by ~50 MiB).
    pub fn open_as<B: AsRef<[u8]>>(
        path: impl AsRef<Path>,
        base: &Base<B>,
        form: LoraForm,
    ) -> Result<LoraAdapter, LoraError> {
        let name = path.as_ref().display().to_string();
        let g = GgufFile::open(path.as_ref()).map_err(|source| LoraError::Gguf {
            path: name.clone(),
            source,
        })?;
        let whole = g.bytes();
        let done = |t: &TensorInfo| {
            g.release_around(g.tensor_data(t), whole);
        };
        Self::read(&g, name, base, (form, &done))
    }

    /// Reads the adapter in `g` (called `path` in errors), elements as read (f32).
    pub fn from_gguf<A: AsRef<[u8]>, B: AsRef<[u8]>>(
        g: &Gguf<A>,
        path: String,
        base: &Base<B>,
    ) -> Result<LoraAdapter, LoraError> {
        Self::read(g, path, base, (LoraForm::F32, &|_| {}))
    }

    /// Reads the adapter in `g`, each pair converted to `form` as it is read, then
    /// `done` called on its two tensors.
    fn read<A: AsRef<[u8]>, B: AsRef<[u8]>>(
        g: &Gguf<A>,
        path: String,
        base: &Base<B>,
        (form, done): (LoraForm, &dyn Fn(&TensorInfo)),
    ) -> Result<LoraAdapter, LoraError> {
        let text = |key: &str| match g.get(key) {
            Some(Value::String(s)) => s.into_owned(),
            _ => String::new(),
        };
        let general = text("general.type");
        if general != "adapter" {
            return Err(LoraError::NotAdapter { path, got: general });
        }
        let arch = text("general.architecture");
        let model_arch = match base.gguf.get("general.architecture") {
            Some(Value::String(s)) => s.into_owned(),
            _ => String::new(),
        };
        if arch != model_arch {
            return Err(LoraError::Arch {
                path,
                adapter: arch,
                model: model_arch,
            });
        }
        let kind = text("adapter.type");
        if kind != "lora" {
            return Err(LoraError::NotLora { path, got: kind });
        }
        let alpha = match g.get("adapter.lora.alpha") {
            Some(Value::F32(a)) => a,
            Some(Value::F64(a)) => a as f32,
            _ => 0.0,
        };
        let pairs = pair_up(g, &path)?;
        let mut layers: Vec<[Option<LoraPair>; 7]> = (0..base.n_layer).map(|_| empty()).collect();
        for (name, (a, b)) in pairs {
            let Some(w) = base.gguf.tensor_info(&name) else {
                return Err(LoraError::NotInBase { path, name });
            };
            let Some((layer, proj)) = parse_name(&name).filter(|(l, _)| *l < base.n_layer) else {
                return Err(LoraError::Unsupported { path, name });
            };
            let pair = form.pair(read_pair(g, &path, &name, w, a, b)?);
            done(a);
            done(b);
            layers[layer][proj.index()] = Some(pair);
        }
        Ok(LoraAdapter {
            name: path,
            alpha,
            layers,
        })
    }
}

fn empty() -> [Option<LoraPair>; 7] {
    Default::default()
}

type Halves<'g> = (Option<&'g TensorInfo>, Option<&'g TensorInfo>);

/// Pairs `X.lora_a` with `X.lora_b` by base name `X`; `*_norm.weight` tensors are skipped
/// as llama.cpp skips them; anything else is an error.
fn pair_up<'g, A: AsRef<[u8]>>(
    g: &'g Gguf<A>,
    path: &str,
) -> Result<BTreeMap<String, (&'g TensorInfo, &'g TensorInfo)>, LoraError> {
    let mut halves: BTreeMap<String, Halves<'g>> = BTreeMap::new();
    for t in g.tensors() {
        if let Some(base) = t.name.strip_suffix(".lora_a") {
            halves.entry(base.to_string()).or_default().0 = Some(t);
        } else if let Some(base) = t.name.strip_suffix(".lora_b") {
            halves.entry(base.to_string()).or_default().1 = Some(t);
        } else if !t.name.ends_with("_norm.weight") {
            return Err(LoraError::UnexpectedTensor {
                path: path.to_string(),
                name: t.name.clone(),
            });
        }
    }
    halves
        .into_iter()
        .map(|(name, h)| match h {
            (Some(a), Some(b)) => Ok((name, (a, b))),
            (a, _) => Err(LoraError::HalfPair {
                path: path.to_string(),
                missing: if a.is_none() { "lora_a" } else { "lora_b" },
                name,
            }),
        })
        .collect()
}

/// `blk.N.<stem>.weight` → (N, projection).
fn parse_name(name: &str) -> Option<(usize, Proj)> {
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
    let (n, stem) = rest.split_once('.')?;
    Some((n.parse().ok()?, Proj::from_stem(stem)?))
}

/// Checks the pair's shapes against the base tensor `w` (llama.cpp's rules: `A` is
/// `[n_in, rank]`, `B` is `[rank, n_out]` in ggml's innermost-first dims) and reads it.
fn read_pair<A: AsRef<[u8]>>(
    g: &Gguf<A>,
    path: &str,
    name: &str,
    w: &TensorInfo,
    a: &TensorInfo,
    b: &TensorInfo,
) -> Result<LoraPair, LoraError> {
    let shape = |why: String| LoraError::Shape {
        path: path.to_string(),
        name: name.to_string(),
        why,
    };
    for t in [a, b] {
        if t.dims.len() != 2 {
            return Err(shape(format!("{} has dims {:?}, not 2", t.name, t.dims)));
        }
    }
    let (n_in, n_out) = (w.dims[0], w.dims.get(1).copied().unwrap_or(1));
    if a.dims[0] != n_in || b.dims[1] != n_out {
        return Err(shape(format!(
            "lora_a {:?} and lora_b {:?} do not fit the base's {:?}",
            a.dims, b.dims, w.dims
        )));
    }
    if a.dims[1] != b.dims[0] {
        return Err(shape(format!(
            "lora_a's rank {} differs from lora_b's {} (lora_a not transposed?)",
            a.dims[1], b.dims[0]
        )));
    }
    let rank = a.dims[1] as usize;
    if rank == 0 {
        return Err(shape("rank 0".into()));
    }
    Ok(LoraPair {
        rank,
        n_in: n_in as usize,
        n_out: n_out as usize,
        a: LoraMat::F32(read_f32(g, path, a)?),
        b: LoraMat::F32(read_f32(g, path, b)?),
        bt: None,
        q8: None,
    })
}

fn read_f32<A: AsRef<[u8]>>(
    g: &Gguf<A>,
    path: &str,
    t: &TensorInfo,
) -> Result<Vec<f32>, LoraError> {
    let mut out = vec![0f32; t.n_elements() as usize];
    formats::dequantize(t.ggml_type, g.tensor_data(t), &mut out).map_err(|_| LoraError::Type {
        path: path.to_string(),
        name: t.name.clone(),
        ty: t.ggml_type,
    })?;
    Ok(out)
}

/// `FILE:SCALE` (llama.cpp's `--lora-scaled` element).
pub fn parse_scaled(s: &str) -> Result<(std::path::PathBuf, f32), LoraError> {
    let (file, scale) = s
        .rsplit_once(':')
        .ok_or_else(|| LoraError::BadScaled(s.to_string()))?;
    let scale: f32 = scale
        .trim()
        .parse()
        .map_err(|_| LoraError::BadScaled(s.to_string()))?;
    if file.is_empty() || !scale.is_finite() {
        return Err(LoraError::BadScaled(s.to_string()));
    }
    Ok((file.into(), scale))
}
