//! Bit-exactness of the `ggml_exact` twins gemma-3 Q4_K_M needs (Q8_K quantizers, Q5_0,
//! Q6_K and repacked Q4_K matmuls, GEGLU) against the real ggml CPU code: the oracle
//! `tests/oracle/ggml_kquant_oracle.cpp`, linked against the cached llama.cpp build, writes
//! random inputs and ggml's outputs; every output is recomputed here and compared by bits.
//! Build the oracle with `bash compare/provision-llama.sh`.
#![cfg(target_arch = "x86_64")]

mod common;
use bytemuck::Pod;
use common::{check_quantized_rows, mul_mat_rows, run_oracle, Bits, Reader};

use half::f16;
use pocket_kernels::formats::q4_k::BlockQ4K;
use pocket_kernels::formats::q5_0::BlockQ5_0;
use pocket_kernels::formats::q6_k::BlockQ6K;
use pocket_kernels::formats::q8_0::BlockQ8_0;
use pocket_kernels::formats::q8_k::BlockQ8K;
use pocket_kernels::ggml_exact::{dots, gelu, q4_k, q5_0, q6_k, q8_k, quantize};

const Q5_0: u32 = 6;
const Q8_0: u32 = 8;
const Q4_K: u32 = 12;
const Q6_K: u32 = 14;

fn q8k(t: &mut Bits, what: &str, i: usize, ours: &BlockQ8K, ggml: &BlockQ8K) {
    t.check(bytemuck::bytes_of(ours) == bytemuck::bytes_of(ggml), || {
        format!(
            "{what}[{i}]: d ours {:e} ggml {:e}, codes equal {}, bsums equal {}",
            ours.d,
            ggml.d,
            ours.qs == ggml.qs,
            ours.bsums == ggml.bsums
        )
    });
}

fn zero_q8k() -> BlockQ8K {
    BlockQ8K {
        d: 0.0,
        qs: [0; 256],
        bsums: [0; 16],
    }
}

fn zero_q8_0() -> BlockQ8_0 {
    BlockQ8_0 {
        d: f16::ZERO,
        qs: [0; 32],
    }
}

/// A `mul_mat` record of a weight of `W` blocks of 32 by ggml's vec_dot path: each token
/// quantized to Q8_0, then `dot` per row.
fn q8_0_mul_mat<W: Pod>(
    r: &mut Reader,
    (rows, k, tokens): (usize, usize, usize),
    dot: fn(&[W], &[BlockQ8_0]) -> f32,
) -> Vec<f32> {
    let (w, x) = r.weight_and_x::<W>(rows, k, 32, tokens);
    let quant = quantize::quantize_row_q8_0;
    mul_mat_rows(&w, rows, &x, k, 32, zero_q8_0(), quant, dot)
}

fn check_seed(seed: u64, t: &mut Bits) {
    let mut r = run_oracle("ggml_kquant_oracle", seed, "", b"GKQO", |_| {});
    r.read_records::<7>(&format!("seed {seed}"), |r, kind| {
        let tag = format!("seed {seed} kind {kind}");
        match kind {
            1 | 2 => {
                let quantize = [q8_k::quantize_row_q8_k, q8_k::quantize_row_q8_k_4x8];
                check_quantized_rows(r, t, (&tag, kind), 256, quantize, q8k);
            }
            3 => {
                let ty = r.u32();
                let k = r.u32() as usize;
                let (ours, what) = if ty == Q5_0 {
                    let w: Vec<BlockQ5_0> = r.blocks(k / 32);
                    let a: Vec<BlockQ8_0> = r.blocks(k / 32);
                    (q5_0::vec_dot_q5_0_q8_0(&w, &a), "vec_dot_q5_0_q8_0")
                } else {
                    assert_eq!(ty, Q6_K);
                    let w: Vec<BlockQ6K> = r.blocks(k / 256);
                    let a: Vec<BlockQ8K> = r.blocks(k / 256);
                    (q6_k::vec_dot_q6_k_q8_k(&w, &a), "vec_dot_q6_k_q8_k")
                };
                let ggml = r.f32s(1)[0];
                t.f32(&format!("{tag} {what} k={k}"), 0, ours, ggml);
            }
            4 => {
                let ty = r.u32();
                let k = r.u32() as usize;
                let rows = r.u32() as usize;
                let tokens = r.u32() as usize;
                let repacked = r.u32() == 1;
                let dims = (rows, k, tokens);
                let ours = match ty {
                    Q4_K => {
                        assert!(repacked);
                        let (w, x) = r.weight_and_x::<BlockQ4K>(rows, k, 256, tokens);
                        q4_k::mul_mat_q4_k_repacked(&w, rows, &x, k)
                    }
                    Q6_K => {
                        let (w, x) = r.weight_and_x::<BlockQ6K>(rows, k, 256, tokens);
                        mul_mat_rows(
                            &w,
                            rows,
                            &x,
                            k,
                            256,
                            zero_q8k(),
                            q8_k::quantize_row_q8_k,
                            q6_k::vec_dot_q6_k_q8_k,
                        )
                    }
                    Q5_0 => q8_0_mul_mat(r, dims, q5_0::vec_dot_q5_0_q8_0),
                    Q8_0 => q8_0_mul_mat(r, dims, dots::vec_dot_q8_0_q8_0),
                    _ => panic!("unknown type {ty}"),
                };
                let ggml = r.f32s(tokens * rows);
                let what = format!("{tag} mul_mat type {ty} k={k} rows={rows} tokens={tokens}");
                for (i, (&o, &g)) in ours.iter().zip(&ggml).enumerate() {
                    t.f32(&what, i, o, g);
                }
            }
            5 => {
                let n = r.u32() as usize;
                let rows = r.u32() as usize;
                let g = r.f32s(n * rows);
                let u = r.f32s(n * rows);
                let ggml = r.f32s(n * rows);
                let mut ours = vec![0f32; n * rows];
                for ((gr, ur), o) in g
                    .chunks_exact(n)
                    .zip(u.chunks_exact(n))
                    .zip(ours.chunks_exact_mut(n))
                {
                    gelu::geglu(gr, ur, o);
                }
                for (i, (&o, &gg)) in ours.iter().zip(&ggml).enumerate() {
                    t.f32(&format!("{tag} geglu n={n}"), i, o, gg);
                }
            }
            6 => {
                let table = r.bytes(2 * 65536).to_vec();
                let ours = gelu::gelu_table();
                for (i, c) in table.chunks_exact(2).enumerate() {
                    let g = u16::from_le_bytes([c[0], c[1]]);
                    let o = ours[i].to_bits();
                    // NaN inputs: both give a NaN, the payload is libm's business.
                    let both_nan = f16::from_bits(g).is_nan() && ours[i].is_nan();
                    t.check(o == g || both_nan, || {
                        format!("{tag} gelu table[{i:#06x}]: ours {o:#06x} ggml {g:#06x}")
                    });
                }
            }
            _ => panic!("unknown record kind {kind}"),
        }
    });
}

#[test]
fn kquant_twins_match_ggml_bit_for_bit() {
    let mut t = Bits::default();
    for seed in [1u64, 2, 3, 4, 5] {
        check_seed(seed, &mut t);
    }
    t.assert_clean();
    eprintln!("{} values bit-identical to ggml", t.checked);
}
