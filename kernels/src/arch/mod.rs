//! Hand-written SIMD kernels, one folder per architecture. Everything `unsafe` in
//! pocket-kernels lives here; the safe wrappers in [`crate::matmul`], [`elementwise`]
//! and the ISA modules validate shapes and the CPU's features before calling in. The rest of
//! the crate denies `unsafe_code` (`kernels/Cargo.toml`).

#![allow(unsafe_code)]

#[cfg(target_arch = "aarch64")]
pub mod arm;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub mod elementwise;
#[cfg(target_arch = "x86_64")]
pub mod x86;
