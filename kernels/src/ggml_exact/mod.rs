//! Bit-exact twins of llama.cpp's CPU arithmetic (ggml-cpu of b11434 built for x86-64 with
//! AVX2, FMA and F16C, GCC at `-O3 -march=native`), for parity runs.
//!
//! Why this exists: a greedy continuation is a chaotic function of the arithmetic. Any
//! change at all, even RoPE angles off by 1e-5 rad, flips a few int8 activation codes at the
//! next matmul, and 30 layers later the logits have moved by the full quantization noise
//! (max |Δlogit| ≈ 0.7 on SmolLM2; llama.cpp with `-fa off` vs `-fa on` moves as much).
//! Identical text over 32 tokens therefore takes identical bits, not a better
//! approximation. These functions repeat ggml's roundings in ggml's order: the same lane
//! split of each SIMD accumulator, the same horizontal sums, the same fp16 round trips and
//! the same fused multiply-adds, including the ones GCC contracts from plain C (`a*b + c`
//! becomes `vfmadd` under GCC's default `-ffp-contract=fast`; each such place is noted).
//!
//! They are scalar and slow (a parity mode, not a fast path), and exact only against the
//! x86 AVX2 build: ggml's NEON paths sum in other orders. Each one is checked bit for bit
//! against the real ggml function on random data (`kernels/tests/ggml_exact.rs` with the
//! oracle `tests/oracle/ggml_ops_oracle.cpp`, linked against the cached llama.cpp build).

/// `$(#[meta])* pub fn $name(args) -> ret => body`: defines `$name` over the plain function
/// `body`, and on x86-64 a clone of it compiled with AVX2+FMA that `$name` calls when the
/// CPU has them. Without FMA in the target, `f32::mul_add` is a call into a software
/// `fmaf` (a third of the run time); with it, one instruction, and LLVM can vectorize the
/// eight-lane accumulators. The bits are the same either way: a fused multiply-add is
/// exactly rounded by definition.
macro_rules! fma_clone {
    ($(#[$m:meta])* pub fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty => $body:ident) => {
        $(#[$m])*
        pub fn $name($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            return crate::arch::x86::with_fma(|| $body($($a),*));
            #[cfg(not(target_arch = "x86_64"))]
            $body($($a),*)
        }
    };
}
pub(crate) use fma_clone;

pub mod attention;
pub mod dots;
pub mod gelu;
pub mod q4_0;
pub mod q4_k;
pub mod q5_0;
pub mod q6_k;
pub mod q8_k;
pub mod quantize;
pub mod rope;
pub mod tiled;
pub mod vec;

use half::f16;

/// `hsum_float_8`: the horizontal sum of an `__m256` as ggml's x86 code does it: high half
/// plus low half, then lanes (0+2, 1+3), then those two.
#[inline]
pub fn hsum8(x: &[f32; 8]) -> f32 {
    let r = [x[4] + x[0], x[5] + x[1], x[6] + x[2], x[7] + x[3]];
    let (a, b) = (r[0] + r[2], r[1] + r[3]);
    a + b
}

/// One 32-element block of the eight-lane quantized dots (`mul_sum_*_pairs_float`, then
/// `_mm256_fmadd_ps`): lane `l` is the exact int32 sum of `w[k]·a[k]` over `k` in
/// `4l..4l+4` (no step of ggml's saturates for these code ranges), converted to f32 and
/// fused-multiply-added into `acc[l]` with the block's scale product `d`.
#[inline(always)]
pub(crate) fn fma_lanes(acc: &mut [f32; 8], d: f32, w: &[i32; 32], a: &[i8; 32]) {
    for (l, acc_l) in acc.iter_mut().enumerate() {
        let s: i32 = (4 * l..4 * l + 4).map(|k| w[k] * a[k] as i32).sum();
        *acc_l = d.mul_add(s as f32, *acc_l);
    }
}

/// [`sum_lanes`] for symmetric weights (`d(block)` the fp16 scale, `codes(block)` the 32
/// signed codes) against Q8_0 activations (Q4_0, Q5_0, Q8_0): per block, [`fma_lanes`] with
/// `GGML_CPU_FP16_TO_FP32(x[ib].d) * GGML_CPU_FP16_TO_FP32(y[ib].d)` (sgemm: `da * db` with
/// A the weights: the same product).
#[inline(always)]
pub(crate) fn sum_lanes_q8_0<W>(
    x: &[W],
    y: &[crate::formats::q8_0::BlockQ8_0],
    what: &str,
    d: impl Fn(&W) -> half::f16,
    codes: impl Fn(&W) -> [i32; 32],
) -> f32 {
    sum_lanes(x, y, what, |bx, by, acc| {
        let d = h2f(d(bx)) * h2f(by.d);
        fma_lanes(acc, d, &codes(bx), &by.qs);
    })
}

/// The block loop of ggml's eight-lane vector dots: `block(bx, by, acc)` for each pair of
/// blocks, in order, then [`hsum8`] of the lanes. `what` names the dot in the length check.
#[inline(always)]
pub(crate) fn sum_lanes<W, A>(
    x: &[W],
    y: &[A],
    what: &str,
    mut block: impl FnMut(&W, &A, &mut [f32; 8]),
) -> f32 {
    assert_eq!(x.len(), y.len(), "{what}: block counts");
    let mut acc = [0f32; 8];
    for (bx, by) in x.iter().zip(y) {
        block(bx, by, &mut acc);
    }
    hsum8(&acc)
}

/// `GGML_F32x8_REDUCE` over four accumulators (the f16/f32 vector dot products): (0+2, 1+3),
/// then (0+1), then the halves of that register added lane-wise and two `hadd`s.
#[inline]
pub fn reduce4x8(x: &[[f32; 8]; 4]) -> f32 {
    let mut a = [0f32; 8];
    let mut b = [0f32; 8];
    for l in 0..8 {
        a[l] = x[0][l] + x[2][l];
        b[l] = x[1][l] + x[3][l];
    }
    for l in 0..8 {
        a[l] += b[l];
    }
    let t0 = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    let t1 = [t0[0] + t0[1], t0[2] + t0[3]];
    t1[0] + t1[1]
}

/// How one token goes through a `mul_mat`: how its activations are quantized and the dot
/// product that computes each of its outputs.
pub(crate) struct Route<W, A> {
    pub quantize: fn(&[f32], &mut [A]),
    pub dot: fn(&[W], &[A]) -> f32,
}

// Two function pointers: copied whatever `W` and `A` are (a derive would ask them to be
// `Copy`).
impl<W, A> Clone for Route<W, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W, A> Copy for Route<W, A> {}

impl<W, A> Route<W, A> {
    pub(crate) fn new(quantize: fn(&[f32], &mut [A]), dot: fn(&[W], &[A]) -> f32) -> Self {
        Route { quantize, dot }
    }
}

/// The whole `mul_mat` as `forward_mul_mat` runs it: `w` holds `n_rows` rows of `k / qk`
/// blocks, `x` holds `n_tokens` rows of `k` floats; token `t` takes `route(t, n_tokens)`.
/// Returns `out[token * n_rows + row]`.
pub(crate) fn mul_mat_by_route<W, A: bytemuck::Pod>(
    w: &[W],
    n_rows: usize,
    x: &[f32],
    (k, qk): (usize, usize),
    route: impl Fn(usize, usize) -> Route<W, A>,
) -> Vec<f32> {
    assert!(
        k % qk == 0 && w.len() == n_rows * (k / qk),
        "mul_mat: shapes"
    );
    assert!(x.len().is_multiple_of(k), "mul_mat: activations");
    let nb = k / qk;
    let n_tokens = x.len() / k;
    let mut a = vec![A::zeroed(); nb];
    let mut out = Vec::with_capacity(n_tokens * n_rows);
    for (t, xt) in x.chunks_exact(k).enumerate() {
        let Route { quantize, dot } = route(t, n_tokens);
        quantize(xt, &mut a);
        out.extend(w.chunks_exact(nb).map(|wr| dot(wr, &a)));
    }
    out
}

/// The route of `ggml`'s repacked weights: tokens in groups of four take `grouped`
/// (`ggml_quantize_mat_*_4x8` + gemm), the rest `single` (`quantize_row_*` + gemv).
pub(crate) fn groups_of_four<W, A>(
    grouped: Route<W, A>,
    single: Route<W, A>,
) -> impl Fn(usize, usize) -> Route<W, A> {
    move |t, n_tokens| {
        if t < n_tokens - n_tokens % 4 {
            grouped
        } else {
            single
        }
    }
}

/// f16 to f32 (exact).
#[inline]
pub fn h2f(h: f16) -> f32 {
    h.to_f32()
}

/// f32 to f16, round to nearest even (`_mm256_cvtps_ph(x, 0)` / F16C `_cvtss_sh`).
#[inline]
pub fn f2h(x: f32) -> f16 {
    f16::from_f32(x)
}

/// `_mm256_round_ps(x, _MM_ROUND_NEAREST)` then `_mm256_cvtps_epi32`: ties to even.
#[inline]
pub fn round_even_i32(x: f32) -> i32 {
    x.round_ties_even() as i32
}
