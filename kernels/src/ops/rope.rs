//! Rotary position embedding with precomputed cos/sin tables.
//!
//! For rotary dimension pair `i` (`0 <= i < n_rot/2`) at position `pos` the angle is
//! `pos * freq_scale * base^(-2i/n_rot)`, and the pair `(a, b)` becomes
//! `(a cos - b sin, a sin + b cos)`. Which elements form pair `i` is the [`RopeMode`]:
//! - [`RopeMode::Normal`] (llama.cpp mode 0, LLaMA GGUFs): adjacent elements `(2i, 2i+1)`;
//! - [`RopeMode::Neox`] (mode 2, Qwen2/Qwen3, ...): halves `(i, i + n_rot/2)`.
//!
//! Elements at and beyond `n_rot` (partial rotary, e.g. phi) are left unchanged.
//! The table is computed in f64 and rounded once (llama.cpp multiplies the angle step by step
//! in f32, which drifts by a few ulp over the head; both are within the tests' tolerances).

use super::{path, Path};
use crate::Isa;

/// Which elements of a head rotate together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i+1)`: llama.cpp `LLAMA_ROPE_TYPE_NORM`.
    Normal,
    /// Split halves `(i, i + n_rot/2)`: llama.cpp `LLAMA_ROPE_TYPE_NEOX`.
    Neox,
}

/// cos/sin of every (position, pair) angle for positions `0..max_pos`.
#[derive(Clone, Debug)]
pub struct RopeTable {
    n_rot: usize,
    max_pos: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// `n_rot` rotated dimensions per head (even, `<= head_dim`), frequency base `base`
    /// (GGUF `rope.freq_base`, e.g. 10000 or 1000000), positions `0..max_pos`.
    pub fn new(n_rot: usize, base: f32, max_pos: usize) -> RopeTable {
        RopeTable::with_freq_scale(n_rot, base, 1.0, max_pos)
    }

    /// As [`RopeTable::new`] with linear position scaling (`rope.scaling.factor` = 1/freq_scale).
    pub fn with_freq_scale(n_rot: usize, base: f32, freq_scale: f32, max_pos: usize) -> RopeTable {
        assert!(
            n_rot.is_multiple_of(2) && n_rot > 0,
            "rope: n_rot {n_rot} must be even and > 0"
        );
        let half = n_rot / 2;
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        // ggml's own angles (ggml_rope_cache_init): theta_scale = powf(base, -2/n_rot) and
        // theta = p·theta_scale^i by repeated f32 multiplication, then f32 cos/sin. An exact
        // f64 angle differs from ggml's by up to ~1e-5 rad at the last pairs, enough to move
        // logits by as much as any other arithmetic difference; matching it costs nothing.
        let theta_scale = base.powf(-2.0 / n_rot as f32);
        for pos in 0..max_pos {
            let mut theta = pos as f32;
            for _ in 0..half {
                let t = freq_scale * theta;
                cos.push(t.cos());
                sin.push(t.sin());
                theta *= theta_scale;
            }
        }
        RopeTable {
            n_rot,
            max_pos,
            cos,
            sin,
        }
    }

    pub fn n_rot(&self) -> usize {
        self.n_rot
    }

    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    /// The `n_rot/2` cosines at `pos`.
    pub fn cos(&self, pos: usize) -> &[f32] {
        let h = self.n_rot / 2;
        &self.cos[pos * h..(pos + 1) * h]
    }

    /// The `n_rot/2` sines at `pos`.
    pub fn sin(&self, pos: usize) -> &[f32] {
        let h = self.n_rot / 2;
        &self.sin[pos * h..(pos + 1) * h]
    }
}

fn check(x_len: usize, head_dim: usize, half: usize, sin_len: usize) {
    assert_eq!(half, sin_len, "rope: cos and sin lengths differ");
    assert!(
        head_dim > 0 && x_len.is_multiple_of(head_dim),
        "rope: row length {x_len} is not a multiple of the head size {head_dim}"
    );
    assert!(
        2 * half <= head_dim,
        "rope: n_rot {} exceeds head size {head_dim}",
        2 * half
    );
}

/// Scalar reference: rotates every head of `x` (heads of `head_dim` consecutive values) by
/// the angles whose cos/sin are given (`cos.len() == n_rot/2`).
pub fn rope_ref(mode: RopeMode, x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    check(x.len(), head_dim, cos.len(), sin.len());
    let half = cos.len();
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (ia, ib) = match mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (a, b) = (head[ia], head[ib]);
            head[ia] = a * cos[i] - b * sin[i];
            head[ib] = a * sin[i] + b * cos[i];
        }
    }
}

/// Rotates every head of `x` in place with explicit cos/sin rows, on level `isa`.
pub fn rope_cs_with(
    isa: Isa,
    mode: RopeMode,
    x: &mut [f32],
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    check(x.len(), head_dim, cos.len(), sin.len());
    match path(isa) {
        Path::Scalar => rope_ref(mode, x, head_dim, cos, sin),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => {
            for head in x.chunks_exact_mut(head_dim) {
                super::simd::rope(t, mode, head, cos, sin)
            }
        }
    }
}

/// Rotates every head of `x` (heads of `head_dim` values) to position `pos`, on level `isa`.
/// Panics if `pos >= table.max_pos()`.
pub fn rope_with(
    isa: Isa,
    mode: RopeMode,
    x: &mut [f32],
    head_dim: usize,
    table: &RopeTable,
    pos: usize,
) {
    assert!(
        pos < table.max_pos,
        "rope: position {pos} beyond the table ({})",
        table.max_pos
    );
    rope_cs_with(isa, mode, x, head_dim, table.cos(pos), table.sin(pos))
}

/// [`rope_with`] on [`Isa::active`].
pub fn rope(mode: RopeMode, x: &mut [f32], head_dim: usize, table: &RopeTable, pos: usize) {
    rope_with(Isa::active(), mode, x, head_dim, table, pos)
}
