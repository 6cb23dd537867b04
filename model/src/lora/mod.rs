//! LoRA adapters in llama.cpp's GGUF adapter format (`general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha`, tensors `<base weight>.lora_a` /
//! `.lora_b`, as `convert_lora_to_gguf.py` writes them).
//!
//! * [`load`]: reading an adapter and checking it against the base model (architecture,
//!   every pair complete, every base tensor present with matching shapes);
//! * [`apply`]: the run-time product `out += scale · B(A x)` over a step's rows, beside
//!   the packed base weights (which stay shared and untouched);
//! * [`prepare`]: what the base needs before an adapter can run on it (the fused
//!   SwiGLU gate/up kernel writes `silu(gate)·up` directly, so an adapted layer gets a
//!   stacked gate/up instead), and `--lora-merge`: an adapter folded into the weights;
//! * [`synth`]: random adapters of a given rank for tests and benchmarks.
//!
//! The scale of a pair is llama.cpp's `llama_adapter_lora_weight::get_scale`:
//! `user_scale · alpha / rank`, or `user_scale` when the file has no alpha (0).

pub mod apply;
pub mod fused;
pub mod load;
pub mod prepare;
pub mod q8;
pub mod synth;

use std::sync::Arc;

use pocket_kernels::ops::lowrank;
use pocket_kernels::Isa;

pub use q8::PairQ8;

pub use load::LoraError;

/// The projections of a layer an adapter may adapt, in GGUF's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proj {
    Q,
    K,
    V,
    Out,
    Gate,
    Up,
    Down,
}

impl Proj {
    /// The product a layer computes after the one whose last part is `self` (a fused Q/K/V
    /// ends with V, a stacked gate/up with up), as (layer offset, its parts): what a decode
    /// product prefetches the adapters of.
    pub fn next_product(self) -> (usize, &'static [Proj]) {
        match self {
            Proj::Q => (0, &[Proj::K]),
            Proj::K => (0, &[Proj::V]),
            Proj::V => (0, &[Proj::Out]),
            Proj::Out => (0, &[Proj::Gate, Proj::Up]),
            Proj::Gate => (0, &[Proj::Up]),
            Proj::Up => (0, &[Proj::Down]),
            Proj::Down => (1, &[Proj::Q, Proj::K, Proj::V]),
        }
    }

    pub const ALL: [Proj; 7] = [
        Proj::Q,
        Proj::K,
        Proj::V,
        Proj::Out,
        Proj::Gate,
        Proj::Up,
        Proj::Down,
    ];

    /// The base tensor's name stem (`blk.N.<stem>.weight`).
    pub fn stem(self) -> &'static str {
        match self {
            Proj::Q => "attn_q",
            Proj::K => "attn_k",
            Proj::V => "attn_v",
            Proj::Out => "attn_output",
            Proj::Gate => "ffn_gate",
            Proj::Up => "ffn_up",
            Proj::Down => "ffn_down",
        }
    }

    fn from_stem(s: &str) -> Option<Proj> {
        Proj::ALL.into_iter().find(|p| p.stem() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One adapted matrix `W` (`n_out × n_in`): `W + s·B·A` with `A` (`rank × n_in`) and
/// `B` (`n_out × rank`), both row-major.
#[derive(Clone, Debug)]
pub struct LoraPair {
    pub rank: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub a: LoraMat,
    /// `B` row-major (`n_out × rank`), or, on the fast path, empty with [`Self::bt`].
    pub b: LoraMat,
    /// `Bᵀ` in panels of 8 outputs (`lowrank::pack_bt`), the fast path's form: `B·m` over
    /// any run of outputs is then one contiguous read, 8 outputs per vector, instead of
    /// `n_out` dots of `rank`.
    pub bt: Option<LoraMat>,
    /// The fast path's int8 form ([`PairQ8`]; `a` and `b` then empty, `bt` `None`).
    pub q8: Option<PairQ8>,
}

impl LoraPair {
    /// `mid[r] = A[r] · x` for the `rank` rows of `A` (`x`: one input row).
    pub fn a_product(&self, isa: Isa, x: &[f32], mid: &mut [f32]) {
        self.a_rows(isa, x, 0..self.rank, mid);
    }

    /// `mid[j] = A[rows.start + j] · x`: some rows of [`Self::a_product`], the same value
    /// whichever rows a call takes.
    pub fn a_rows(&self, isa: Isa, x: &[f32], rows: std::ops::Range<usize>, mid: &mut [f32]) {
        if let Some(q) = &self.q8 {
            return q.a_product(isa, x, rows, mid);
        }
        for (r, m) in rows.zip(mid.iter_mut()) {
            *m = self.a.dot(isa, r * self.n_in, x);
        }
    }

    /// `out[j] += scale · (B mid)[c0 + j]`: columns `c0 .. c0 + out.len()` of the `B`
    /// product (each column `Σ_r` in rank order, then scaled and added: the same value
    /// whichever columns a call takes).
    pub fn add_b_product(&self, isa: Isa, mid: &[f32], scale: f32, c0: usize, out: &mut [f32]) {
        let (rank, n_out) = (self.rank, self.n_out);
        if let Some(q) = &self.q8 {
            return q.add_b_product(isa, mid, scale, c0, out);
        }
        match &self.bt {
            Some(LoraMat::Bf16(bt)) => {
                let product = lowrank::BtProduct {
                    bt,
                    n_out,
                    c0,
                    mid,
                    scale,
                };
                lowrank::add_bt_product_with(isa, &product, out);
            }
            Some(LoraMat::F32(bt)) => {
                for (j, o) in out.iter_mut().enumerate() {
                    let mut d = 0f32;
                    for (r, &m) in mid.iter().enumerate() {
                        d += m * bt[lowrank::bt_index(c0 + j, r, rank)];
                    }
                    *o += scale * d;
                }
            }
            None => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o += scale * self.b.dot(isa, (c0 + j) * rank, mid);
                }
            }
        }
    }

    /// Asks the cache for what [`Self::add_b_product`] reads for output columns `cols`.
    pub fn prefetch_b(&self, isa: Isa, cols: std::ops::Range<usize>) {
        if let Some(q) = &self.q8 {
            pocket_kernels::ops::lowrank_q8::prefetch_with(isa, &q.bt, cols);
        } else if let Some(LoraMat::Bf16(bt)) = &self.bt {
            lowrank::prefetch_bt_with(isa, bt, self.rank, cols);
        }
    }

    /// Requests share `part` of `of` of `A` into the cache (int8 form; a hint, see
    /// `lowrank_a8::prefetch_part_with`).
    pub fn prefetch_a_part(&self, isa: Isa, part: std::ops::Range<usize>, of: usize) {
        if let Some(q) = &self.q8 {
            pocket_kernels::ops::lowrank_a8::prefetch_part_with(isa, &q.a, part, of);
        }
    }

    /// `B` row-major in f32, whichever form it is held in.
    pub fn b_rows(&self) -> Vec<f32> {
        if let Some(q) = &self.q8 {
            return q.bt.to_rows();
        }
        match &self.bt {
            None => self.b.to_f32().into_owned(),
            Some(bt) => {
                let t = bt.to_f32();
                let mut b = vec![0f32; self.n_out * self.rank];
                for o in 0..self.n_out {
                    for r in 0..self.rank {
                        b[o * self.rank + r] = t[lowrank::bt_index(o, r, self.rank)];
                    }
                }
                b
            }
        }
    }
}

/// The elements of `A` or `B`: f32 as read (ggml numerics, merging: llama.cpp computes
/// an f32 adapter in f32), or bf16 (`POCKET_LORA_FORM=bf16`; the default fast path is
/// int8, [`PairQ8`]). A decode step reads every adapter element once, so its cost is
/// bandwidth: a rank-16 adapter on all projections of the MNN-Pocket shape is 29 MB in
/// f32 beside 190 MB of Q4_1 weights, 14 MB in bf16, ~8 MB in int8. bf16's conversion is
/// a shift (vectorized), unlike f16's.
#[derive(Clone, Debug)]
pub enum LoraMat {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
}

impl LoraMat {
    pub fn len(&self) -> usize {
        match self {
            LoraMat::F32(v) => v.len(),
            LoraMat::Bf16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as f32.
    pub fn to_f32(&self) -> std::borrow::Cow<'_, [f32]> {
        match self {
            LoraMat::F32(v) => v.into(),
            LoraMat::Bf16(v) => v.iter().map(|&h| bf16_to_f32(h)).collect::<Vec<_>>().into(),
        }
    }

    /// bf16, rounded to nearest even (ggml's `GGML_FP32_TO_BF16`).
    pub fn to_bf16(&self) -> LoraMat {
        match self {
            LoraMat::F32(v) => LoraMat::Bf16(
                v.iter()
                    .map(|&x| pocket_kernels::formats::f16::fp32_to_bf16(x).to_bits())
                    .collect(),
            ),
            LoraMat::Bf16(_) => self.clone(),
        }
    }

    /// `Σ self[start + i] · x[i]`.
    pub fn dot(&self, isa: Isa, start: usize, x: &[f32]) -> f32 {
        match self {
            LoraMat::F32(v) => crate::linear::dot_f32(&v[start..start + x.len()], x),
            LoraMat::Bf16(v) => lowrank::dot_bf16_with(isa, &v[start..start + x.len()], x),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            LoraMat::F32(v) => v.len() * 4,
            LoraMat::Bf16(v) => v.len() * 2,
        }
    }
}

fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// A loaded adapter: its pairs by layer and projection.
#[derive(Debug)]
pub struct LoraAdapter {
    /// Where it came from (the file path), for listings and errors.
    pub name: String,
    /// `adapter.lora.alpha` (0 when absent: the scale is then the user's scale alone).
    pub alpha: f32,
    pub layers: Vec<[Option<LoraPair>; 7]>,
}

impl LoraAdapter {
    pub fn pair(&self, layer: usize, p: Proj) -> Option<&LoraPair> {
        self.layers.get(layer)?[p.index()].as_ref()
    }

    /// The number of adapted matrices.
    pub fn n_pairs(&self) -> usize {
        self.layers.iter().flatten().flatten().count()
    }

    /// The scale of `pair` at `user_scale`, as llama.cpp computes it (same f32 order).
    pub fn scale_of(&self, pair: &LoraPair, user_scale: f32) -> f32 {
        if self.alpha != 0.0 {
            user_scale * self.alpha / pair.rank as f32
        } else {
            user_scale
        }
    }

    /// Bytes the adapter holds in memory.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .flatten()
            .map(|p| p.a.bytes() + p.b.bytes() + p.q8.as_ref().map_or(0, PairQ8::bytes))
            .sum()
    }

    /// The same adapter with every pair converted by `f` (the forms below).
    fn map_pairs(&self, f: impl Fn(LoraPair) -> LoraPair) -> LoraAdapter {
        let layers = self
            .layers
            .iter()
            .map(|ps| ps.clone().map(|p| p.map(&f)))
            .collect();
        LoraAdapter {
            name: self.name.clone(),
            alpha: self.alpha,
            layers,
        }
    }

    /// The fast path's default form: each pair in int8 ([`PairQ8`]).
    pub fn to_int8(&self) -> LoraAdapter {
        self.map_pairs(LoraPair::to_int8)
    }

    /// The same adapter with bf16 elements (see [`LoraMat`]).
    pub fn to_bf16(&self) -> LoraAdapter {
        self.map_pairs(LoraPair::to_bf16)
    }
}

impl LoraPair {
    /// This pair in int8 ([`PairQ8`]).
    pub fn to_int8(self) -> LoraPair {
        let (a, b) = (self.a.to_f32(), self.b_rows());
        let q8 = PairQ8::new(&a, &b, self.rank, self.n_in, self.n_out);
        LoraPair {
            a: LoraMat::F32(Vec::new()),
            b: LoraMat::F32(Vec::new()),
            bt: None,
            q8: Some(q8),
            ..self
        }
    }

    /// This pair with bf16 elements, `B` as `Bᵀ` panels.
    pub fn to_bf16(self) -> LoraPair {
        let LoraMat::Bf16(b) = LoraMat::F32(self.b_rows()).to_bf16() else {
            unreachable!("to_bf16 gives bf16")
        };
        let bt = LoraMat::Bf16(lowrank::pack_bt(&b, self.n_out, self.rank));
        LoraPair {
            a: self.a.to_bf16(),
            b: LoraMat::Bf16(Vec::new()),
            bt: Some(bt),
            q8: None,
            ..self
        }
    }
}

/// The adapters a session applies, each with its user scale (llama.cpp's
/// `--lora-scaled FILE:SCALE`; `--lora FILE` is scale 1). Adapters at scale 0 are
/// skipped, so they cost nothing and leave the base model's logits exactly.
#[derive(Clone, Debug, Default)]
pub struct LoraSet {
    pub active: Vec<(Arc<LoraAdapter>, f32)>,
}

impl LoraSet {
    pub fn new(active: Vec<(Arc<LoraAdapter>, f32)>) -> LoraSet {
        LoraSet { active }
    }

    /// The pairs (with their final scales) that adapt projection `p` of layer `l`.
    pub fn pairs(&self, l: usize, p: Proj) -> impl Iterator<Item = (&LoraPair, f32)> {
        self.active.iter().filter_map(move |(a, s)| {
            let pair = a.pair(l, p)?;
            (*s != 0.0).then(|| (pair, a.scale_of(pair, *s)))
        })
    }

    /// Whether any active adapter adapts one of `ps` in layer `l`.
    pub fn touches(&self, l: usize, ps: &[Proj]) -> bool {
        ps.iter().any(|&p| self.pairs(l, p).next().is_some())
    }

    /// The same adapters at the same scales (what a cached prefix was computed with).
    pub fn same_as(&self, other: &LoraSet) -> bool {
        let on = |s: &LoraSet| -> Vec<(*const LoraAdapter, f32)> {
            s.active
                .iter()
                .filter(|(_, x)| *x != 0.0)
                .map(|(a, x)| (Arc::as_ptr(a), *x))
                .collect()
        };
        on(self) == on(other)
    }

    pub fn is_empty(&self) -> bool {
        self.active.iter().all(|(_, s)| *s == 0.0)
    }
}

/// How the fast path holds an adapter's elements (`POCKET_LORA_FORM`: `int8`, the
/// default; `bf16`; `f32`, as read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraForm {
    Int8,
    Bf16,
    F32,
}

impl LoraForm {
    /// The form `POCKET_LORA_FORM` names (unset or empty: int8).
    pub fn from_env() -> Result<LoraForm, LoraError> {
        match std::env::var("POCKET_LORA_FORM").as_deref() {
            Err(_) | Ok("") | Ok("int8") => Ok(LoraForm::Int8),
            Ok("bf16") => Ok(LoraForm::Bf16),
            Ok("f32") => Ok(LoraForm::F32),
            Ok(other) => Err(LoraError::Form(other.to_string())),
        }
    }

    /// `a` in this form.
    pub fn convert(self, a: LoraAdapter) -> LoraAdapter {
        a.map_pairs(|p| self.pair(p))
    }

    /// A pair in this form.
    pub fn pair(self, p: LoraPair) -> LoraPair {
        match self {
            LoraForm::Int8 => p.to_int8(),
            LoraForm::Bf16 => p.to_bf16(),
            LoraForm::F32 => p,
        }
    }
}

/// Loads the adapters `specs` (file, user scale) for `model` and makes them its default
/// set (every new session applies them), preparing the layers they adapt; with `merge`,
/// folds them into the weights instead ([`prepare::merge`]) and leaves the set empty.
/// Returns the loaded adapters.
pub fn attach(
    model: &mut crate::Model,
    specs: &[(std::path::PathBuf, f32)],
    merge: bool,
) -> Result<Vec<Arc<LoraAdapter>>, LoraError> {
    // The fast path runs the int8 form (`LoraAdapter::to_int8`: ~0.57 of bf16's bytes,
    // a decode step's adapter cost), or the one `POCKET_LORA_FORM` names; ggml numerics
    // and merging, f32 as read.
    let form = if !merge && model.numerics == crate::Numerics::Fast {
        LoraForm::from_env()?
    } else {
        LoraForm::F32
    };
    let adapters: Vec<Arc<LoraAdapter>> = specs
        .iter()
        .map(|(p, _)| Ok(Arc::new(LoraAdapter::open_for(p, model, form)?)))
        .collect::<Result<_, LoraError>>()?;
    if merge {
        let scaled: Vec<(&LoraAdapter, f32)> = adapters
            .iter()
            .map(|a| &**a)
            .zip(specs.iter().map(|s| s.1))
            .collect();
        prepare::merge(model, &scaled)?;
        return Ok(adapters);
    }
    let refs: Vec<&LoraAdapter> = adapters.iter().map(|a| &**a).collect();
    prepare::prepare(model, &refs)?;
    model.lora_default = LoraSet::new(
        adapters
            .iter()
            .cloned()
            .zip(specs.iter().map(|(_, s)| *s))
            .collect(),
    );
    Ok(adapters)
}
