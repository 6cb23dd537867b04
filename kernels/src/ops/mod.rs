//! Elementwise and row kernels of the forward pass: RMSNorm, RoPE, softmax, activations and
//! f16 <-> f32 row conversion.
//!
//! Each op family has one file holding its scalar reference (plain Rust with `std` math, the
//! oracle for tests) and its safe public entry points. The SIMD bodies live in
//! `arch::x86::ops` (AVX2 + FMA + F16C) and `arch::arm::ops` (NEON), behind the safe
//! wrappers of `arch::elementwise`; [`arm_dot`] (aarch64) holds the int8 dot-product
//! primitives (NEON, `sdot`, `smmla`) that the quantized gemv builds on.
//!
//! Every public op comes in two forms: `op_with(isa, ..)`, which runs the given level and
//! panics if this CPU cannot run it, and `op(..)`, which uses [`Isa::active`]. On aarch64 the
//! `Neon`, `Dotprod` and `I8mm` levels all run the NEON bodies (these ops need no dot product).
//!
//! Exponentials in the SIMD paths use a polynomial (`exp` in the ISA modules, the algorithm of
//! ARM's optimized-routines `expf`, as ggml's `ggml_v_expf`): at most ~2 ulp from `f32::exp`
//! over the normal range, +inf above 88.38, 0 below -103.97, subnormals approximate.

pub mod activation;
pub mod convert;
pub mod lowrank;
pub mod lowrank_a8;
pub mod lowrank_q8;
#[cfg(test)]
mod lowrank_test;
pub mod norm;
pub mod read;
pub mod rope;
pub mod softmax;

#[cfg(target_arch = "aarch64")]
pub use crate::arch::arm::dot as arm_dot;

#[cfg(test)]
mod tests;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use crate::arch::elementwise as simd;
use crate::Isa;

/// The body family a level maps to for these ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Scalar,
    /// The ISA's SIMD bodies, with the token that proves the CPU runs them.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    Simd(simd::Simd),
}

/// Maps `isa` to the body that implements it, refusing a level this CPU cannot run (or
/// one of another architecture).
#[inline]
pub(crate) fn path(isa: Isa) -> Path {
    if isa == Isa::Scalar {
        return Path::Scalar;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    if let Some(t) = simd::Simd::detect(isa) {
        return Path::Simd(t);
    }
    panic!("pocket-kernels: ISA level {isa} is not available on this CPU")
}

/// Constants of the vector `exp` (the algorithm of ARM optimized-routines' `expf`, as used by
/// ggml's `ggml_v_expf`): `n = round(x log2 e)` by adding `SHIFT`, `r = x - n ln2` in two
/// parts, `exp(x) = 2^n (1 + C1 r + C2 r² + C3 r³ + C4 r⁴ + C5 r⁵)`; the scale `2^n` is
/// built in the exponent bits, split in two factors when `|n| > 126`.
#[allow(clippy::excessive_precision)]
pub(crate) mod exp_consts {
    pub const SHIFT: f32 = 1.258291200e+07; // 0x1.8p23, bits 0x4b400000
    pub const LOG2E: f32 = 1.442695022e+00; // 0x1.715476p+0, bits 0x3fb8aa3b
    pub const LN2_HI: f32 = 6.931457520e-01; // 0x1.62e4p-1, bits 0x3f317200
    pub const LN2_LO: f32 = 1.428606765e-06; // 0x1.7f7d1cp-20, bits 0x35bfbe8e
    pub const C1: f32 = 9.999994040e-01; // 0x1.ffffecp-1, bits 0x3f7ffff6
    pub const C2: f32 = 4.999912679e-01; // 0x1.fffdb6p-2, bits 0x3efffedb
    pub const C3: f32 = 1.666839570e-01; // 0x1.555e66p-3, bits 0x3e2aaf33
    pub const C4: f32 = 4.189976677e-02; // 0x1.573e2ep-5, bits 0x3d2b9f17
    pub const C5: f32 = 8.247390389e-03; // 0x1.0e4020p-7, bits 0x3c072010
    /// `|n|` above which `2^n` no longer fits one normal float.
    pub const SPLIT: f32 = 126.0;
    /// `|n|` above which the result is 0 or +inf.
    pub const SATURATE: f32 = 192.0;
    /// `-2 sqrt(2/pi)`: GELU as `x / (1 + exp(x (G0 + G1 x²)))`.
    pub const G0: f32 = -1.595_769_1;
    /// `-2 sqrt(2/pi) 0.044715`.
    pub const G1: f32 = -0.071_354_816;
}
