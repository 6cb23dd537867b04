//! F32 ↔ F16 and F32 ↔ BF16 conversions, element by element and by rows, with ggml's
//! rounding (nearest, ties to even) and NaN handling; plus the F16 dot product.
//!
//! F16 and BF16 tensors are plain arrays of 2-byte values (block size 1); `half::f16`
//! and `half::bf16` are their `#[repr(transparent)]` element types.

use half::{bf16, f16};

/// f32 → f16 as `ggml_compute_fp32_to_fp16`: round to nearest even; every NaN becomes the
/// canonical quiet NaN `0x7E00` with the input's sign.
pub fn fp32_to_fp16(x: f32) -> f16 {
    if x.is_nan() {
        let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
        f16::from_bits(sign | 0x7E00)
    } else {
        f16::from_f32(x)
    }
}

/// f32 → bf16 as `ggml_compute_fp32_to_bf16`: NaN keeps its top bits and is forced
/// quiet; everything else rounds to nearest even (overflowing to infinity).
pub fn fp32_to_bf16(x: f32) -> bf16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return bf16::from_bits(((u >> 16) | 64) as u16);
    }
    bf16::from_bits((u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16)
}

/// bf16 → f32: exact (the top half of an f32).
pub fn bf16_to_fp32(x: bf16) -> f32 {
    f32::from_bits((x.to_bits() as u32) << 16)
}

/// Widens a row of f16 (exact).
pub fn f16_to_f32_row(x: &[f16], out: &mut [f32]) {
    assert_eq!(x.len(), out.len());
    for (y, v) in out.iter_mut().zip(x) {
        *y = v.to_f32();
    }
}

/// Narrows a row to f16 with [`fp32_to_fp16`].
pub fn f32_to_f16_row(x: &[f32], out: &mut [f16]) {
    assert_eq!(x.len(), out.len());
    for (y, &v) in out.iter_mut().zip(x) {
        *y = fp32_to_fp16(v);
    }
}

/// Widens a row of bf16 (exact).
pub fn bf16_to_f32_row(x: &[bf16], out: &mut [f32]) {
    assert_eq!(x.len(), out.len());
    for (y, &v) in out.iter_mut().zip(x) {
        *y = bf16_to_fp32(v);
    }
}

/// Narrows a row to bf16 with [`fp32_to_bf16`].
pub fn f32_to_bf16_row(x: &[f32], out: &mut [bf16]) {
    assert_eq!(x.len(), out.len());
    for (y, &v) in out.iter_mut().zip(x) {
        *y = fp32_to_bf16(v);
    }
}

/// Scalar reference F16×F16 dot product (`ggml_vec_dot_f16` without SIMD): products in
/// f32, accumulated in f64.
pub fn vec_dot_f16(a: &[f16], b: &[f16]) -> f32 {
    assert_eq!(a.len(), b.len());
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x.to_f32() * y.to_f32()) as f64)
        .sum();
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::super::test_util::Rng;
    use super::*;

    #[test]
    fn f16_rounds_to_nearest_even_and_canonicalises_nan() {
        assert_eq!(fp32_to_fp16(1.0 + 1.0 / 2048.0).to_bits(), 0x3C00); // tie, even stays
        assert_eq!(fp32_to_fp16(1.0 + 3.0 / 2048.0).to_bits(), 0x3C02); // tie, rounds up
        assert_eq!(fp32_to_fp16(65520.0).to_bits(), 0x7C00); // overflows to inf
        assert_eq!(fp32_to_fp16(f32::from_bits(0x7F80_0001)).to_bits(), 0x7E00);
        assert_eq!(fp32_to_fp16(f32::from_bits(0xFFC1_2345)).to_bits(), 0xFE00);
        assert_eq!(fp32_to_fp16(5.96e-8).to_bits(), 0x0001); // smallest subnormal
    }

    #[test]
    fn f16_round_trip_is_exact_for_every_non_nan_f16() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            if !h.is_nan() {
                assert_eq!(fp32_to_fp16(h.to_f32()).to_bits(), bits);
            }
        }
    }

    #[test]
    fn bf16_matches_the_ggml_formula() {
        assert_eq!(fp32_to_bf16(1.0).to_bits(), 0x3F80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3F80_8000)).to_bits(), 0x3F80); // tie to even
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3F81_8000)).to_bits(), 0x3F82);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x7F80_0001)).to_bits(), 0x7FC0); // quiet NaN
        assert_eq!(fp32_to_bf16(f32::MAX).to_bits(), 0x7F80); // rounds up to inf
        let mut rng = Rng::new(21);
        for _ in 0..10000 {
            let x = f32::from_bits(rng.next_u64() as u32);
            let b = fp32_to_bf16(x);
            if !x.is_nan() {
                // the result is one of the two neighbours, and the nearer one
                let err = (bf16_to_fp32(b) as f64 - x as f64).abs();
                let ulp =
                    f32::from_bits((x.to_bits() & 0x7F80_0000).max(0x0080_0000)) as f64 / 128.0;
                assert!(b.to_f32().is_infinite() || err <= ulp / 2.0, "{x:e}");
            }
        }
    }

    #[test]
    fn rows_convert_and_dot() {
        let x = [1.5f32, -2.25, 3.0e-5, 7.0];
        let mut h = [f16::ZERO; 4];
        f32_to_f16_row(&x, &mut h);
        let mut back = [0.0; 4];
        f16_to_f32_row(&h, &mut back);
        assert_eq!(back[0], 1.5);
        assert_eq!(back[1], -2.25);
        assert!((back[2] - 3.0e-5).abs() < 1e-7);
        assert_eq!(vec_dot_f16(&h, &h), back.iter().map(|v| v * v).sum::<f32>());
        let mut b = [bf16::ZERO; 4];
        f32_to_bf16_row(&x, &mut b);
        bf16_to_f32_row(&b, &mut back);
        assert_eq!(&back[..2], &[1.5, -2.25]);
    }
}
