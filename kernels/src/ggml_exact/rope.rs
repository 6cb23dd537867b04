//! RoPE as ggml's `rotate_pairs` compiled by GCC: each output is one fused multiply-add
//! of the first element's product onto the rounded product of the second
//! (`x0*c - x1*s` becomes `fma(x0, c, -(x1*s))`, scalar and vectorized alike). The angles
//! come from [`crate::ops::rope::RopeTable`], which builds them as `ggml_rope_cache_init`.

use crate::ops::rope::RopeMode;

/// Rotates the first `cos.len() * 2` dimensions of every `head_dim` head of `x` in place;
/// `cos` / `sin` are one position's table rows (one entry per rotated pair).
pub fn rope(mode: RopeMode, x: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32]) {
    assert_eq!(cos.len(), sin.len(), "rope: table rows");
    let half = cos.len();
    assert!(
        2 * half <= head_dim && x.len().is_multiple_of(head_dim),
        "rope: shapes"
    );
    for h in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (x0, x1, c, s) = (h[a], h[b], cos[i], sin[i]);
            h[a] = x0.mul_add(c, -(x1 * s));
            h[b] = x0.mul_add(s, x1 * c);
        }
    }
}
