//! f16 <-> f32 row conversion (KV cache, f16 weights such as norms in some GGUFs).
//! f32 -> f16 rounds to nearest even; overflow gives ±inf; NaN stays NaN. Every path gives
//! bit-identical results for non-NaN inputs (the hardware converters implement IEEE).

use super::{path, Path};
use crate::Isa;
use half::f16;

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
        // SAFETY: `path` checked the CPU; lengths equal; f16 is a transparent u16.
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe {
            super::x86::f16_to_f32(src.as_ptr() as *const u16, dst.as_mut_ptr(), src.len())
        },
        #[cfg(target_arch = "aarch64")]
        Path::Neon => unsafe {
            super::arm::f16_to_f32(src.as_ptr() as *const u16, dst.as_mut_ptr(), src.len())
        },
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
        // SAFETY: as f16_to_f32_with.
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe {
            super::x86::f32_to_f16(src.as_ptr(), dst.as_mut_ptr() as *mut u16, src.len())
        },
        #[cfg(target_arch = "aarch64")]
        Path::Neon => unsafe {
            super::arm::f32_to_f16(src.as_ptr(), dst.as_mut_ptr() as *mut u16, src.len())
        },
    }
}

/// [`f32_to_f16_with`] on [`Isa::active`].
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    f32_to_f16_with(Isa::active(), src, dst)
}
