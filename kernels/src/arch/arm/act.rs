//! NEON activation quantization (q8_0-style, symmetric per 32). Bit-identical to the
//! scalar path in [`crate::matmul::act`]: `fmaxnm` skips NaN as `f32::max` does, the same
//! `amax / 127` and `1 / d`, the same product, `fcvtns` rounds half to even (NaN -> 0,
//! saturating), then the clamp to ±127 in int32.

use std::arch::aarch64::*;

/// Safe entry point: [`quantize`] after checking the CPU has NEON.
pub fn quantize_checked(x: &[f32], qs: &mut [i8], d: &mut [f32], sum: &mut [i32], ds: &mut [f32]) {
    assert!(
        crate::Isa::Neon.is_available(),
        "NEON kernels requested on a CPU without NEON"
    );
    // SAFETY: the CPU supports NEON (checked just above).
    unsafe { quantize(x, qs, d, sum, ds) }
}

/// Quantizes `x` (a multiple of 32 long) into `qs`, and per block `d`, `Σq`, `d·Σq`.
///
/// # Safety
/// The CPU supports NEON. (All lengths are checked.)
#[target_feature(enable = "neon")]
pub unsafe fn quantize(x: &[f32], qs: &mut [i8], d: &mut [f32], sum: &mut [i32], ds: &mut [f32]) {
    let nb = x.len() / 32;
    assert!(x.len() % 32 == 0 && qs.len() == x.len());
    assert!(d.len() == nb && sum.len() == nb && ds.len() == nb);
    let lim = vdupq_n_s32(127);
    let nlim = vdupq_n_s32(-127);
    for b in 0..nb {
        // b < nb: 32 f32 / 32 i8 at b*32 are in bounds (lengths checked).
        let xp = x.as_ptr().add(b * 32);
        let mut v = [vdupq_n_f32(0.0); 8];
        for (k, vk) in v.iter_mut().enumerate() {
            *vk = vld1q_f32(xp.add(4 * k));
        }
        let mut m = vdupq_n_f32(0.0);
        for vk in v {
            m = vmaxnmq_f32(m, vabsq_f32(vk));
        }
        let amax = vmaxnmvq_f32(m);
        let dd = amax / 127.0;
        let id = if dd > 0.0 { 1.0 / dd } else { 0.0 };
        let mut ints = [vdupq_n_s32(0); 8];
        for k in 0..8 {
            let r = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
            ints[k] = vmaxq_s32(vminq_s32(r, lim), nlim);
        }
        let mut s = vdupq_n_s32(0);
        for i in ints {
            s = vaddq_s32(s, i);
        }
        let mut bytes = [vdup_n_s8(0); 4];
        for j in 0..4 {
            let h = vcombine_s16(vmovn_s32(ints[2 * j]), vmovn_s32(ints[2 * j + 1]));
            bytes[j] = vmovn_s16(h);
        }
        let qp = qs.as_mut_ptr().add(b * 32);
        vst1q_s8(qp, vcombine_s8(bytes[0], bytes[1]));
        vst1q_s8(qp.add(16), vcombine_s8(bytes[2], bytes[3]));
        let s = vaddvq_s32(s);
        d[b] = dd;
        sum[b] = s;
        ds[b] = dd * s as f32;
    }
}
