//! Quantized matrix-vector (decode) and matrix-matrix (prefill) products on repacked
//! weights: Q4_0, Q4_1 (and its merged 64-group form), Q8_0 weights times q8_0-style int8
//! activations; Q4_K, Q5_K, Q6_K and Q5_0 (scales decoded at pack time) with the same
//! activations.
//!
//! * [`PackedMatrix::pack`] repacks raw GGUF bytes once, at load, into panels of 8
//!   interleaved rows ([`packed`] documents the layout); [`PackedMatrix::pack_stacked`]
//!   fuses several tensors (Q/K/V) into one, [`PackedMatrix::pack_swiglu`] a gate/up pair.
//! * [`QuantizedActivation::quantize`] turns f32 input rows into int8 blocks plus the
//!   per-block sums that fold the weights' offsets/mins; quantize once, use for every
//!   matrix that reads the same input.
//! * [`gemv`], [`gemm`], [`gemv_swiglu`], [`gemm_swiglu`] are single-threaded over a range
//!   of **output panels** (8 output rows each, [`PackedMatrix::panels`]); a thread pool
//!   splits the panel range. They dispatch on an [`Isa`]; levels without a kernel here
//!   (the ARM ones on x86, AVX2 on aarch64, any level on another architecture) run the
//!   scalar path. x86: `arch::x86` (AVX2) and `arch::x86::vnni` (AVX-VNNI, AVX-512 VNNI:
//!   the same tiles with `vpdpbusd`); aarch64: `arch::arm` (NEON,
//!   dotprod, i8mm).
//!
//! Output placement: panel range `a..b` covers output rows `8a .. min(8b, rows)`; row `r`
//! of token `t` goes to `out[t * ld + (r - 8a)]` (`gemv`: `ld` irrelevant, one token).
//! [`PackedMatrix::split_panels`] / [`PackedMatrix::split_out`] give a gemv's per-thread
//! ranges and disjoint output slices; a threaded gemm either splits tokens
//! ([`gemm_tokens`], disjoint output rows) or gives each thread its own output tile.
//!
//! Measured (AVX2, EPYC Zen 3 VM shared with other jobs, so best-of runs; see
//! `tests/gemv_bandwidth.rs` and `tests/ggml/mul_mat_bench.c`): gemv over a 200 MB
//! Q4_0 matrix 12-14 GB/s on one thread and up to 18 GB/s on two (ggml repacked q4_0_8x8:
//! 6-8.5 GB/s on one); gemm 2560x896 x 128 tokens 160-168 GOP/s Q4_0, ~150 Q4_1, ~115
//! Q8_0 per thread (ggml on the same shape: 58-81 repacked Q4_0, 19-20 Q4_1, 52-65 Q8_0).
//!
//! Packed data for ARM kernels: the layout is ISA-neutral (4-byte groups of 8 rows, one
//! row per 32-bit lane, raw fp16 scales); `arch::arm` reads the same bytes via
//! [`PackedMatrix::panel_quants`] / [`PackedMatrix::panel_scales`] (NEON `smlal`, dotprod
//! `sdot` by element, i8mm `smmla` on token pairs; see its module doc). Every SIMD level
//! reproduces the scalar reference bit for bit except inside SwiGLU's `exp`. Not yet
//! measured on ARM hardware (verified under qemu only).

pub mod act;
pub(crate) mod driver;
mod layout;
pub mod packed;
pub mod scalar;

pub use act::{QuantizedActivation, RowsPart};
pub use packed::{Kind, Layout, PackError, PackOptions, PackedMatrix, PANEL, QK, RELEASE_SPAN};

use crate::Isa;
use std::ops::Range;

/// That `w` is a gate/up pair exactly when the entry point is one of the SwiGLU ones.
fn check_kind(w: &PackedMatrix, swiglu: bool) {
    assert_eq!(
        matches!(w.kind, Kind::SwiGlu),
        swiglu,
        "a gate/up (SwiGlu) matrix needs gemv_swiglu/gemm_swiglu, and only it"
    );
}

fn check(
    w: &PackedMatrix,
    act: &QuantizedActivation,
    tokens: &Range<usize>,
    out_len: usize,
    ld: usize,
    panels: &Range<usize>,
) {
    assert_eq!(
        act.cols(),
        w.cols,
        "activation width {} != matrix columns {}",
        act.cols(),
        w.cols
    );
    assert!(
        tokens.start < tokens.end && tokens.end <= act.rows(),
        "token range {tokens:?} outside 0..{}",
        act.rows()
    );
    assert!(
        panels.start <= panels.end && panels.end <= w.panels(),
        "panel range {panels:?} outside 0..{}",
        w.panels()
    );
    let n = w.rows_in(panels.clone());
    assert!(ld >= n, "ld {ld} < {n} rows");
    let need = if n == 0 {
        0
    } else {
        (tokens.len() - 1) * ld + n
    };
    assert!(out_len >= need, "output of {out_len} < {need}");
}

/// [`gemm`] over the activation rows `tokens` only (output row `t - tokens.start`): lets a
/// pool split prefill by tokens as well as by panels. Every entry point is this one call.
pub fn gemm_tokens(
    w: &PackedMatrix,
    act: &QuantizedActivation,
    tokens: Range<usize>,
    out: &mut [f32],
    ld: usize,
    panels: Range<usize>,
    isa: Isa,
) {
    check(w, act, &tokens, out.len(), ld, &panels);
    let job = driver::Job::new(w, act, tokens, out, (ld, panels));
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => driver::run(token(isa, crate::arch::x86::Simd::detect(isa)), job),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => {
            use crate::arch::x86::vnni::{AvxVnni, Vnni};
            driver::run(token(isa, Vnni::<AvxVnni>::detect()), job)
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            use crate::arch::x86::vnni::{Avx512, Vnni};
            driver::run(token(isa, Vnni::<Avx512>::detect()), job)
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => driver::run(token(isa, crate::arch::arm::Neon::detect()), job),
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod => driver::run(token(isa, crate::arch::arm::Dotprod::detect()), job),
        #[cfg(target_arch = "aarch64")]
        Isa::I8mm => driver::run(token(isa, crate::arch::arm::I8mm::detect()), job),
        _ => scalar::gemm(
            job.w, job.act, job.tokens, job.out, ld, job.panels, job.swiglu,
        ),
    }
}

/// `out[i] = silu(gate[i]) · up[i]` with the arithmetic of [`gemm_swiglu`]'s epilogue on
/// level `isa`, element by element: a stacked or split gate/up product followed by this
/// gives the fused SwiGLU product's bits (x86's fused epilogue has its own `exp`, not the
/// one of `ops::activation::swiglu_with`; on aarch64 and the scalar level the two agree).
/// A layer prepared for a LoRA adapter (stacked gate/up) thus computes, without an active
/// adapter, exactly what the fused matrix computes.
pub fn swiglu_rows(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert!(
        gate.len() == up.len() && up.len() == out.len(),
        "swiglu_rows: lengths {} {} {}",
        gate.len(),
        up.len(),
        out.len()
    );
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => {
            let t = token(isa, crate::arch::x86::Simd::detect(isa));
            crate::arch::x86::silu_mul_rows(t, gate, up, out)
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => {
            crate::ops::activation::swiglu_with(isa, gate, up, out)
        }
        _ => {
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = scalar::swiglu(g, u);
            }
        }
    }
}

/// The kernels' token for `isa`, or a panic when this CPU lacks the level.
#[allow(dead_code)] // on architectures without SIMD kernels
fn token<T>(isa: Isa, t: Option<T>) -> T {
    t.unwrap_or_else(|| panic!("{isa} kernels requested on a CPU without {isa}"))
}

/// The two entry points of one kind of matrix (plain, or a gate/up pair when `$swiglu`):
/// `$gemv` over the first activation row (output rows packed, `ld = rows_in(panels)`) and
/// `$gemm` over every row, each one [`gemm_tokens`] once the kind is checked.
macro_rules! entry_points {
    ($swiglu:literal, $(#[$gemv_doc:meta])* $gemv:ident, $(#[$gemm_doc:meta])* $gemm:ident) => {
        $(#[$gemv_doc])*
        pub fn $gemv(
            w: &PackedMatrix,
            act: &QuantizedActivation,
            out: &mut [f32],
            panels: Range<usize>,
            isa: Isa,
        ) {
            check_kind(w, $swiglu);
            let n = w.rows_in(panels.clone());
            gemm_tokens(w, act, 0..1, out, n, panels, isa)
        }

        $(#[$gemm_doc])*
        pub fn $gemm(
            w: &PackedMatrix,
            act: &QuantizedActivation,
            out: &mut [f32],
            ld: usize,
            panels: Range<usize>,
            isa: Isa,
        ) {
            check_kind(w, $swiglu);
            gemm_tokens(w, act, 0..act.rows(), out, ld, panels, isa)
        }
    };
}

entry_points!(
    false,
    /// `out[r - 8·panels.start] = Σ_c W[r][c] · x[c]` for the output rows of `panels`, with
    /// `x` the **first** row of `act`. `out.len()` must be at least `w.rows_in(panels)`.
    gemv,
    /// Every row of `act` times the matrix: `out[t·ld + r - 8·panels.start]`. Each weight panel
    /// is loaded once per tile of activation rows (4 on AVX2 / dotprod / i8mm, 2 on plain
    /// NEON).
    gemm
);

entry_points!(
    true,
    /// For a [`PackedMatrix::pack_swiglu`] pair: `out[r - 8·panels.start] =
    /// silu(gate_r · x) · (up_r · x)`, `x` the first row of `act`.
    gemv_swiglu,
    /// [`gemv_swiglu`] for every row of `act`, laid out as in [`gemm`].
    gemm_swiglu
);
