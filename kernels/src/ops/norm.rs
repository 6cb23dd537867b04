//! RMSNorm: `out = x / sqrt(mean(x²) + eps) * w`, as llama.cpp's RMS_NORM followed by MUL
//! (the one fusion ggml does): the scale is computed once per row in f32 and applied as
//! `(x * scale) * w`, in that order, on every path.

use super::{path, Path};
use crate::Isa;

/// Scalar reference: sum of squares accumulated in f64 (as ggml's `ggml_float`).
pub fn rms_norm_ref(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    check(x.len(), w.len(), out.len());
    let scale = scale_ref(x, eps);
    for ((o, &xv), &wv) in out.iter_mut().zip(x).zip(w) {
        *o = (xv * scale) * wv;
    }
}

/// Scalar reference of [`rms_norm_heads_with`].
pub fn rms_norm_heads_ref(x: &mut [f32], w: &[f32], eps: f32) {
    check_heads(x.len(), w.len());
    for head in x.chunks_exact_mut(w.len()) {
        let scale = scale_ref(head, eps);
        for (v, &wv) in head.iter_mut().zip(w) {
            *v = (*v * scale) * wv;
        }
    }
}

fn scale_ref(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len().max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

fn check(n: usize, nw: usize, nout: usize) {
    assert_eq!(n, nw, "rms_norm: weight length {nw} != row length {n}");
    assert_eq!(n, nout, "rms_norm: output length {nout} != row length {n}");
}

fn check_heads(n: usize, head_dim: usize) {
    assert!(
        head_dim > 0 && n.is_multiple_of(head_dim),
        "rms_norm_heads: row length {n} is not a multiple of the head size {head_dim}"
    );
}

/// RMSNorm of one row with weight `w` into `out`, on level `isa`.
///
/// Panics if the lengths differ or if this CPU cannot run `isa`.
pub fn rms_norm_with(isa: Isa, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    check(x.len(), w.len(), out.len());
    match path(isa) {
        Path::Scalar => rms_norm_ref(x, w, eps, out),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => super::simd::rms_norm(t, x, w, eps, out),
    }
}

/// [`rms_norm_with`] on [`Isa::active`].
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_with(Isa::active(), x, w, eps, out)
}

/// RMSNorm of one row in place.
pub fn rms_norm_inplace_with(isa: Isa, x: &mut [f32], w: &[f32], eps: f32) {
    check(x.len(), w.len(), x.len());
    rms_norm_inplace_on(path(isa), x, w, eps)
}

/// [`rms_norm_inplace_with`] on [`Isa::active`].
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    rms_norm_inplace_with(Isa::active(), x, w, eps)
}

/// Per-head RMSNorm in place (Qwen3's q_norm / k_norm): `x` holds consecutive heads of
/// `w.len()` values each, every head normalised on its own with the shared weight `w`.
pub fn rms_norm_heads_with(isa: Isa, x: &mut [f32], w: &[f32], eps: f32) {
    check_heads(x.len(), w.len());
    let p = path(isa);
    for head in x.chunks_exact_mut(w.len()) {
        rms_norm_inplace_on(p, head, w, eps)
    }
}

/// [`rms_norm_heads_with`] on [`Isa::active`].
pub fn rms_norm_heads(x: &mut [f32], w: &[f32], eps: f32) {
    rms_norm_heads_with(Isa::active(), x, w, eps)
}

/// RMSNorm of `x` (as long as `w`) in place on body `p`.
fn rms_norm_inplace_on(p: Path, x: &mut [f32], w: &[f32], eps: f32) {
    match p {
        Path::Scalar => {
            let scale = scale_ref(x, eps);
            for (v, &wv) in x.iter_mut().zip(w) {
                *v = (*v * scale) * wv;
            }
        }
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => super::simd::rms_norm_inplace(t, x, w, eps),
    }
}
