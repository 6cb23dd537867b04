//! Random LoRA adapters for a base model, in llama.cpp's adapter format, for tests and
//! benchmarks (`pocket synth --lora-for MODEL --lora-rank R`).
//!
//! `A` is Gaussian with variance `1/n_in` (so `A x` has about the size of `x`'s entries),
//! and `B` is scaled so that at user scale 1 the product `s·B(A x)` is about `strength`
//! times the base projection's own output (from an estimate of the base rows' RMS):
//! large enough to move perplexity and greedy text, so a test that drops it fails,
//! small enough to leave the model working.

use std::io::{self, Write};

use pocket_kernels::formats;
use pocket_kernels::GgmlType;

use super::Proj;
use crate::gguf::{Gguf, GgufWriter, MetaValue, Value};
use crate::synth::weights::Rng;

/// What to write.
#[derive(Clone, Debug)]
pub struct AdapterSpec {
    pub rank: usize,
    /// `adapter.lora.alpha` (the scale is `user_scale · alpha / rank`).
    pub alpha: f32,
    pub seed: u64,
    /// The projections of every layer that get a pair.
    pub targets: Vec<Proj>,
    /// F32 or F16 (the types convert_lora_to_gguf.py writes by default).
    pub ty: GgmlType,
    /// Size of the product against the base projection's output, at user scale 1.
    pub strength: f32,
}

impl Default for AdapterSpec {
    fn default() -> Self {
        AdapterSpec {
            rank: 8,
            alpha: 8.0,
            seed: 0,
            targets: Proj::ALL.to_vec(),
            ty: GgmlType::F32,
            strength: 0.08,
        }
    }
}

/// Rows of the base tensor sampled for the RMS estimate.
const RMS_ROWS: usize = 16;

/// Writes a random adapter for `base` (every layer's `targets`) to `out`; returns the
/// number of pairs written.
pub fn write_adapter<B: AsRef<[u8]>>(
    base: &Gguf<B>,
    spec: &AdapterSpec,
    out: &mut dyn Write,
) -> io::Result<usize> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    if spec.rank == 0 {
        return Err(bad("the rank must be at least 1".into()));
    }
    if !matches!(spec.ty, GgmlType::F32 | GgmlType::F16) {
        return Err(bad(format!(
            "adapter tensors are f32 or f16, not {}",
            spec.ty
        )));
    }
    let arch = match base.get("general.architecture") {
        Some(Value::String(s)) => s.into_owned(),
        _ => return Err(bad("the base model has no general.architecture".into())),
    };
    let mut w = GgufWriter::new();
    w.kv("general.architecture", MetaValue::String(arch));
    w.kv("general.type", MetaValue::String("adapter".into()));
    w.kv(
        "general.name",
        MetaValue::String(format!("pocket synthetic LoRA rank {}", spec.rank)),
    );
    w.kv("adapter.type", MetaValue::String("lora".into()));
    w.kv("adapter.lora.alpha", MetaValue::F32(spec.alpha));
    let mut rng = Rng::new(spec.seed);
    let scale = if spec.alpha != 0.0 {
        spec.alpha / spec.rank as f32
    } else {
        1.0
    };
    let mut n = 0;
    for l in 0.. {
        if base
            .tensor_info(&format!("blk.{l}.attn_q.weight"))
            .is_none()
        {
            break;
        }
        for &p in &spec.targets {
            let name = format!("blk.{l}.{}.weight", p.stem());
            let Some(info) = base.tensor_info(&name) else {
                continue;
            };
            let (n_in, n_out) = (info.dims[0] as usize, info.dims[1] as usize);
            let w_rms = row_rms(base, &name, n_in).map_err(bad)?;
            let r = spec.rank;
            let a: Vec<f32> = (0..r * n_in)
                .map(|_| (rng.normal() / (n_in as f64).sqrt()) as f32)
                .collect();
            // |W x| ~ sqrt(n_in)·w_rms·|x|; |B A x| ~ sqrt(rank)·σ_B·|x|.
            let sigma_b = spec.strength as f64 * (n_in as f64).sqrt() * w_rms
                / ((r as f64).sqrt() * scale as f64);
            let b: Vec<f32> = (0..n_out * r)
                .map(|_| (rng.normal() * sigma_b) as f32)
                .collect();
            let enc = |x: &[f32]| -> io::Result<Vec<u8>> {
                let mut v = Vec::new();
                formats::quantize(spec.ty, x, &mut v).map_err(|e| bad(e.to_string()))?;
                Ok(v)
            };
            w.tensor(
                format!("{name}.lora_a"),
                spec.ty,
                &[n_in as u64, r as u64],
                enc(&a)?,
            )?;
            w.tensor(
                format!("{name}.lora_b"),
                spec.ty,
                &[r as u64, n_out as u64],
                enc(&b)?,
            )?;
            n += 1;
        }
    }
    if n == 0 {
        return Err(bad(
            "the base model has none of the targeted projections".into()
        ));
    }
    w.write_to(out)?;
    Ok(n)
}

/// RMS of the first rows of base tensor `name`.
fn row_rms<B: AsRef<[u8]>>(g: &Gguf<B>, name: &str, n_in: usize) -> Result<f64, String> {
    let (info, bytes) = g.tensor(name).map_err(|e| e.to_string())?;
    let rows = (info.dims[1] as usize).min(RMS_ROWS);
    let rb = info
        .ggml_type
        .row_bytes(n_in as u64)
        .ok_or_else(|| format!("{name}: bad row size"))? as usize;
    let mut x = vec![0f32; rows * n_in];
    formats::dequantize(info.ggml_type, &bytes[..rows * rb], &mut x).map_err(|e| e.to_string())?;
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    Ok((ss / x.len() as f64).sqrt().max(1e-8))
}
