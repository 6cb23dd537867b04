//! The tiled attention body ([`crate::attention`]) compiled for AVX2: its loops vectorize
//! 8-wide; the arithmetic is plain f32 (no contraction into FMAs), so it equals the body
//! without target features bit for bit.

use crate::attention::{attend_body, AttnScratch, KvRows, QueryBlock};
use crate::Isa;

/// Safe entry point: [`attend`] after checking the CPU (panics without AVX2/FMA/F16C).
pub fn attend_checked<R: KvRows>(kv: &R, a: &QueryBlock, out: &mut [f32], s: &mut AttnScratch) {
    assert!(
        Isa::Avx2.is_available(),
        "AVX2 attention requested on a CPU without AVX2/FMA/F16C"
    );
    // SAFETY: the CPU supports avx2, fma and f16c (checked just above).
    unsafe { attend(kv, a, out, s) }
}

/// # Safety
/// The CPU supports AVX2, FMA and F16C. (Memory is reached through slices: shapes as
/// `crate::attention::attend`, violations panic on bounds.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend<R: KvRows>(kv: &R, a: &QueryBlock, out: &mut [f32], s: &mut AttnScratch) {
    attend_body(kv, a, out, s, Isa::Avx2)
}
