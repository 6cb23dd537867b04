//! Packed matmul kernels: every available ISA against the scalar packed reference (tight),
//! and the scalar reference against a naive f64 dot of weights dequantized straight from
//! the raw GGUF bytes with the dequantized activation (loose).

use half::f16;
use pocket_kernels::matmul::{
    gemm, gemm_swiglu, gemv, gemv_swiglu, Layout, PackOptions, PackedMatrix, QuantizedActivation,
};
use pocket_kernels::{GgmlType, Isa};
use proptest::prelude::*;

mod common;
use common::{assert_pack_refuses, random_act, Rng};

/// Random raw GGUF bytes. `share`: Q4_1 64-groups share (d, m) (MNN-Pocket style).
fn random_tensor(ty: GgmlType, rows: usize, cols: usize, share: bool, rng: &mut Rng) -> Vec<u8> {
    let nb = cols / 32;
    let mut out = Vec::new();
    for _ in 0..rows {
        let mut prev_dm = [0u8; 4];
        for b in 0..nb {
            let d = f16::from_f32(rng.f(-0.05, 0.05)).to_bits().to_le_bytes();
            let m = f16::from_f32(rng.f(-0.4, 0.4)).to_bits().to_le_bytes();
            match ty {
                GgmlType::Q4_0 => out.extend_from_slice(&d),
                GgmlType::Q4_1 => {
                    let dm = if share && b % 2 == 1 {
                        prev_dm
                    } else {
                        [d[0], d[1], m[0], m[1]]
                    };
                    prev_dm = dm;
                    out.extend_from_slice(&dm);
                }
                GgmlType::Q8_0 => out.extend_from_slice(&d),
                _ => unreachable!(),
            }
            let n = if ty == GgmlType::Q8_0 { 32 } else { 16 };
            for _ in 0..n {
                out.push(rng.next() as u8);
            }
        }
    }
    out
}

/// Row `r` dequantized from the raw GGUF bytes (independent of the packing), for
/// [`common::naive_product`] with the dequantized activation.
fn naive_row(ty: GgmlType, bytes: &[u8], r: usize, cols: usize) -> Vec<f64> {
    let bb = ty.type_size();
    let rb = cols / 32 * bb;
    let row = &bytes[r * rb..(r + 1) * rb];
    let h = |b: &[u8]| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64();
    let mut out = Vec::with_capacity(cols);
    for blk in row.chunks_exact(bb) {
        let d = h(&blk[0..2]);
        match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let (m, qs) = if ty == GgmlType::Q4_0 {
                    (-8.0 * d, &blk[2..18])
                } else {
                    (h(&blk[2..4]), &blk[4..20])
                };
                let mut e = [0f64; 32];
                for j in 0..16 {
                    e[j] = (qs[j] & 15) as f64 * d + m;
                    e[j + 16] = (qs[j] >> 4) as f64 * d + m;
                }
                out.extend_from_slice(&e);
            }
            _ => out.extend(blk[2..34].iter().map(|&q| q as i8 as f64 * d)),
        }
    }
    out
}

fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

fn ty_strategy() -> impl Strategy<Value = (GgmlType, bool)> {
    prop_oneof![
        Just((GgmlType::Q4_0, false)),
        Just((GgmlType::Q4_1, false)),
        Just((GgmlType::Q4_1, true)),
        Just((GgmlType::Q8_0, false)),
    ]
}

/// A format (as [`ty_strategy`]) with a row length it takes: `1..=max_blocks` blocks of
/// 32, made even when Q4_1 64-groups share (d, m).
fn weights_strategy(max_blocks: usize) -> impl Strategy<Value = (GgmlType, bool, usize)> {
    (ty_strategy(), 1..=max_blocks).prop_map(|((ty, share), blocks)| {
        let blocks = if share { blocks + blocks % 2 } else { blocks };
        (ty, share, blocks * 32)
    })
}

/// A product: weights of up to 9 blocks a row, `1..=max_rows` rows, `1..=max_tokens`
/// tokens, and the seed of the data.
fn product_strategy(
    max_rows: usize,
    max_tokens: usize,
) -> impl Strategy<Value = ((GgmlType, bool, usize), usize, usize, u64)> {
    (
        weights_strategy(9),
        1..=max_rows,
        1..=max_tokens,
        any::<u64>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn gemm_and_gemv_match_reference(
        // Up to 20 tokens: both one- and two-panel VNNI tiles (two from 5 to 16 tokens
        // by format, `vnni::pairs_from`).
        ((ty, share, cols), rows, tokens, seed) in product_strategy(41, 20),
    ) {
        let mut rng = Rng(seed);
        let bytes = random_tensor(ty, rows, cols, share, &mut rng);
        let w = PackedMatrix::pack(ty, &bytes, rows, cols).unwrap();
        if ty == GgmlType::Q4_1 {
            prop_assert_eq!(w.layout, if share { Layout::Q4_1x64 } else { Layout::Q4_1 });
        }
        let x = random_act(tokens, cols, &mut rng);
        let act = QuantizedActivation::quantize(&x, tokens);
        let (y, mag) = common::naive_product(&act, false, rows, |r| naive_row(ty, &bytes, r, cols));
        let mut reference = vec![0f32; tokens * rows];
        gemm(&w, &act, &mut reference, rows, 0..w.panels(), Isa::Scalar);
        for i in 0..y.len() {
            let tol = 1e-5 * mag[i] + 1e-6;
            prop_assert!((reference[i] as f64 - y[i]).abs() <= tol,
                "scalar vs naive at {}: {} vs {} (tol {})", i, reference[i], y[i], tol);
        }
        for isa in Isa::available() {
            let mut out = vec![f32::NAN; tokens * rows];
            gemm(&w, &act, &mut out, rows, 0..w.panels(), isa);
            for i in 0..y.len() {
                let tol = 1e-6 * mag[i] + 1e-7;
                prop_assert!((out[i] - reference[i]).abs() as f64 <= tol,
                    "{} gemm vs scalar at {}: {} vs {}", isa, i, out[i], reference[i]);
            }
            // gemv over a split panel range = row 0 of the gemm.
            let split = (seed as usize) % (w.panels() + 1);
            let g = common::gemv_split(&w, &act, split, isa);
            for r in 0..rows {
                prop_assert!((g[r] - reference[r]).abs() as f64 <= 1e-6 * mag[r] + 1e-7,
                    "{} gemv row {}: {} vs {}", isa, r, g[r], reference[r]);
            }
            // A token sub-range, a panel sub-range, and a wider ld.
            common::check_gemm_tokens(&w, &act, &out, (split, seed), isa)?;
        }
    }

    #[test]
    fn swiglu_matches_reference(
        ((ty, share, cols), rows, tokens, seed) in product_strategy(25, 20),
    ) {
        let mut rng = Rng(seed);
        let gate = random_tensor(ty, rows, cols, share, &mut rng);
        let up = random_tensor(ty, rows, cols, share, &mut rng);
        let w = PackedMatrix::pack_swiglu(ty, &gate, &up, rows, cols).unwrap();
        let x = random_act(tokens, cols, &mut rng);
        let act = QuantizedActivation::quantize(&x, tokens);
        let (g, gm) = common::naive_product(&act, false, rows, |r| naive_row(ty, &gate, r, cols));
        let (u, um) = common::naive_product(&act, false, rows, |r| naive_row(ty, &up, r, cols));
        let mut reference = vec![0f32; tokens * rows];
        gemm_swiglu(&w, &act, &mut reference, rows, 0..w.panels(), Isa::Scalar);
        for i in 0..g.len() {
            let want = silu(g[i]) * u[i];
            // d(silu(g)u) = silu'(g)·u·dg + silu(g)·du, |silu'| <= 1.1, |silu(g)| <= |g|+0.3
            let tol = 1e-5 * (1.1 * u[i].abs() * gm[i] + (g[i].abs() + 0.3) * um[i]) + 1e-6;
            prop_assert!((reference[i] as f64 - want).abs() <= tol,
                "scalar swiglu vs naive at {}: {} vs {}", i, reference[i], want);
        }
        for isa in Isa::available() {
            let mut out = vec![f32::NAN; tokens * rows];
            gemm_swiglu(&w, &act, &mut out, rows, 0..w.panels(), isa);
            let mut one = vec![f32::NAN; rows];
            gemv_swiglu(&w, &act, &mut one, 0..w.panels(), isa);
            for i in 0..g.len() {
                let tol = 1e-5 * (reference[i].abs() as f64) + 1e-6;
                prop_assert!((out[i] - reference[i]).abs() as f64 <= tol,
                    "{} swiglu at {}: {} vs {}", isa, i, out[i], reference[i]);
                if i < rows {
                    prop_assert_eq!(one[i].to_bits(), out[i].to_bits());
                }
            }
        }
    }

    #[test]
    fn stacked_equals_separate(
        (ty, share, cols) in weights_strategy(5),
        r1 in 1usize..=20, r2 in 1usize..=20, r3 in 1usize..=20,
        seed in any::<u64>(),
    ) {
        let mut rng = Rng(seed);
        let ts: Vec<(Vec<u8>, usize)> = [r1, r2, r3].iter()
            .map(|&r| (random_tensor(ty, r, cols, share, &mut rng), r)).collect();
        let parts: Vec<(&[u8], usize)> = ts.iter().map(|(b, r)| (&b[..], *r)).collect();
        let fused = PackedMatrix::pack_stacked(ty, &parts, cols).unwrap();
        prop_assert_eq!(fused.parts(), &[r1, r2, r3][..]);
        let act = QuantizedActivation::quantize(&random_act(2, cols, &mut rng), 2);
        let n = r1 + r2 + r3;
        for isa in Isa::available() {
            let mut all = vec![0f32; 2 * n];
            gemm(&fused, &act, &mut all, n, 0..fused.panels(), isa);
            let mut off = 0;
            for (b, r) in &parts {
                let m = PackedMatrix::pack(ty, b, *r, cols).unwrap();
                let mut o = vec![0f32; 2 * r];
                gemm(&m, &act, &mut o, *r, 0..m.panels(), isa);
                for t in 0..2 {
                    for i in 0..*r {
                        // Same per-row arithmetic whatever the panel position.
                        prop_assert_eq!(o[t * r + i].to_bits(), all[t * n + off + i].to_bits());
                    }
                }
                off += r;
            }
        }
    }
}

#[test]
fn pack_rejects_bad_shapes() {
    let b = vec![0u8; 18 * 4];
    // 3 rows of 64 would be 108 bytes.
    assert_pack_refuses(GgmlType::Q4_0, &b, 48, (3, 64));
    assert!(PackedMatrix::pack(GgmlType::Q4_0, &b, 2, 64).is_ok());
}

#[test]
fn merged_q4_1_reads_fewer_bytes() {
    let (rows, cols) = (24, 256);
    let bytes = random_tensor(GgmlType::Q4_1, rows, cols, true, &mut Rng(7));
    let merged = PackedMatrix::pack(GgmlType::Q4_1, &bytes, rows, cols).unwrap();
    let split = PackedMatrix::pack_with(
        GgmlType::Q4_1,
        &bytes,
        rows,
        cols,
        PackOptions { merge_q4_1: false },
    )
    .unwrap();
    assert_eq!(merged.layout, Layout::Q4_1x64);
    assert_eq!(split.layout, Layout::Q4_1);
    assert_eq!(split.bytes(), rows * cols * 5 / 8);
    assert_eq!(merged.bytes(), rows * cols * 9 / 16);
    let act = QuantizedActivation::quantize(&random_act(1, cols, &mut Rng(8)), 1);
    for isa in Isa::available() {
        let (mut a, mut b) = (vec![0f32; rows], vec![0f32; rows]);
        gemv(&merged, &act, &mut a, 0..3, isa);
        gemv(&split, &act, &mut b, 0..3, isa);
        for r in 0..rows {
            assert!(
                (a[r] - b[r]).abs() <= 1e-5 * (1.0 + b[r].abs()),
                "{isa} {r}"
            );
        }
    }
}

#[test]
#[should_panic(expected = "activation width")]
fn width_mismatch_panics() {
    let b = vec![0u8; 18 * 2];
    let w = PackedMatrix::pack(GgmlType::Q4_0, &b, 1, 64).unwrap();
    let act = QuantizedActivation::quantize(&[0.0; 32], 1);
    gemv(&w, &act, &mut [0.0], 0..1, Isa::Scalar);
}

proptest! {
    #[test]
    fn quantize_is_identical_on_every_isa(
        tokens in 1usize..=3,
        // Up to 120 blocks: AVX-512 quantizes 16 at a time, then the rest one by one.
        blocks in 1usize..=40,
        seed in any::<u64>(),
        specials in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..5), 0..4),
    ) {
        let cols = blocks * 32;
        let mut rng = Rng(seed);
        let scale = [1e-30f32, 1e-3, 1.0, 1e3, 1e30][seed as usize % 5];
        let mut x: Vec<f32> = (0..tokens * cols).map(|_| rng.f(-1.0, 1.0) * scale).collect();
        for (i, k) in specials {
            let n = x.len();
            x[i.index(n)] = [f32::NAN, f32::INFINITY, -0.0, 0.5 * scale, -127.5][k as usize];
        }
        let r = QuantizedActivation::quantize_with(&x, tokens, Isa::Scalar);
        for isa in Isa::available() {
            let a = QuantizedActivation::quantize_with(&x, tokens, isa);
            for t in 0..tokens {
                prop_assert_eq!(a.row_qs(t), r.row_qs(t), "{}", isa);
                prop_assert_eq!(a.row_sum(t), r.row_sum(t));
                prop_assert_eq!(a.row_sum8(t), r.row_sum8(t));
                prop_assert_eq!(a.row_sum16(t), r.row_sum16(t), "{}", isa);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(a.row_d(t)), bits(r.row_d(t)));
                prop_assert_eq!(bits(a.row_ds(t)), bits(r.row_ds(t)));
            }
        }
    }
}

#[test]
fn split_helpers_cover_every_row_once() {
    let (rows, cols) = (45, 64);
    let bytes = random_tensor(GgmlType::Q4_0, rows, cols, false, &mut Rng(3));
    let w = PackedMatrix::pack(GgmlType::Q4_0, &bytes, rows, cols).unwrap();
    let act = QuantizedActivation::quantize(&random_act(1, cols, &mut Rng(4)), 1);
    let mut full = vec![0f32; rows];
    gemv(&w, &act, &mut full, 0..w.panels(), Isa::detect());
    for n in 1..=8 {
        let ranges = w.split_panels(n);
        assert_eq!(ranges.len(), n);
        let mut out = vec![f32::NAN; rows];
        std::thread::scope(|s| {
            for (r, o) in ranges.iter().zip(w.split_out(&mut out, &ranges)) {
                let (w, act, r) = (&w, &act, r.clone());
                s.spawn(move || gemv(w, act, o, r, Isa::detect()));
            }
        });
        assert_eq!(out, full, "{n} threads");
    }
}

/// Raw GGUF bytes whose every code byte is `code`, with d = 0.5 (and m = -1 for Q4_1).
fn constant_code_tensor(ty: GgmlType, rows: usize, cols: usize, code: u8) -> Vec<u8> {
    let bb = ty.type_size();
    let mut bytes = vec![code; rows * cols / 32 * bb];
    for blk in bytes.chunks_exact_mut(bb) {
        blk[0..2].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
        if ty == GgmlType::Q4_1 {
            blk[2..4].copy_from_slice(&f16::from_f32(-1.0).to_bits().to_le_bytes());
        }
    }
    bytes
}

/// The integer paths' worst cases: all-15 nibbles / -128 int8 codes against ±127
/// activations (the int16 sums must not saturate), over a long row.
#[test]
fn extreme_codes_do_not_saturate() {
    let (rows, cols) = (11, 4096);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        for code in [0xFFu8, 0x80, 0x00, 0x0F, 0xF0] {
            let bytes = constant_code_tensor(ty, rows, cols, code);
            let w = PackedMatrix::pack(ty, &bytes, rows, cols).unwrap();
            common::assert_extremes_do_not_saturate(ty, code, &w, rows, cols, |act| {
                common::naive_product(act, false, rows, |r| naive_row(ty, &bytes, r, cols))
            });
        }
    }
}

/// Packs `rows x cols` of `layout` from random bytes (Q4_1x64 via shared 64-group scales).
fn random_packed(layout: Layout, rows: usize, cols: usize, rng: &mut Rng) -> PackedMatrix {
    let (ty, share) = match layout {
        Layout::Q4_0 => (GgmlType::Q4_0, false),
        Layout::Q4_1 => (GgmlType::Q4_1, false),
        Layout::Q4_1x64 => (GgmlType::Q4_1, true),
        Layout::Q8_0 => (GgmlType::Q8_0, false),
        // K-quant / Q5_0 layouts have their own tests (matmul_k.rs).
        other => panic!("random_packed covers the 32-block layouts only, not {other:?}"),
    };
    let bytes = random_tensor(ty, rows, cols, share, rng);
    let opts = PackOptions { merge_q4_1: share };
    let w = PackedMatrix::pack_with(ty, &bytes, rows, cols, opts).unwrap();
    assert_eq!(w.layout, layout);
    w
}

fn assert_bits_eq(isa: Isa, what: &str, got: &[f32], want: &[f32]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{isa} {what} at {i}: {g} vs {w}");
    }
}

/// Every SIMD level reproduces the scalar reference bit for bit on plain products (the
/// integer block sums are exact and the float epilogue follows the reference's order), for
/// every token count a tile split can leave (1..=9: gemv, odd tokens, i8mm pairs; 9..=12:
/// AVX-512 VNNI's one-tile calls), 16 and 20 (the AVX-512 VNNI two-panel tiles start
/// between 5 and 16 tokens by format) and partial last panels.
#[test]
fn simd_matches_scalar_bit_for_bit() {
    let layouts = [Layout::Q4_0, Layout::Q4_1, Layout::Q4_1x64, Layout::Q8_0];
    let mut rng = Rng(11);
    for layout in layouts {
        for rows in [1, 5, 8, 13, 24] {
            let cols = 128;
            let w = random_packed(layout, rows, cols, &mut rng);
            for tokens in (1..=12).chain([16, 20]) {
                let act =
                    QuantizedActivation::quantize(&random_act(tokens, cols, &mut rng), tokens);
                let mut want = vec![0f32; tokens * rows];
                gemm(&w, &act, &mut want, rows, 0..w.panels(), Isa::Scalar);
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; tokens * rows];
                    gemm(&w, &act, &mut got, rows, 0..w.panels(), isa);
                    assert_bits_eq(
                        isa,
                        &format!("{layout:?} {rows}x{tokens} gemm"),
                        &got,
                        &want,
                    );
                    let mut one = vec![f32::NAN; rows];
                    gemv(&w, &act, &mut one, 0..w.panels(), isa);
                    assert_bits_eq(isa, &format!("{layout:?} {rows} gemv"), &one, &want[..rows]);
                }
            }
        }
    }
}

/// The saturation extremes (all-15 nibbles, -128 / 127 int8 codes against ±127
/// activations over 4096 columns) for 1 and 3 tokens — the gemv core and the odd-token
/// path next to a token pair — bit for bit against the scalar reference.
#[test]
fn extreme_codes_exact_for_odd_token_counts() {
    let (rows, cols) = (9, 4096);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        for code in [0xFFu8, 0x80, 0x7F] {
            let bytes = constant_code_tensor(ty, rows, cols, code);
            let w = PackedMatrix::pack(ty, &bytes, rows, cols).unwrap();
            for tokens in [1, 3] {
                let x: Vec<f32> = (0..tokens * cols)
                    .map(|i| if (i / cols) % 2 == 0 { 1.0 } else { -1.0 })
                    .collect();
                let act = QuantizedActivation::quantize(&x, tokens);
                let mut want = vec![0f32; tokens * rows];
                gemm(&w, &act, &mut want, rows, 0..w.panels(), Isa::Scalar);
                for isa in Isa::available() {
                    let mut got = vec![f32::NAN; tokens * rows];
                    gemm(&w, &act, &mut got, rows, 0..w.panels(), isa);
                    assert_bits_eq(isa, &format!("{ty:?} {code:#x} x{tokens}"), &got, &want);
                }
            }
        }
    }
}
