//! Bit-exactness of the Q4_0 twins (`ggml_exact::q4_0`) against the real ggml CPU code: the
//! oracle `tests/oracle/ggml_q4_0_oracle.cpp`, linked against the cached llama.cpp build,
//! runs Q8_0 quantizers, `ggml_vec_dot_q4_0_q8_0` and real `mul_mat` graphs (Q4_0 weights
//! repacked to q4_0_8x8 in the CPU_REPACK buffer, or plain when `rows % 8 != 0`) on random
//! data with 1 and 2 threads; every output is recomputed here and compared by bits.
//! Build the oracle with `bash compare/provision-llama.sh`.
#![cfg(target_arch = "x86_64")]

mod common;
use common::{check_quantized_rows, run_oracle, Bits};

use half::f16;
use pocket_kernels::formats::q4_0::BlockQ4_0;
use pocket_kernels::formats::q8_0::BlockQ8_0;
use pocket_kernels::ggml_exact::q4_0;

fn q8_0(t: &mut Bits, what: &str, i: usize, ours: &BlockQ8_0, ggml: &BlockQ8_0) {
    t.check(bytemuck::bytes_of(ours) == bytemuck::bytes_of(ggml), || {
        format!(
            "{what}[{i}]: d ours {} ggml {}, codes equal {}",
            ours.d,
            ggml.d,
            ours.qs == ggml.qs
        )
    });
}

fn check_seed(seed: u64, threads: usize, t: &mut Bits) {
    let mut r = run_oracle(
        "ggml_q4_0_oracle",
        seed,
        &threads.to_string(),
        b"GQ40",
        |c| {
            c.env("ORACLE_THREADS", threads.to_string());
        },
    );
    let mut repacked_cases = 0;
    let mut plain_cases = 0;
    r.read_records::<5>(&format!("seed {seed}"), |r, kind| {
        let tag = format!("seed {seed} threads {threads} kind {kind}");
        match kind {
            1 | 2 => {
                let quantize = [q4_0::quantize_row_q8_0, q4_0::quantize_row_q8_0_4x8];
                check_quantized_rows(r, t, (&tag, kind), 32, quantize, q8_0);
            }
            3 => {
                let k = r.u32() as usize;
                let w: Vec<BlockQ4_0> = r.blocks(k / 32);
                let a: Vec<BlockQ8_0> = r.blocks(k / 32);
                let ggml = r.f32s(1)[0];
                let ours = q4_0::vec_dot_q4_0_q8_0(&w, &a);
                t.f32(&format!("{tag} vec_dot_q4_0_q8_0 k={k}"), 0, ours, ggml);
            }
            4 => {
                let k = r.u32() as usize;
                let rows = r.u32() as usize;
                let repacked = r.u32() == 1;
                assert_eq!(repacked, rows.is_multiple_of(8));
                let w: Vec<BlockQ4_0> = r.blocks(rows * k / 32);
                let n_cases = r.u32();
                for _ in 0..n_cases {
                    let tokens = r.u32() as usize;
                    let x = r.f32s(tokens * k);
                    let ggml = r.f32s(tokens * rows);
                    let ours = if repacked {
                        repacked_cases += 1;
                        q4_0::mul_mat_q4_0_repacked(&w, rows, &x, k)
                    } else {
                        plain_cases += 1;
                        q4_0::mul_mat_q4_0_plain(&w, rows, &x, k)
                    };
                    let what = format!(
                        "{tag} mul_mat k={k} rows={rows} tokens={tokens} repacked={repacked}"
                    );
                    for (i, (&o, &g)) in ours.iter().zip(&ggml).enumerate() {
                        t.f32(&what, i, o, g);
                    }
                }
            }
            _ => panic!("unknown record kind {kind}"),
        }
    });
    assert!(
        repacked_cases > 0 && plain_cases > 0,
        "seed {seed}: no repacked or no plain mul_mat case"
    );
}

#[test]
fn q4_0_twins_match_ggml_bit_for_bit() {
    let mut t = Bits::default();
    for threads in [1, 2] {
        for seed in [1u64, 2, 3] {
            check_seed(seed, threads, &mut t);
        }
    }
    t.assert_clean();
    eprintln!("{} values bit-identical to ggml", t.checked);
}

/// The two kernels round differently (one accumulator of whole-block sums vs eight lane
/// accumulators and a horizontal sum): a repacked and a plain weight of the same values
/// disagree in the last bits somewhere, so a parity run must pick the right one.
#[test]
fn repacked_and_plain_q4_0_differ() {
    let k = 896;
    let rows = 8;
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let w: Vec<BlockQ4_0> = (0..rows * k / 32)
        .map(|_| BlockQ4_0 {
            d: f16::from_f32(((next() % 1000) as f32 - 500.0) * 1e-4),
            qs: std::array::from_fn(|_| next() as u8),
        })
        .collect();
    let x: Vec<f32> = (0..3 * k)
        .map(|_| ((next() % 20001) as f32 - 10000.0) * 1e-4)
        .collect();
    let a = q4_0::mul_mat_q4_0_repacked(&w, rows, &x, k);
    let b = q4_0::mul_mat_q4_0_plain(&w, rows, &x, k);
    assert!(a.iter().zip(&b).any(|(p, q)| p.to_bits() != q.to_bits()));
    assert!(a
        .iter()
        .zip(&b)
        .all(|(p, q)| (p - q).abs() <= 1e-3 * (1.0 + q.abs())));
}
