//! f16 <-> f32 row conversion (KV cache, f16 weights such as norms in some GGUFs).
//! f32 -> f16 rounds to nearest even; overflow gives ±inf; NaN stays NaN. Every path gives
//! bit-identical results for non-NaN inputs (the hardware converters implement IEEE).

use super::{path, Path};
use crate::Isa;
use half::f16;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use half::slice::HalfFloatSliceExt;

/// Scalar reference (the `half` crate).
pub fn f16_to_f32_ref(src: &[f16], dst: &mut [f32]) {
    check(src.len(), dst.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// Scalar reference (the `half` crate).
pub fn f32_to_f16_ref(src: &[f32], dst: &mut [f16]) {
    check(src.len(), dst.len());
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(s);
    }
}

fn check(n: usize, nd: usize) {
    assert_eq!(
        n, nd,
        "convert: destination length {nd} != source length {n}"
    );
}

/// Widens `src` into `dst` on level `isa`.
pub fn f16_to_f32_with(isa: Isa, src: &[f16], dst: &mut [f32]) {
    check(src.len(), dst.len());
    match path(isa) {
        Path::Scalar => f16_to_f32_ref(src, dst),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => super::simd::f16_to_f32(t, src.reinterpret_cast(), dst),
    }
}

/// [`f16_to_f32_with`] on [`Isa::active`].
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    f16_to_f32_with(Isa::active(), src, dst)
}

/// Narrows `src` into `dst` (round to nearest even) on level `isa`.
pub fn f32_to_f16_with(isa: Isa, src: &[f32], dst: &mut [f16]) {
    check(src.len(), dst.len());
    match path(isa) {
        Path::Scalar => f32_to_f16_ref(src, dst),
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        Path::Simd(t) => super::simd::f32_to_f16(t, src, dst.reinterpret_cast_mut()),
    }
}

/// [`f32_to_f16_with`] on [`Isa::active`].
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    f32_to_f16_with(Isa::active(), src, dst)
}
