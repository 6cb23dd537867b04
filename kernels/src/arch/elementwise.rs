//! Safe entry points of the elementwise SIMD bodies ([`super::x86::ops`] on x86-64,
//! [`super::arm::ops`] on aarch64), written once for both: each takes the ISA's [`Simd`]
//! token, which only exists where the CPU runs the bodies, checks the slice lengths, and
//! calls the `#[target_feature]` body. Scalar references and the `Isa` dispatch are in
//! [`crate::ops`].

#[cfg(target_arch = "aarch64")]
use super::arm::ops as simd;
#[cfg(target_arch = "x86_64")]
use super::x86::ops as simd;
use crate::ops::rope::RopeMode;

pub use simd::Simd;

fn same_len(a: usize, b: usize) {
    assert_eq!(a, b, "elementwise: lengths {a} and {b} differ");
}

/// RMSNorm of `x` with weight `w` into `out` (see [`crate::ops::norm`]).
pub fn rms_norm(_: Simd, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    same_len(x.len(), w.len());
    same_len(x.len(), out.len());
    // SAFETY: the token proves the CPU features; lengths checked; distinct borrows.
    unsafe { simd::rms_norm(x.as_ptr(), w.as_ptr(), eps, out.as_mut_ptr(), x.len()) }
}

/// RMSNorm of `x` in place.
pub fn rms_norm_inplace(_: Simd, x: &mut [f32], w: &[f32], eps: f32) {
    same_len(x.len(), w.len());
    let p = x.as_mut_ptr();
    // SAFETY: as `rms_norm`; out == x is allowed (the scale is known before any write).
    unsafe { simd::rms_norm(p, w.as_ptr(), eps, p, x.len()) }
}

/// Rotates one head (the first `2 * cos.len()` values of `head`) in place.
pub fn rope(_: Simd, mode: RopeMode, head: &mut [f32], cos: &[f32], sin: &[f32]) {
    same_len(cos.len(), sin.len());
    assert!(
        head.len() >= 2 * cos.len(),
        "rope: head shorter than 2 x {}",
        cos.len()
    );
    // SAFETY: the token proves the CPU features; lengths checked.
    unsafe { simd::rope(mode, head.as_mut_ptr(), cos, sin) }
}

/// Softmax of `x` in place (an empty row is left alone).
pub fn softmax(_: Simd, x: &mut [f32]) {
    if !x.is_empty() {
        // SAFETY: the token proves the CPU features; one slice, n > 0.
        unsafe { simd::softmax(x.as_mut_ptr(), x.len()) }
    }
}

/// A lane function `out[i] = f(x[i])` of the SIMD module, by name.
macro_rules! unary {
    ($(#[$doc:meta])* $name:ident, $inplace:ident) => {
        $(#[$doc])*
        pub fn $name(_: Simd, x: &[f32], out: &mut [f32]) {
            same_len(x.len(), out.len());
            // SAFETY: the token proves the CPU features; lengths checked; distinct borrows.
            unsafe { simd::$name(x.as_ptr(), out.as_mut_ptr(), x.len()) }
        }

        /// In place.
        pub fn $inplace(_: Simd, x: &mut [f32]) {
            let p = x.as_mut_ptr();
            // SAFETY: as above, with out == x (element-wise).
            unsafe { simd::$name(p, p, x.len()) }
        }
    };
}

unary!(
    /// `out[i] = x[i] / (1 + exp(-x[i]))`.
    silu,
    silu_inplace
);
unary!(
    /// GELU, tanh approximation (see [`crate::ops::activation`]).
    gelu,
    gelu_inplace
);

/// `out[i] = exp(x[i])` with the vector `exp` (~2 ulp, see [`crate::ops::exp_consts`]).
#[cfg(test)]
pub fn exp_row(_: Simd, x: &[f32], out: &mut [f32]) {
    same_len(x.len(), out.len());
    // SAFETY: the token proves the CPU features; lengths checked; distinct borrows.
    unsafe { simd::exp_row(x.as_ptr(), out.as_mut_ptr(), x.len()) }
}

/// `out[i] = silu(gate[i]) * up[i]`.
pub fn swiglu(_: Simd, gate: &[f32], up: &[f32], out: &mut [f32]) {
    same_len(gate.len(), up.len());
    same_len(gate.len(), out.len());
    // SAFETY: the token proves the CPU features; lengths checked; distinct borrows.
    unsafe { simd::swiglu(gate.as_ptr(), up.as_ptr(), out.as_mut_ptr(), gate.len()) }
}

/// `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu_inplace(_: Simd, gate: &mut [f32], up: &[f32]) {
    same_len(gate.len(), up.len());
    let g = gate.as_mut_ptr();
    // SAFETY: as `swiglu`, with out == gate (element-wise).
    unsafe { simd::swiglu(g, up.as_ptr(), g, gate.len()) }
}

/// f16 (raw bits) to f32.
pub fn f16_to_f32(_: Simd, src: &[u16], dst: &mut [f32]) {
    same_len(src.len(), dst.len());
    // SAFETY: the token proves the CPU features; lengths checked.
    unsafe { simd::f16_to_f32(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// f32 to f16 (raw bits), round to nearest even.
pub fn f32_to_f16(_: Simd, src: &[f32], dst: &mut [u16]) {
    same_len(src.len(), dst.len());
    // SAFETY: the token proves the CPU features; lengths checked.
    unsafe { simd::f32_to_f16(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}
