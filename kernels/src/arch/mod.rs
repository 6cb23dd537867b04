//! Hand-written SIMD kernels, one folder per architecture. Everything `unsafe` in the
//! crate's matmul path lives here; the safe wrappers in [`crate::matmul`] validate shapes
//! and the CPU's features before calling in.

#[cfg(target_arch = "x86_64")]
pub mod x86;
