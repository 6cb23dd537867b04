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

use crate::matmul::QuantizedActivation;

/// Pointers to the codes of activation rows `t0..t0+N` (checked in bounds).
#[inline(always)]
pub fn act_ptrs<const N: usize>(act: &QuantizedActivation, t0: usize) -> [*const i8; N] {
    let mut ap = [std::ptr::null(); N];
    for (t, p) in ap.iter_mut().enumerate() {
        *p = act.row_qs(t0 + t).as_ptr();
    }
    ap
}

/// Per-token slices `f(act, t0 + t)[..nb]` for tokens `0..N` (block scales and sums of
/// the rows a tile reads).
#[inline(always)]
pub fn per_token<'a, T, const N: usize>(
    act: &'a QuantizedActivation,
    t0: usize,
    nb: usize,
    f: fn(&'a QuantizedActivation, usize) -> &'a [T],
) -> [&'a [T]; N] {
    std::array::from_fn(|t| &f(act, t0 + t)[..nb])
}
