//! Softmax over one row, in place: `x_i = exp(x_i - max) / sum_j exp(x_j - max)`.
//! Rows are expected to hold finite values or `-inf` (masked), at least one finite; an empty
//! row is left alone (a row of only `-inf` yields NaN, as in ggml).

use super::{path, Path};
use crate::Isa;

/// Scalar reference: `f32::exp`, sum accumulated in f64 (as ggml).
pub fn softmax_ref(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Softmax of `x` in place on level `isa`.
pub fn softmax_with(isa: Isa, x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    match path(isa) {
        Path::Scalar => softmax_ref(x),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => super::simd::softmax(t, x),
    }
}

/// [`softmax_with`] on [`Isa::active`].
pub fn softmax(x: &mut [f32]) {
    softmax_with(Isa::active(), x)
}
