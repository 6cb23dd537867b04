//! The tiled attention body ([`crate::attention`]) compiled for AVX2 (8-wide) and for
//! AVX-512 (16-wide, 32 registers): its loops vectorize; the arithmetic is plain f32 (no
//! contraction into FMAs, no reassociation), so either build equals the body without target
//! features bit for bit.

use crate::attention::{attend_body, AttnScratch, KvRows, QueryBlock};
use crate::Isa;

/// Safe entry point: the body compiled for `isa` (an AVX2-bodied level) after checking the
/// CPU (panics when it lacks `isa`).
pub fn attend_checked<R: KvRows>(
    kv: &R,
    a: &QueryBlock,
    out: &mut [f32],
    s: &mut AttnScratch,
    isa: Isa,
) {
    assert!(
        isa.has_avx2() && isa.is_available(),
        "{isa} attention requested on a CPU without {isa}"
    );
    if isa == Isa::Avx512Vnni {
        // SAFETY: the CPU supports the AVX-512 level (checked just above).
        unsafe { attend_avx512(kv, a, out, s, isa) }
    } else {
        // SAFETY: the CPU supports avx2, fma and f16c (checked just above).
        unsafe { attend(kv, a, out, s, isa) }
    }
}

/// `unsafe fn $name`: [`attend_body`] compiled with the target features `$features` (the
/// two levels' roots differ in nothing else).
macro_rules! attend_root {
    ($(#[$doc:meta])* $name:ident, $features:literal) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $name<R: KvRows>(
            kv: &R,
            a: &QueryBlock,
            out: &mut [f32],
            s: &mut AttnScratch,
            isa: Isa,
        ) {
            attend_body(kv, a, out, s, isa)
        }
    };
}

attend_root!(
    /// # Safety
    /// The CPU supports AVX2, FMA and F16C. (Memory is reached through slices: shapes as
    /// `crate::attention::attend`, violations panic on bounds.)
    attend,
    "avx2,fma,f16c"
);

attend_root!(
    /// # Safety
    /// The CPU supports AVX2, FMA, F16C and AVX-512 F/BW/VL. (Memory as [`attend`].)
    attend_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl"
);
