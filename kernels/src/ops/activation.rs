//! Activations: SiLU, GELU (tanh approximation) and SwiGLU (`silu(gate) * up`).
//!
//! GELU follows ggml's `ggml_gelu_f32` formula
//! `0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x²)))`. (llama.cpp's CPU backend by default
//! reads a 64K-entry table indexed by the f16 rounding of `x` for |x| < 10, so its results
//! differ from the formula by up to ~1e-3 relative; we compute the formula.) The SIMD paths
//! use the identity `0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y))`, which is also free of the
//! cancellation the tanh form has for negative `x`.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::simd;
use super::{path, Path};
use crate::Isa;

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

/// Scalar SiLU `x / (1 + exp(-x))`.
#[inline]
pub fn silu_scalar(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Scalar GELU, ggml's tanh formula.
#[inline]
pub fn gelu_scalar(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// Scalar reference of [`silu_with`].
pub fn silu_ref(x: &[f32], out: &mut [f32]) {
    check2(x.len(), out.len());
    for (o, &v) in out.iter_mut().zip(x) {
        *o = silu_scalar(v);
    }
}

/// Scalar reference of [`gelu_with`].
pub fn gelu_ref(x: &[f32], out: &mut [f32]) {
    check2(x.len(), out.len());
    for (o, &v) in out.iter_mut().zip(x) {
        *o = gelu_scalar(v);
    }
}

/// Scalar reference of [`swiglu_with`].
pub fn swiglu_ref(gate: &[f32], up: &[f32], out: &mut [f32]) {
    check3(gate.len(), up.len(), out.len());
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu_scalar(g) * u;
    }
}

fn check2(n: usize, nout: usize) {
    assert_eq!(
        n, nout,
        "activation: output length {nout} != input length {n}"
    );
}

fn check3(ng: usize, nu: usize, nout: usize) {
    assert_eq!(ng, nu, "swiglu: up length {nu} != gate length {ng}");
    assert_eq!(ng, nout, "swiglu: output length {nout} != gate length {ng}");
}

#[derive(Clone, Copy)]
enum Unary {
    Silu,
    Gelu,
}

impl Unary {
    fn scalar(self) -> fn(f32) -> f32 {
        match self {
            Unary::Silu => silu_scalar,
            Unary::Gelu => gelu_scalar,
        }
    }
}

/// `out[i] = op(x[i])` on level `isa`.
fn unary_with(isa: Isa, op: Unary, x: &[f32], out: &mut [f32]) {
    check2(x.len(), out.len());
    match path(isa) {
        Path::Scalar => {
            let f = op.scalar();
            for (o, &v) in out.iter_mut().zip(x) {
                *o = f(v);
            }
        }
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => match op {
            Unary::Silu => simd::silu(t, x, out),
            Unary::Gelu => simd::gelu(t, x, out),
        },
    }
}

/// `x[i] = op(x[i])` on level `isa`.
fn unary_inplace_with(isa: Isa, op: Unary, x: &mut [f32]) {
    match path(isa) {
        Path::Scalar => {
            let f = op.scalar();
            for v in x.iter_mut() {
                *v = f(*v);
            }
        }
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => match op {
            Unary::Silu => simd::silu_inplace(t, x),
            Unary::Gelu => simd::gelu_inplace(t, x),
        },
    }
}

/// The four entry points of one [`Unary`] op: `$with` (`out[i] = op(x[i])` on level `isa`),
/// `$plain` (that on [`Isa::active`]) and the in-place `$inplace_with` and `$inplace`.
macro_rules! unary_fns {
    ($op:ident, $name:literal: $with:ident, $plain:ident, $inplace_with:ident, $inplace:ident) => {
        #[doc = concat!("`out[i] = ", $name, "(x[i])` on level `isa`.")]
        pub fn $with(isa: Isa, x: &[f32], out: &mut [f32]) {
            unary_with(isa, Unary::$op, x, out)
        }

        #[doc = concat!("[`", stringify!($with), "`] on [`Isa::active`].")]
        pub fn $plain(x: &[f32], out: &mut [f32]) {
            $with(Isa::active(), x, out)
        }

        #[doc = concat!("`x[i] = ", $name, "(x[i])` in place on level `isa`.")]
        pub fn $inplace_with(isa: Isa, x: &mut [f32]) {
            unary_inplace_with(isa, Unary::$op, x)
        }

        #[doc = concat!("[`", stringify!($inplace_with), "`] on [`Isa::active`].")]
        pub fn $inplace(x: &mut [f32]) {
            $inplace_with(Isa::active(), x)
        }
    };
}

unary_fns!(Silu, "silu": silu_with, silu, silu_inplace_with, silu_inplace);
unary_fns!(Gelu, "gelu": gelu_with, gelu, gelu_inplace_with, gelu_inplace);

/// `out[i] = silu(gate[i]) * up[i]` on level `isa` (llama.cpp `swiglu_split`).
pub fn swiglu_with(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    check3(gate.len(), up.len(), out.len());
    match path(isa) {
        Path::Scalar => swiglu_ref(gate, up, out),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => simd::swiglu(t, gate, up, out),
    }
}

/// [`swiglu_with`] on [`Isa::active`].
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    swiglu_with(Isa::active(), gate, up, out)
}

/// SwiGLU written over `gate`: `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu_inplace_with(isa: Isa, gate: &mut [f32], up: &[f32]) {
    check3(gate.len(), up.len(), gate.len());
    match path(isa) {
        Path::Scalar => {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = silu_scalar(*g) * u;
            }
        }
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => simd::swiglu_inplace(t, gate, up),
    }
}

/// [`swiglu_inplace_with`] on [`Isa::active`].
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    swiglu_inplace_with(Isa::active(), gate, up)
}
