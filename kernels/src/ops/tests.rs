//! Every SIMD path of the ops against its scalar reference, over random lengths (tails
//! included), for every level this CPU runs (`Isa::available()`): natively on x86 and at
//! three levels under qemu on aarch64 (`kernels/tests/aarch64.sh`).

use super::activation::*;
use super::convert::*;
use super::norm::*;
use super::rope::*;
use super::softmax::*;
use crate::Isa;
use half::f16;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Asserts `|got - want| <= rel * |want| + abs` element-wise (NaN matches NaN).
fn assert_close(isa: Isa, what: &str, got: &[f32], want: &[f32], rel: f32, abs: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() || g == w {
            continue;
        }
        let tol = rel * w.abs() + abs;
        assert!(
            (g - w).abs() <= tol,
            "{what} on {isa}, n={} at {i}: got {g:e}, want {w:e} (diff {:e}, tol {tol:e})",
            got.len(),
            (g - w).abs()
        );
    }
}

fn vals(lo: f32, hi: f32, max_len: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(lo..hi, 0..max_len)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn rms_norm_matches_reference(
        (x, w) in (0usize..300).prop_flat_map(|n| (
            prop::collection::vec(-10f32..10.0, n),
            prop::collection::vec(-2f32..2.0, n),
        )),
        eps in prop::sample::select(vec![1e-6f32, 1e-5]),
    ) {
        let mut want = vec![0.0; x.len()];
        rms_norm_ref(&x, &w, eps, &mut want);
        for isa in Isa::available() {
            let mut got = vec![0.0; x.len()];
            rms_norm_with(isa, &x, &w, eps, &mut got);
            assert_close(isa, "rms_norm", &got, &want, 1e-5, 1e-6);
            let mut inplace = x.clone();
            rms_norm_inplace_with(isa, &mut inplace, &w, eps);
            prop_assert_eq!(&inplace, &got);
        }
    }

    #[test]
    fn rms_norm_heads_matches_reference(
        head_dim in 1usize..80,
        n_heads in 1usize..5,
        seed in prop::collection::vec(-8f32..8.0, 400),
        w in prop::collection::vec(-2f32..2.0, 80),
    ) {
        let x = &seed[..head_dim * n_heads];
        let w = &w[..head_dim];
        let mut want = x.to_vec();
        rms_norm_heads_ref(&mut want, w, 1e-6);
        for isa in Isa::available() {
            let mut got = x.to_vec();
            rms_norm_heads_with(isa, &mut got, w, 1e-6);
            assert_close(isa, "rms_norm_heads", &got, &want, 1e-5, 1e-6);
        }
    }

    #[test]
    fn rope_matches_reference(
        half_head in 1usize..80,
        rot_frac in 0.0f64..=1.0,
        n_heads in 1usize..4,
        pos in 0usize..40_000,
        base in prop::sample::select(vec![10_000f32, 1_000_000.0]),
        neox in any::<bool>(),
        seed in prop::collection::vec(-4f32..4.0, 640),
    ) {
        let head_dim = 2 * half_head;
        let half_rot = ((half_head as f64 * rot_frac).round() as usize).max(1);
        let n_rot = 2 * half_rot;
        let mode = if neox { RopeMode::Neox } else { RopeMode::Normal };
        let x = &seed[..head_dim * n_heads];
        // Angles for one position, straight from the definition.
        let (cos, sin): (Vec<f32>, Vec<f32>) = (0..half_rot)
            .map(|i| {
                let a = pos as f64 * (base as f64).powf(-2.0 * i as f64 / n_rot as f64);
                (a.cos() as f32, a.sin() as f32)
            })
            .unzip();
        let mut want = x.to_vec();
        rope_ref(mode, &mut want, head_dim, &cos, &sin);
        for isa in Isa::available() {
            let mut got = x.to_vec();
            rope_cs_with(isa, mode, &mut got, head_dim, &cos, &sin);
            assert_close(isa, "rope", &got, &want, 1e-6, 2e-6);
            for h in 0..n_heads {
                let tail = h * head_dim + n_rot..(h + 1) * head_dim;
                prop_assert_eq!(&got[tail.clone()], &x[tail]);
            }
        }
    }

    #[test]
    fn softmax_matches_reference(
        x in prop::collection::vec(-30f32..30.0, 1..300),
        masked in prop::collection::vec(any::<bool>(), 300),
    ) {
        // Mask some entries to -inf as attention does, keeping at least the first finite.
        let x: Vec<f32> = x
            .iter()
            .zip(&masked)
            .enumerate()
            .map(|(i, (&v, &m))| if m && i > 0 { f32::NEG_INFINITY } else { v })
            .collect();
        let mut want = x.clone();
        softmax_ref(&mut want);
        for isa in Isa::available() {
            let mut got = x.clone();
            softmax_with(isa, &mut got);
            assert_close(isa, "softmax", &got, &want, 1e-5, 1e-9);
            let total: f32 = got.iter().sum();
            prop_assert!((total - 1.0).abs() < 1e-4, "sum {}", total);
        }
    }

    #[test]
    fn silu_and_swiglu_match_reference(
        (g, u) in (0usize..300).prop_flat_map(|n| (
            prop::collection::vec(-100f32..100.0, n),
            prop::collection::vec(-3f32..3.0, n),
        )),
    ) {
        let n = g.len();
        let (mut want, mut want_sw) = (vec![0.0; n], vec![0.0; n]);
        silu_ref(&g, &mut want);
        swiglu_ref(&g, &u, &mut want_sw);
        for isa in Isa::available() {
            let mut got = vec![0.0; n];
            silu_with(isa, &g, &mut got);
            assert_close(isa, "silu", &got, &want, 2e-6, 1e-30);
            let mut inplace = g.clone();
            silu_inplace_with(isa, &mut inplace);
            prop_assert_eq!(&inplace, &got);

            let mut sw = vec![0.0; n];
            swiglu_with(isa, &g, &u, &mut sw);
            assert_close(isa, "swiglu", &sw, &want_sw, 2e-6, 1e-30);
            let mut sw_in = g.clone();
            swiglu_inplace_with(isa, &mut sw_in, &u);
            prop_assert_eq!(&sw_in, &sw);
        }
    }

    #[test]
    fn gelu_matches_reference(x in vals(-20.0, 20.0, 300)) {
        let mut want = vec![0.0; x.len()];
        gelu_ref(&x, &mut want);
        // The reference's 1 + tanh(y) cancels for negative x: allow an error of a few ulp
        // of |x| on top of the relative bound.
        let abs = x.iter().fold(0f32, |m, v| m.max(v.abs())) * 1e-6;
        for isa in Isa::available() {
            let mut got = vec![0.0; x.len()];
            gelu_with(isa, &x, &mut got);
            assert_close(isa, "gelu", &got, &want, 1e-5, abs.max(1e-30));
            let mut inplace = x.clone();
            gelu_inplace_with(isa, &mut inplace);
            prop_assert_eq!(&inplace, &got);
        }
    }

    #[test]
    fn f16_conversions_are_bit_exact(
        bits in prop::collection::vec(any::<u16>(), 0..300),
        wide in prop::collection::vec(any::<u32>(), 0..300),
        scaled in prop::collection::vec(-70_000f32..70_000.0, 0..300),
    ) {
        let h: Vec<f16> = bits.iter().map(|&b| f16::from_bits(b)).collect();
        let mut want = vec![0.0; h.len()];
        f16_to_f32_ref(&h, &mut want);
        for f in [wide.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>(), scaled] {
            let mut want_h = vec![f16::ZERO; f.len()];
            f32_to_f16_ref(&f, &mut want_h);
            for isa in Isa::available() {
                let mut got_h = vec![f16::ZERO; f.len()];
                f32_to_f16_with(isa, &f, &mut got_h);
                for (i, (g, w)) in got_h.iter().zip(&want_h).enumerate() {
                    prop_assert!(
                        g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(),
                        "f32_to_f16 on {} at {}: {:e} -> {:#06x}, want {:#06x}",
                        isa, i, f[i], g.to_bits(), w.to_bits()
                    );
                }
            }
        }
        for isa in Isa::available() {
            let mut got = vec![0.0; h.len()];
            f16_to_f32_with(isa, &h, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(
                    g.to_bits() == w.to_bits() || g.is_nan() && w.is_nan(),
                    "f16_to_f32 on {} at {}: {:#06x} -> {:e}, want {:e}", isa, i, bits[i], g, w
                );
            }
        }
    }
}

#[test]
fn rope_table_matches_definition_and_mode_pairs() {
    let t = RopeTable::new(64, 1_000_000.0, 4096);
    assert_eq!((t.n_rot(), t.max_pos()), (64, 4096));
    // The table builds angles as ggml does (theta = pos * theta_scale^i by repeated f32
    // products), so it drifts from the exact angle by about i rounding steps of theta: allow
    // that (plus cos/sin rounding), and no more. A wrong frequency is off by whole radians.
    for pos in [0usize, 1, 17, 4095] {
        for i in 0..32 {
            let a = pos as f64 / 1_000_000f64.powf(i as f64 / 32.0);
            let tol = 1e-6 + a * (i as f64 + 1.0) * 1.2e-7;
            assert!(
                (t.cos(pos)[i] as f64 - a.cos()).abs() < tol,
                "pos {pos} i {i}"
            );
            assert!(
                (t.sin(pos)[i] as f64 - a.sin()).abs() < tol,
                "pos {pos} i {i}"
            );
        }
    }
    // Which elements pair up: a unit vector on element 0 rotated by 90 degrees lands on
    // element 1 (normal) or element n_rot/2 (neox).
    let (cos, sin) = ([0.0f32, 1.0], [1.0f32, 0.0]);
    for isa in Isa::available() {
        let mut x = [1.0f32, 0.0, 0.0, 0.0, 7.0];
        rope_cs_with(isa, RopeMode::Normal, &mut x, 5, &cos, &sin);
        assert_eq!(x, [0.0, 1.0, 0.0, 0.0, 7.0], "{isa}");
        let mut x = [1.0f32, 0.0, 0.0, 0.0, 7.0];
        rope_cs_with(isa, RopeMode::Neox, &mut x, 5, &cos, &sin);
        assert_eq!(x, [0.0, 0.0, 1.0, 0.0, 7.0], "{isa}");
    }
    let t = RopeTable::with_freq_scale(4, 10_000.0, 0.25, 9);
    assert!((t.cos(8)[0] - 2f32.cos()).abs() < 1e-6);
}

#[test]
fn exp_constants_have_the_intended_bits() {
    use super::exp_consts as k;
    let bits = [
        (k::SHIFT, 0x4b40_0000u32),
        (k::LOG2E, 0x3fb8_aa3b),
        (k::LN2_HI, 0x3f31_7200),
        (k::LN2_LO, 0x35bf_be8e),
        (k::C1, 0x3f7f_fff6),
        (k::C2, 0x3eff_fedb),
        (k::C3, 0x3e2a_af33),
        (k::C4, 0x3d2b_9f17),
        (k::C5, 0x3c07_2010),
    ];
    for (v, b) in bits {
        assert_eq!(v.to_bits(), b, "{v:e}");
    }
}

/// Sweeps the vector exp over its whole range against f64 exp: within 2 ulp (relative
/// 2.4e-7) for normal results, within a few subnormal steps below, exact at the ends.
#[test]
fn vector_exp_is_accurate_over_the_whole_range() {
    let mut xs: Vec<f32> = (0..400_000)
        .map(|i| -110.0 + 200.0 * i as f32 / 400_000.0)
        .collect();
    xs.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        88.72,
        88.73,
        -87.33,
        -103.9,
        -104.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let got = simd_exp(&xs);
    let mut worst = 0f64;
    for (&x, &g) in xs.iter().zip(&got) {
        let want = (x as f64).exp();
        if x.is_nan() {
            assert!(g.is_nan());
            continue;
        }
        if want > f32::MAX as f64 * (1.0 + 1e-7) {
            assert_eq!(g, f32::INFINITY, "exp({x})");
        } else if want >= f32::MIN_POSITIVE as f64 {
            let rel = ((g as f64 - want) / want).abs();
            worst = worst.max(rel);
            assert!(
                rel < 2.4e-7,
                "exp({x}) = {g:e}, want {want:e} (rel {rel:e})"
            );
        } else {
            assert!(
                (g as f64 - want).abs() < 8.0 * 1.4e-45,
                "exp({x}) = {g:e}, want {want:e}"
            );
        }
    }
    eprintln!("vector exp: worst relative error {worst:e}");
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn simd_exp(xs: &[f32]) -> Vec<f32> {
    use super::simd;
    let mut out = vec![0.0; xs.len()];
    match simd::Simd::detect(Isa::available().last().copied().unwrap_or(Isa::Scalar)) {
        Some(t) => simd::exp_row(t, xs, &mut out),
        None => out.iter_mut().zip(xs).for_each(|(o, x)| *o = x.exp()),
    }
    out
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn simd_exp(xs: &[f32]) -> Vec<f32> {
    xs.iter().map(|x| x.exp()).collect()
}

#[test]
fn a_level_of_the_other_architecture_is_refused() {
    #[cfg(target_arch = "x86_64")]
    let other = Isa::Neon;
    #[cfg(not(target_arch = "x86_64"))]
    let other = Isa::Avx2;
    let r = std::panic::catch_unwind(|| {
        let mut x = [1.0f32; 3];
        silu_inplace_with(other, &mut x);
    });
    assert!(r.is_err());
}

#[test]
fn active_level_entry_points_run() {
    let x: Vec<f32> = (0..37).map(|i| i as f32 * 0.1 - 1.5).collect();
    let mut out = vec![0.0; x.len()];
    silu(&x, &mut out);
    gelu(&x, &mut out);
    swiglu(&x, &x, &mut out);
    rms_norm(&x, &x, 1e-6, &mut out);
    softmax(&mut out);
    let t = RopeTable::new(8, 10_000.0, 4);
    let mut q = x[..32].to_vec();
    rope(RopeMode::Neox, &mut q, 16, &t, 3);
    rms_norm_heads(&mut q, &x[..16], 1e-6);
    let mut h = vec![f16::ZERO; x.len()];
    f32_to_f16(&x, &mut h);
    f16_to_f32(&h, &mut out);
    assert!((out[36] - x[36]).abs() < 1e-3);
}

#[cfg(target_arch = "aarch64")]
mod arm_dot {
    use super::super::arm_dot::*;
    use crate::Isa;
    use proptest::prelude::*;

    fn levels() -> Vec<Isa> {
        Isa::available()
    }

    /// Two byte vectors of the same length, 1 to 8 blocks of 32.
    fn block_pair<A: Arbitrary, B: Arbitrary>() -> impl Strategy<Value = (Vec<A>, Vec<B>)> {
        (1usize..9).prop_flat_map(|blocks| {
            (
                prop::collection::vec(any::<A>(), 32 * blocks),
                prop::collection::vec(any::<B>(), 32 * blocks),
            )
        })
    }

    /// `with(isa, a, b)` on every level equals the scalar `reference(a, b)`.
    fn dot_matches_reference<A, B>(
        a: &[A],
        b: &[B],
        reference: fn(&[A], &[B]) -> i32,
        with: fn(Isa, &[A], &[B]) -> i32,
    ) -> Result<(), TestCaseError> {
        let want = reference(a, b);
        for isa in levels() {
            prop_assert_eq!(with(isa, a, b), want, "{}", isa);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(super::config())]

        #[test]
        fn dot_i8_matches_reference((a, b) in block_pair::<i8, i8>()) {
            dot_matches_reference(&a, &b, dot_i8_ref, dot_i8_with)?;
        }

        #[test]
        fn dot_u8i8_matches_reference((a, b) in block_pair::<u8, i8>()) {
            dot_matches_reference(&a, &b, dot_u8i8_ref, dot_u8i8_with)?;
        }

        #[test]
        fn tile_2x2_matches_reference(
            rows in (1usize..17).prop_flat_map(|chunks| {
                prop::collection::vec(prop::collection::vec(any::<i8>(), 16 * chunks), 4)
            }),
        ) {
            let want = tile_2x2_ref(&rows[0], &rows[1], &rows[2], &rows[3]);
            for isa in levels() {
                let got = tile_2x2_with(isa, &rows[0], &rows[1], &rows[2], &rows[3]);
                prop_assert_eq!(got, want, "{}", isa);
            }
        }
    }

    #[test]
    fn extremes_do_not_overflow_the_lanes() {
        // -128 * -128 = 16384 in every product: the widest i8 products the kernels see.
        let a = vec![-128i8; 256];
        let u = vec![255u8; 256];
        for isa in levels() {
            assert_eq!(dot_i8_with(isa, &a, &a), 256 * 16384, "{isa}");
            assert_eq!(dot_u8i8_with(isa, &u, &a), 256 * 255 * -128, "{isa}");
            assert_eq!(
                tile_2x2_with(isa, &a, &a, &a, &a),
                [256 * 16384; 4],
                "{isa}"
            );
        }
    }
}
