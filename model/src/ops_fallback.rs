//! Scalar element-wise ops of the forward pass (RMSNorm, RoPE, SiLU, GELU, softmax),
//! written to follow ggml's CPU arithmetic. The SIMD versions (pocket-kernels `ops`) will
//! replace these behind the same signatures.

use crate::config::RopeType;

/// `out = x / sqrt(mean(x²) + eps) * w` (ggml sums the squares in double).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let scale = 1.0 / ((sum / x.len() as f64) as f32 + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// In-place [`rms_norm`].
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let scale = 1.0 / ((sum / x.len() as f64) as f32 + eps).sqrt();
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// The rotation angles' cos/sin for one position: `theta_i = pos·s·base^(-2i/n_rot)`,
/// computed as ggml does (a running product of `base^(-2/n_rot)` in f32).
pub fn rope_cache(pos: usize, n_rot: usize, base: f32, freq_scale: f32, cs: &mut Vec<(f32, f32)>) {
    cs.clear();
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta = pos as f32 * freq_scale;
    for _ in 0..n_rot / 2 {
        cs.push((theta.cos(), theta.sin()));
        theta *= theta_scale;
    }
}

/// Rotates the first `2·cs.len()` dimensions of one head.
pub fn rope_apply(head: &mut [f32], cs: &[(f32, f32)], ty: RopeType) {
    let half = cs.len();
    match ty {
        RopeType::Normal => {
            for (i, &(c, s)) in cs.iter().enumerate() {
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * c - b * s;
                head[2 * i + 1] = a * s + b * c;
            }
        }
        RopeType::Neox => {
            for (i, &(c, s)) in cs.iter().enumerate() {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * c - b * s;
                head[i + half] = a * s + b * c;
            }
        }
    }
}

/// RoPE of one head at `pos` (convenience for tests).
pub fn rope(head: &mut [f32], pos: usize, n_rot: usize, base: f32, freq_scale: f32, ty: RopeType) {
    let mut cs = Vec::new();
    rope_cache(pos, n_rot, base, freq_scale, &mut cs);
    rope_apply(head, &cs, ty);
}

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (ggml's `ggml_gelu_f32`).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + A * x * x)).tanh())
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_normal_and_neox_on_known_values() {
        // pos 1, n_rot 4, base 10000: theta = [1, 0.01].
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let (c0, s0, c1, s1) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
        let mut n = x;
        rope(&mut n, 1, 4, 10000.0, 1.0, RopeType::Normal);
        let want_n = [
            1.0 * c0 - 2.0 * s0,
            1.0 * s0 + 2.0 * c0,
            3.0 * c1 - 4.0 * s1,
            3.0 * s1 + 4.0 * c1,
        ];
        let mut x2 = x;
        rope(&mut x2, 1, 4, 10000.0, 1.0, RopeType::Neox);
        let want_x = [
            1.0 * c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            1.0 * s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
        ];
        for i in 0..4 {
            assert!((n[i] - want_n[i]).abs() < 1e-5, "normal {i}: {n:?}");
            assert!((x2[i] - want_x[i]).abs() < 1e-5, "neox {i}: {x2:?}");
        }
        // position 0 is the identity; dimensions past n_rot are untouched
        let mut y = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        rope(&mut y, 0, 4, 10000.0, 1.0, RopeType::Neox);
        assert_eq!(y, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        rope(&mut y, 7, 4, 10000.0, 1.0, RopeType::Normal);
        assert_eq!(&y[4..], &[5.0, 6.0]);
    }

    #[test]
    fn rms_norm_unit() {
        let x = [3.0f32, 4.0];
        let mut o = [0.0; 2];
        rms_norm(&x, &[1.0, 2.0], 0.0, &mut o);
        let r = (12.5f32).sqrt();
        assert!((o[0] - 3.0 / r).abs() < 1e-6 && (o[1] - 8.0 / r).abs() < 1e-6);
    }
}
