//! Checks shared by the matmul test files (`matmul.rs`, `matmul_k.rs`).

use pocket_kernels::matmul::{gemm, PackedMatrix, QuantizedActivation};
use pocket_kernels::{GgmlType, Isa};

/// The int16-saturation check of `extreme_codes_do_not_saturate`: `w` (`rows x cols`,
/// packed from blocks of the extreme code byte `code`) against two activation rows, all
/// `sign` then `-sign·(i % 3)` (so ±127 codes), for both signs, on every available ISA,
/// within `1e-5` of `naive(act)` relative to its magnitudes (`naive` returns the f64
/// product and the `Σ|w·a|` of each output).
pub fn assert_extremes_do_not_saturate(
    ty: GgmlType,
    code: u8,
    w: &PackedMatrix,
    rows: usize,
    cols: usize,
    naive: impl Fn(&QuantizedActivation) -> (Vec<f64>, Vec<f64>),
) {
    for sign in [1.0f32, -1.0] {
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| {
                if i < cols {
                    sign
                } else {
                    -sign * (i % 3) as f32
                }
            })
            .collect();
        let act = QuantizedActivation::quantize(&x, 2);
        let (y, mag) = naive(&act);
        for isa in Isa::available() {
            let mut out = vec![0f32; 2 * rows];
            gemm(w, &act, &mut out, rows, 0..w.panels(), isa);
            for i in 0..out.len() {
                assert!(
                    (out[i] as f64 - y[i]).abs() <= 1e-5 * mag[i] + 1e-6,
                    "{ty:?} code {code:#x} sign {sign} {isa} at {i}: {} vs {}",
                    out[i],
                    y[i]
                );
            }
        }
    }
}
