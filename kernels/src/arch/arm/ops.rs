//! aarch64 NEON bodies of the elementwise ops (4 f32 lanes). Tails go through a stack buffer
//! so every element takes the same vector arithmetic (rope tails are scalar).
//!
//! Every `pub unsafe fn` here shares one contract besides what its own doc adds: the CPU
//! supports NEON (always true on aarch64 Linux; checked through `Isa` anyway), and the
//! pointers are valid for the element counts given. The safe wrappers in
//! [`crate::arch::elementwise`] check both (the CPU through the [`Simd`] token).

use crate::ops::exp_consts as k;
use crate::ops::rope::RopeMode;
use crate::Isa;
use std::arch::aarch64::*;
use std::arch::asm;

/// Proof that this CPU runs the NEON bodies: only [`Simd::detect`] makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simd(());

impl Simd {
    /// The token for `isa` if it maps to these bodies (`Neon`, `Dotprod`, `I8mm`: these ops
    /// need no dot product) and this CPU runs it.
    pub fn detect(isa: Isa) -> Option<Simd> {
        let neon = matches!(isa, Isa::Neon | Isa::Dotprod | Isa::I8mm);
        (neon && isa.is_available()).then_some(Simd(()))
    }
}

const L: usize = 4;

/// `exp(x)` per lane, ~2 ulp (see [`crate::ops::exp_consts`]).
///
/// # Safety
/// NEON available.
#[inline]
#[target_feature(enable = "neon")]
pub unsafe fn exp(x: float32x4_t) -> float32x4_t {
    let shift = vdupq_n_f32(k::SHIFT);
    let z = vfmaq_f32(shift, x, vdupq_n_f32(k::LOG2E));
    let n = vsubq_f32(z, shift);
    let r = vfmsq_f32(x, n, vdupq_n_f32(k::LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(k::LN2_LO));
    // z's low mantissa bits hold n; shifted into the exponent field they scale 1.0 by 2^n.
    let e = vshlq_n_u32::<23>(vreinterpretq_u32_f32(z));
    let scale = vreinterpretq_f32_u32(vaddq_u32(e, vdupq_n_u32(0x3f80_0000)));
    let r2 = vmulq_f32(r, r);
    let p45 = vfmaq_f32(vdupq_n_f32(k::C4), vdupq_n_f32(k::C5), r);
    let p23 = vfmaq_f32(vdupq_n_f32(k::C2), vdupq_n_f32(k::C3), r);
    let p = vfmaq_f32(
        vmulq_f32(vdupq_n_f32(k::C1), r),
        vfmaq_f32(p23, p45, r2),
        r2,
    );
    let big = vcagtq_f32(n, vdupq_n_f32(k::SPLIT));
    let normal = vfmaq_f32(scale, p, scale);
    if vmaxvq_u32(big) == 0 {
        return normal;
    }
    // |n| > 126: 2^n = s1 * s2 with s1 = 2^127 or 2^-125 (bias 0x82000000 when n <= 0).
    let neg = vandq_u32(vclezq_f32(n), vdupq_n_u32(0x8200_0000));
    let s1 = vreinterpretq_f32_u32(vaddq_u32(neg, vdupq_n_u32(0x7f00_0000)));
    let s2 = vreinterpretq_f32_u32(vsubq_u32(e, neg));
    let sat = vcagtq_f32(n, vdupq_n_f32(k::SATURATE));
    let split = vmulq_f32(vfmaq_f32(s2, s2, p), s1);
    vbslq_f32(sat, vmulq_f32(s1, s1), vbslq_f32(big, split, normal))
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn silu4(x: float32x4_t) -> float32x4_t {
    let e = exp(vnegq_f32(x));
    vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0), e))
}

#[inline]
#[target_feature(enable = "neon")]
unsafe fn gelu4(x: float32x4_t) -> float32x4_t {
    let x2 = vmulq_f32(x, x);
    let t = vmulq_f32(x, vfmaq_f32(vdupq_n_f32(k::G0), vdupq_n_f32(k::G1), x2));
    vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0), exp(t)))
}

/// Loads `n < 4` elements, the other lanes `fill`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load_tail(p: *const f32, n: usize, fill: f32) -> float32x4_t {
    let mut buf = [fill; L];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
    vld1q_f32(buf.as_ptr())
}

/// Stores the first `n < 4` lanes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn store_tail(p: *mut f32, n: usize, v: float32x4_t) {
    let mut buf = [0.0f32; L];
    vst1q_f32(buf.as_mut_ptr(), v);
    std::ptr::copy_nonoverlapping(buf.as_ptr(), p, n);
}

/// Sum of `x[i]²` over `n` elements (f32 lanes, 4 accumulators).
///
/// # Safety
/// Module contract; `x` readable for `n` elements.
#[target_feature(enable = "neon")]
pub unsafe fn sum_squares(x: *const f32, n: usize) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 4 * L <= n {
        for (j, a) in acc.iter_mut().enumerate() {
            let v = vld1q_f32(x.add(i + j * L));
            *a = vfmaq_f32(*a, v, v);
        }
        i += 4 * L;
    }
    while i + L <= n {
        let v = vld1q_f32(x.add(i));
        acc[0] = vfmaq_f32(acc[0], v, v);
        i += L;
    }
    if i < n {
        let v = load_tail(x.add(i), n - i, 0.0);
        acc[1] = vfmaq_f32(acc[1], v, v);
    }
    vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ))
}

/// RMSNorm: `out[i] = (x[i] * scale) * w[i]`, `scale = 1 / sqrt(sum(x²)/n + eps)`.
///
/// # Safety
/// Module contract; `x`, `w` readable and `out` writable for `n` elements; `out` equal to
/// `x` or not overlapping it.
#[target_feature(enable = "neon")]
pub unsafe fn rms_norm(x: *const f32, w: *const f32, eps: f32, out: *mut f32, n: usize) {
    let mean = sum_squares(x, n) / n.max(1) as f32;
    let scale = vdupq_n_f32(1.0 / (mean + eps).sqrt());
    let mut i = 0;
    while i + L <= n {
        let v = vmulq_f32(vld1q_f32(x.add(i)), scale);
        vst1q_f32(out.add(i), vmulq_f32(v, vld1q_f32(w.add(i))));
        i += L;
    }
    if i < n {
        let v = vmulq_f32(load_tail(x.add(i), n - i, 0.0), scale);
        let r = vmulq_f32(v, load_tail(w.add(i), n - i, 0.0));
        store_tail(out.add(i), n - i, r);
    }
}

/// Rotates one head in place: `head` holds at least `2 * cos.len()` values.
///
/// # Safety
/// Module contract; `head` valid for reads and writes of `2 * cos.len()` elements;
/// `sin.len() == cos.len()`.
#[target_feature(enable = "neon")]
pub unsafe fn rope(mode: RopeMode, head: *mut f32, cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    let (c, s) = (cos.as_ptr(), sin.as_ptr());
    let mut i = 0;
    match mode {
        RopeMode::Neox => {
            let (a, b) = (head, head.add(half));
            while i + L <= half {
                let (va, vb) = (vld1q_f32(a.add(i)), vld1q_f32(b.add(i)));
                let (vc, vs) = (vld1q_f32(c.add(i)), vld1q_f32(s.add(i)));
                vst1q_f32(a.add(i), vfmsq_f32(vmulq_f32(va, vc), vb, vs));
                vst1q_f32(b.add(i), vfmaq_f32(vmulq_f32(vb, vc), va, vs));
                i += L;
            }
            while i < half {
                let (x0, x1) = (*a.add(i), *b.add(i));
                *a.add(i) = x0 * *c.add(i) - x1 * *s.add(i);
                *b.add(i) = x0 * *s.add(i) + x1 * *c.add(i);
                i += 1;
            }
        }
        RopeMode::Normal => {
            // vld2 de-interleaves 4 pairs into (a0..a3) and (b0..b3); vst2 re-interleaves.
            while i + L <= half {
                let v = vld2q_f32(head.add(2 * i));
                let (vc, vs) = (vld1q_f32(c.add(i)), vld1q_f32(s.add(i)));
                let na = vfmsq_f32(vmulq_f32(v.0, vc), v.1, vs);
                let nb = vfmaq_f32(vmulq_f32(v.1, vc), v.0, vs);
                vst2q_f32(head.add(2 * i), float32x4x2_t(na, nb));
                i += L;
            }
            while i < half {
                let (x0, x1) = (*head.add(2 * i), *head.add(2 * i + 1));
                *head.add(2 * i) = x0 * *c.add(i) - x1 * *s.add(i);
                *head.add(2 * i + 1) = x0 * *s.add(i) + x1 * *c.add(i);
                i += 1;
            }
        }
    }
}

/// Softmax of `n` elements in place.
///
/// # Safety
/// Module contract; `x` valid for reads and writes of `n > 0` elements.
#[target_feature(enable = "neon")]
pub unsafe fn softmax(x: *mut f32, n: usize) {
    let mut mx = vdupq_n_f32(f32::NEG_INFINITY);
    let mut i = 0;
    while i + L <= n {
        mx = vmaxq_f32(mx, vld1q_f32(x.add(i)));
        i += L;
    }
    if i < n {
        mx = vmaxq_f32(mx, load_tail(x.add(i), n - i, f32::NEG_INFINITY));
    }
    let max = vdupq_n_f32(vmaxvq_f32(mx));
    let mut sum = vdupq_n_f32(0.0);
    i = 0;
    while i + L <= n {
        let e = exp(vsubq_f32(vld1q_f32(x.add(i)), max));
        vst1q_f32(x.add(i), e);
        sum = vaddq_f32(sum, e);
        i += L;
    }
    if i < n {
        // Padding lanes are -inf: exp gives 0 and adds nothing to the sum.
        let e = exp(vsubq_f32(
            load_tail(x.add(i), n - i, f32::NEG_INFINITY),
            max,
        ));
        store_tail(x.add(i), n - i, e);
        sum = vaddq_f32(sum, e);
    }
    let inv = vdupq_n_f32(1.0 / vaddvq_f32(sum));
    i = 0;
    while i + L <= n {
        vst1q_f32(x.add(i), vmulq_f32(vld1q_f32(x.add(i)), inv));
        i += L;
    }
    if i < n {
        let v = vmulq_f32(load_tail(x.add(i), n - i, 0.0), inv);
        store_tail(x.add(i), n - i, v);
    }
}

/// Applies the lane function `$f` to `$n` elements of `$x` into `$out` (inside a
/// `#[target_feature]` fn, so `$f` inlines).
macro_rules! map {
    ($x:expr, $out:expr, $n:expr, $f:ident) => {{
        let (x, out, n) = ($x, $out, $n);
        let mut i = 0;
        while i + 2 * L <= n {
            let a = $f(vld1q_f32(x.add(i)));
            let b = $f(vld1q_f32(x.add(i + L)));
            vst1q_f32(out.add(i), a);
            vst1q_f32(out.add(i + L), b);
            i += 2 * L;
        }
        while i + L <= n {
            vst1q_f32(out.add(i), $f(vld1q_f32(x.add(i))));
            i += L;
        }
        if i < n {
            store_tail(out.add(i), n - i, $f(load_tail(x.add(i), n - i, 0.0)));
        }
    }};
}

/// `out[i] = x[i] / (1 + exp(-x[i]))`.
///
/// # Safety
/// Module contract; `x` readable and `out` writable for `n` elements, equal or disjoint.
#[target_feature(enable = "neon")]
pub unsafe fn silu(x: *const f32, out: *mut f32, n: usize) {
    map!(x, out, n, silu4)
}

/// GELU (tanh approximation) as `x / (1 + exp(-2 sqrt(2/pi) x (1 + 0.044715 x²)))`.
///
/// # Safety
/// As [`silu`].
#[target_feature(enable = "neon")]
pub unsafe fn gelu(x: *const f32, out: *mut f32, n: usize) {
    map!(x, out, n, gelu4)
}

/// `out[i] = silu(g[i]) * u[i]`.
///
/// # Safety
/// Module contract; `g`, `u` readable and `out` writable for `n` elements; `out` equal to
/// `g` or `u` or disjoint from both.
#[target_feature(enable = "neon")]
pub unsafe fn swiglu(g: *const f32, u: *const f32, out: *mut f32, n: usize) {
    let mut i = 0;
    while i + L <= n {
        let r = vmulq_f32(silu4(vld1q_f32(g.add(i))), vld1q_f32(u.add(i)));
        vst1q_f32(out.add(i), r);
        i += L;
    }
    if i < n {
        let r = vmulq_f32(
            silu4(load_tail(g.add(i), n - i, 0.0)),
            load_tail(u.add(i), n - i, 0.0),
        );
        store_tail(out.add(i), n - i, r);
    }
}

/// Widens 4 f16 (raw bits) with `fcvtl` (base ARMv8 FP, no FEAT_FP16 needed; the Rust
/// intrinsic needs the unstable `f16` type, hence asm).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn widen4(h: uint16x4_t) -> float32x4_t {
    let r: float32x4_t;
    asm!("fcvtl {r:v}.4s, {h:v}.4h", r = lateout(vreg) r, h = in(vreg) h,
         options(pure, nomem, nostack, preserves_flags));
    r
}

/// Narrows 4 f32 to f16 (raw bits) with `fcvtn` (rounding per FPCR: nearest even).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn narrow4(v: float32x4_t) -> uint16x4_t {
    let r: uint16x4_t;
    asm!("fcvtn {r:v}.4h, {v:v}.4s", r = lateout(vreg) r, v = in(vreg) v,
         options(pure, nomem, nostack, preserves_flags));
    r
}

/// f16 (as raw bits) to f32, `n` elements.
///
/// # Safety
/// Module contract; `src` readable and `dst` writable for `n` elements.
#[target_feature(enable = "neon")]
pub unsafe fn f16_to_f32(src: *const u16, dst: *mut f32, n: usize) {
    let mut i = 0;
    while i + L <= n {
        vst1q_f32(dst.add(i), widen4(vld1_u16(src.add(i))));
        i += L;
    }
    if i < n {
        let mut buf = [0u16; L];
        std::ptr::copy_nonoverlapping(src.add(i), buf.as_mut_ptr(), n - i);
        store_tail(dst.add(i), n - i, widen4(vld1_u16(buf.as_ptr())));
    }
}

/// f32 to f16 (raw bits), round to nearest even, `n` elements.
///
/// # Safety
/// Module contract; `src` readable and `dst` writable for `n` elements.
#[target_feature(enable = "neon")]
pub unsafe fn f32_to_f16(src: *const f32, dst: *mut u16, n: usize) {
    let mut i = 0;
    while i + L <= n {
        vst1_u16(dst.add(i), narrow4(vld1q_f32(src.add(i))));
        i += L;
    }
    if i < n {
        let h = narrow4(load_tail(src.add(i), n - i, 0.0));
        let mut buf = [0u16; L];
        vst1_u16(buf.as_mut_ptr(), h);
        std::ptr::copy_nonoverlapping(buf.as_ptr(), dst.add(i), n - i);
    }
}

/// `out[i] = exp(x[i])` with the vector [`exp`] (tests compare it with `f32::exp`).
///
/// # Safety
/// As [`silu`].
#[cfg(test)]
#[target_feature(enable = "neon")]
pub unsafe fn exp_row(x: *const f32, out: *mut f32, n: usize) {
    map!(x, out, n, exp)
}
