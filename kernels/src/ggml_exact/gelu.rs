//! Gemma 3's gated GELU as llama.cpp's CPU backend computes it. The gemma3 graph
//! (src/models/gemma3.cpp) calls `build_ffn(.., LLM_FFN_GELU, LLM_FFN_PAR)`, which becomes
//! `ggml_geglu_split(gate, up)`, i.e. `ggml_vec_geglu_f32` per row. ggml-cpu defines
//! `GGML_GELU_FP16`, so that is a table lookup: `x <= -10` gives 0, `x >= 10` gives
//! `x * g`, otherwise `fp32(table[fp16(x)]) * g`, with the table filled at
//! `ggml_cpu_init` as `fp16(ggml_gelu_f32(fp32(h)))` for every fp16 `h`.

use super::{f2h, h2f};
use half::f16;
use std::sync::OnceLock;

/// `GELU_COEF_A = 0.044715f` (f32 bits 0x3d372713).
const GELU_COEF_A: f32 = 0.044715;
/// `SQRT_2_OVER_PI = 0.79788456080286535587989211986876f`: this shorter literal rounds to
/// the same f32 (bits 0x3f4c422a, checked below).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `ggml_gelu_f32`: `0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x)))`
/// with libm's `tanhf` (Rust's `f32::tanh` calls the same libm). GCC contracts
/// `1.0f + GELU_COEF_A*x*x` into `vfmadd213ss` (`fma(A*x, x, 1)`); the rest are plain
/// products evaluated left to right.
pub fn gelu_f32(x: f32) -> f32 {
    let inner = (GELU_COEF_A * x).mul_add(x, 1.0);
    let t = (SQRT_2_OVER_PI * x * inner).tanh();
    (0.5 * x) * (1.0 + t)
}

/// `ggml_table_gelu_f16`, indexed by the fp16 bit pattern.
pub fn gelu_table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|i| f2h(gelu_f32(h2f(f16::from_bits(i)))))
            .collect()
    })
}

/// `ggml_vec_geglu_f32` (`GGML_GELU_FP16` variant): `out = gelu(x) * g`.
pub fn geglu(x: &[f32], g: &[f32], out: &mut [f32]) {
    assert!(x.len() == g.len() && x.len() == out.len(), "geglu: lengths");
    let table = gelu_table();
    for ((o, &x), &g) in out.iter_mut().zip(x).zip(g) {
        *o = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * g
        } else {
            h2f(table[f2h(x).to_bits() as usize]) * g
        };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn constants_are_ggmls_f32s() {
        assert_eq!(super::GELU_COEF_A.to_bits(), 0x3d37_2713);
        assert_eq!(super::SQRT_2_OVER_PI.to_bits(), 0x3f4c_422a);
    }
}
