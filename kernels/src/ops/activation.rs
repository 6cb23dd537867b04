//! Activations: SiLU, GELU (tanh approximation) and SwiGLU (`silu(gate) * up`).
//!
//! GELU follows ggml's `ggml_gelu_f32` formula
//! `0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x²)))`. (llama.cpp's CPU backend by default
//! reads a 64K-entry table indexed by the f16 rounding of `x` for |x| < 10, so its results
//! differ from the formula by up to ~1e-3 relative; we compute the formula.) The SIMD paths
//! use the identity `0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y))`, which is also free of the
//! cancellation the tanh form has for negative `x`.

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

/// # Safety
/// `x` readable and `out` writable for `n` elements, `out` equal to `x` or disjoint from it;
/// `p` runnable on this CPU.
unsafe fn unary_raw(p: Path, op: Unary, x: *const f32, out: *mut f32, n: usize) {
    match p {
        Path::Scalar => {
            let f = match op {
                Unary::Silu => silu_scalar,
                Unary::Gelu => gelu_scalar,
            };
            for i in 0..n {
                *out.add(i) = f(*x.add(i));
            }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => match op {
            Unary::Silu => super::x86::silu(x, out, n),
            Unary::Gelu => super::x86::gelu(x, out, n),
        },
        #[cfg(target_arch = "aarch64")]
        Path::Neon => match op {
            Unary::Silu => super::arm::silu(x, out, n),
            Unary::Gelu => super::arm::gelu(x, out, n),
        },
    }
}

/// # Safety
/// `g`, `u` readable and `out` writable for `n` elements; `out` equal to `g` or `u` or
/// disjoint from both; `p` runnable on this CPU.
unsafe fn swiglu_raw(p: Path, g: *const f32, u: *const f32, out: *mut f32, n: usize) {
    match p {
        Path::Scalar => {
            for i in 0..n {
                *out.add(i) = silu_scalar(*g.add(i)) * *u.add(i);
            }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => super::x86::swiglu(g, u, out, n),
        #[cfg(target_arch = "aarch64")]
        Path::Neon => super::arm::swiglu(g, u, out, n),
    }
}

/// `out[i] = op(x[i])` on level `isa`.
fn unary_with(isa: Isa, op: Unary, x: &[f32], out: &mut [f32]) {
    check2(x.len(), out.len());
    // SAFETY: lengths checked, distinct borrows, `path` checked the CPU.
    unsafe { unary_raw(path(isa), op, x.as_ptr(), out.as_mut_ptr(), x.len()) }
}

/// `x[i] = op(x[i])` on level `isa`.
fn unary_inplace_with(isa: Isa, op: Unary, x: &mut [f32]) {
    let p = x.as_mut_ptr();
    // SAFETY: out == x, element-wise; `path` checked the CPU.
    unsafe { unary_raw(path(isa), op, p, p, x.len()) }
}

/// `out[i] = silu(x[i])` on level `isa`.
pub fn silu_with(isa: Isa, x: &[f32], out: &mut [f32]) {
    unary_with(isa, Unary::Silu, x, out)
}

/// [`silu_with`] on [`Isa::active`].
pub fn silu(x: &[f32], out: &mut [f32]) {
    silu_with(Isa::active(), x, out)
}

/// SiLU in place.
pub fn silu_inplace_with(isa: Isa, x: &mut [f32]) {
    unary_inplace_with(isa, Unary::Silu, x)
}

/// [`silu_inplace_with`] on [`Isa::active`].
pub fn silu_inplace(x: &mut [f32]) {
    silu_inplace_with(Isa::active(), x)
}

/// `out[i] = gelu(x[i])` on level `isa`.
pub fn gelu_with(isa: Isa, x: &[f32], out: &mut [f32]) {
    unary_with(isa, Unary::Gelu, x, out)
}

/// [`gelu_with`] on [`Isa::active`].
pub fn gelu(x: &[f32], out: &mut [f32]) {
    gelu_with(Isa::active(), x, out)
}

/// GELU in place.
pub fn gelu_inplace_with(isa: Isa, x: &mut [f32]) {
    unary_inplace_with(isa, Unary::Gelu, x)
}

/// [`gelu_inplace_with`] on [`Isa::active`].
pub fn gelu_inplace(x: &mut [f32]) {
    gelu_inplace_with(Isa::active(), x)
}

/// `out[i] = silu(gate[i]) * up[i]` on level `isa` (llama.cpp `swiglu_split`).
pub fn swiglu_with(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    check3(gate.len(), up.len(), out.len());
    // SAFETY: lengths checked, distinct borrows, `path` checked the CPU.
    unsafe {
        swiglu_raw(
            path(isa),
            gate.as_ptr(),
            up.as_ptr(),
            out.as_mut_ptr(),
            gate.len(),
        )
    }
}

/// [`swiglu_with`] on [`Isa::active`].
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    swiglu_with(Isa::active(), gate, up, out)
}

/// SwiGLU written over `gate`: `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu_inplace_with(isa: Isa, gate: &mut [f32], up: &[f32]) {
    check3(gate.len(), up.len(), gate.len());
    let g = gate.as_mut_ptr();
    // SAFETY: out == gate, element-wise; `up` is a distinct borrow.
    unsafe { swiglu_raw(path(isa), g, up.as_ptr(), g, gate.len()) }
}

/// [`swiglu_inplace_with`] on [`Isa::active`].
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    swiglu_inplace_with(Isa::active(), gate, up)
}
