//! ggml's vector helpers (`vec.h` / `vec.cpp`, x86 AVX2+FMA+F16C): the f16 dot product,
//! the fp16 multiply-add and scale used by flash attention's V accumulator, and the SiLU
//! built on ggml's own `expf` approximation (not libm's: the two differ in the last bits).

use super::{f2h, h2f, hsum8, reduce4x8};
use half::f16;

/// The SIMD body of ggml's dot products over elements `0..np` (a multiple of 32): four
/// eight-lane accumulators, lane `l` of accumulator `j` fusing the products `xy(k)` of
/// `k = i + 8j + l` for each step `i` of 32.
fn steps_of_32(np: usize, xy: impl Fn(usize) -> (f32, f32)) -> [[f32; 8]; 4] {
    let mut sum = [[0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, acc) in s.iter_mut().enumerate() {
                let (a, b) = xy(i + 8 * j + l);
                *acc = a.mul_add(b, *acc);
            }
        }
    }
    sum
}

/// `ggml_vec_dot_f16`: four eight-lane accumulators over steps of 32, `GGML_F32x8_REDUCE`,
/// then the leftovers added in f64 (`ggml_float`), and the f64 sum rounded to f32.
pub fn vec_dot_f16(x: &[f16], y: &[f16]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_f16: lengths");
    let n = x.len();
    let np = n & !31;
    let mut sumf = reduce4x8(&steps_of_32(np, |k| (h2f(x[k]), h2f(y[k])))) as f64;
    for k in np..n {
        sumf += (h2f(x[k]) * h2f(y[k])) as f64;
    }
    sumf as f32
}

/// `ggml_vec_dot_f32` as b11434's x86-64-v3 build compiles it (`libggml-cpu`, GCC 12):
/// four eight-lane fused multiply-add accumulators over steps of 32, `GGML_F32x8_REDUCE`
/// into an f32 `sumf`, then the leftovers added to `sumf` in index order. GCC vectorizes
/// that leftover loop: chunks of 8, then one of 4, take the product rounded (`vmulps`)
/// and add it (`vaddss`); the last `len % 4` leftovers are fused (`vfmadd231ss`).
pub fn vec_dot_f32(x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len(), "vec_dot_f32: lengths");
    let n = x.len();
    let np = n & !31;
    let mut sumf = reduce4x8(&steps_of_32(np, |k| (x[k], y[k])));
    let fused_from = n - (n - np) % 4;
    for k in np..fused_from {
        sumf += x[k] * y[k];
    }
    for k in fused_from..n {
        sumf = x[k].mul_add(y[k], sumf);
    }
    sumf
}

/// One output of llamafile's `tinyBLAS<8, __m256, __m256, float, float, float>` (sgemm.cpp,
/// the f32 x f32 matmul of a batch on AVX2+FMA): one eight-lane accumulator, lane `l` the
/// fused multiply-adds of the elements `l, l + 8, ...` in order (the tail is a zero-padded
/// partial load, so the same), then `hsum` (high + low half, `movehl`, `movehdup`). Every
/// output is summed alone, so the tiles and threads do not change it.
pub fn sgemm_dot_f32(x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len(), "sgemm_dot_f32: lengths");
    let mut acc = [0f32; 8];
    for (k, (&a, &b)) in x.iter().zip(y).enumerate() {
        acc[k % 8] = a.mul_add(b, acc[k % 8]);
    }
    hsum8(&acc)
}

/// `ggml_vec_mad_f16`: `y = fp16(y + x * v)`, one fused multiply-add per element (the
/// SIMD body; every length ggml uses here is a multiple of 32).
pub fn vec_mad_f16(y: &mut [f16], x: &[f16], v: f32) {
    assert_eq!(x.len(), y.len(), "vec_mad_f16: lengths");
    assert!(
        y.len().is_multiple_of(32),
        "vec_mad_f16: only the SIMD body is reproduced"
    );
    for (y, &x) in y.iter_mut().zip(x) {
        *y = f2h(h2f(x).mul_add(v, h2f(*y)));
    }
}

/// `ggml_vec_scale_f16`: `y = fp16(y * v)`.
pub fn vec_scale_f16(y: &mut [f16], v: f32) {
    assert!(
        y.len().is_multiple_of(32),
        "vec_scale_f16: only the SIMD body is reproduced"
    );
    for y in y.iter_mut() {
        *y = f2h(h2f(*y) * v);
    }
}

fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// `ggml_v_expf` (AVX2+FMA), one lane: ARM's optimized-routines `expf` as ggml adapted it
/// (max error 1.45 ulp + 0.5), with its fused multiply-adds in the same places.
pub fn v_expf(x: f32) -> f32 {
    let r = f(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    // _mm256_fnmadd_ps(a, b, c) = c - a*b, fused.
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let c = n.abs() > 126.0;
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6) * b);
    if !c {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// `ggml_v_silu`: `x / (1 + v_expf(0 - x))`.
pub fn v_silu(x: f32) -> f32 {
    x / (1.0 + v_expf(0.0 - x))
}

/// `ggml_vec_swiglu_f32`: `silu(g) * u` on the eight-wide body, libm `expf` on the tail.
pub fn swiglu(g: &[f32], u: &[f32], out: &mut [f32]) {
    assert!(
        g.len() == u.len() && g.len() == out.len(),
        "swiglu: lengths"
    );
    let body = g.len() & !7;
    for i in 0..g.len() {
        out[i] = if i < body {
            v_silu(g[i]) * u[i]
        } else {
            g[i] / (1.0 + (-g[i]).exp()) * u[i]
        };
    }
}
