//! What the low-rank kernels' proptests share (`lowrank`, `lowrank_a8`, `lowrank_q8`).

use proptest::prelude::*;

/// 128 cases, no failure files.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `n` values in `-m..m`.
pub fn f32s(n: usize, m: f32) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-m..m, n)
}

/// The span `lo..hi` of `0..n` between two cut points in `0..1` (either order).
pub fn span(cut: (f64, f64), n: usize) -> (usize, usize) {
    let (u, v) = ((cut.0 * n as f64) as usize, (cut.1 * n as f64) as usize);
    (u.min(v), u.max(v))
}

/// The bits of `v` (results compared bit for bit).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
