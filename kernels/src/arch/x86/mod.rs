//! x86-64 AVX2 + FMA + F16C kernels on the packed 8-row panels of
//! [`crate::matmul::packed`].
//!
//! Per (panel, 32-block, token): the activation's 4-byte groups are broadcast to all 8
//! lanes (rows), multiplied with the unsigned codes by `vpmaddubsw`, summed in int16/int32,
//! and the block contributes one FMA for the 8 rows (scales converted by one `vcvtph2ps`).
//! No horizontal reduction per row. A gemm tile reuses each loaded weight vector for up to
//! 4 activation rows.
//!
//! Prefill (more than one token) first rewrites each chunk of tokens into interleaved
//! 4-token records (`staging::interleave`) and runs the `tile_il` kernels, whose 4-token block
//! core is one `asm!` block per weight vector (`q4_0::step4`, `q5_0`, `q8_0`): see
//! `benches/README.md` for the A/B. gemv keeps the per-row-pointer `tile` kernels.
//!
//! Every function here is `unsafe` only because it is compiled with
//! `#[target_feature(enable = "avx2,fma,f16c")]`: the caller must have checked that the CPU
//! supports those features. All memory is reached through slices whose lengths are checked
//! on entry to each tile kernel.

// Kernels index several per-token arrays in lockstep.
#![allow(clippy::needless_range_loop)]

/// The [`Kernels`] items every x86 level shares: rows of one `__m256` (8 f32), the chunk's
/// interleaved records as what it stages, and the AVX2 `silu·mul` and store (each level's
/// token proves AVX2 + FMA + F16C).
macro_rules! avx2_rows {
    () => {
        type Rows = __m256;
        /// The chunk's interleaved records (`arch::x86::staging::interleave`);
        /// empty when the tiles read rows.
        type Staged = Vec<u8>;

        #[inline(always)]
        fn silu_mul(self, g: __m256, u: __m256) -> __m256 {
            // SAFETY: the token proves the CPU features.
            unsafe { $crate::arch::x86::silu_mul(g, u) }
        }

        #[inline(always)]
        fn store8(self, v: __m256, out: &mut [f32; $crate::matmul::PANEL]) {
            // SAFETY: the token proves the CPU features; `out` holds 8 f32.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) }
        }
    };
}

#[macro_use]
mod step4;

pub mod act;
pub mod attention;
pub mod f16;
pub mod lowrank;
pub mod lowrank_a8;
pub mod lowrank_q8;
pub mod ops;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod read;
mod staging;
pub mod vnni;

use crate::arch::TileRows;
use crate::matmul::driver::{self, Chunk, Job, Kernels};
use crate::matmul::{Layout, PackedMatrix, QuantizedActivation};
pub use ops::Simd;
pub use staging::IL_REC;
pub(crate) use staging::{has_il, record};
use std::arch::x86_64::*;

/// Activation rows per weight-panel pass of the row-pointer tiles (gemv, and Q8_0 chunk
/// tails; the interleaved prefill tiles are always 4): 4 for the Q4 layouts, 6 for Q8_0
/// (whose per-token work is heavier). A/B on 2560x896 x 120 tokens, GOP/s for tiles
/// 2/3/4/5/6: Q4_0 145/168/164/136/136, Q4_1 147/144/149/136/135, Q8_0 79/87/88/95/114.
pub const fn token_tile(layout: Layout) -> usize {
    match layout {
        Layout::Q8_0 => 6,
        _ => 4,
    }
}
/// The matmul kernels on the [`Simd`] token (AVX2 + FMA + F16C), for
/// [`crate::matmul::driver`].
impl Kernels for Simd {
    avx2_rows!();

    #[inline(always)]
    fn run<const L: u8>(self, job: Job) {
        /// # Safety
        /// The CPU supports AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn root<const L: u8>(k: Simd, job: Job) {
            driver::drive::<Simd, L>(k, job)
        }
        // SAFETY: the token proves the CPU features.
        unsafe { root::<L>(self, job) }
    }

    #[inline(always)]
    fn stages(self, layout: Layout, tokens: usize) -> bool {
        tokens > 1 && has_il(layout)
    }

    #[inline(always)]
    fn token_tile(self, layout: Layout, tokens: usize) -> usize {
        // The interleaved tiles are 4 tokens wide for every layout (asm cores).
        if tokens > 1 && has_il(layout) {
            4
        } else {
            token_tile(layout)
        }
    }

    #[inline(always)]
    fn tile<const L: u8, const N: usize>(
        self,
        w: &PackedMatrix,
        p: usize,
        chunk: &Chunk<Vec<u8>>,
        t: usize,
    ) -> [__m256; N] {
        // SAFETY: the token proves the CPU features.
        unsafe { avx2_tile::<N>(Layout::ALL[L as usize], w, p, chunk, t) }
    }
}

/// The AVX2 tile of `layout` for token tile `t` of `chunk`: [`Simd`]'s, and the VNNI
/// levels' for the layouts without a VNNI tile (compiled into their roots).
///
/// # Safety
/// Inside a root compiled with AVX2, FMA and F16C (or a superset of them).
#[inline(always)]
unsafe fn avx2_tile<const N: usize>(
    layout: Layout,
    w: &PackedMatrix,
    p: usize,
    chunk: &Chunk<Vec<u8>>,
    t: usize,
) -> [__m256; N] {
    let src = src::<N>(layout, w.blocks(), chunk, t);
    // SAFETY: contract.
    unsafe { tile::<N>(layout, w, p, src) }
}

/// Where the AVX2 tiles of `layout` (`nb` blocks) read tokens `t..t+N` of `chunk`: its
/// interleaved records when it is staged, else the rows. Q8_0 has an interleaved tile for 4
/// tokens only: a chunk's tail of 1-3 tokens reads the rows.
#[inline(always)]
fn src<'a, const N: usize>(
    layout: Layout,
    nb: usize,
    chunk: &Chunk<'a, Vec<u8>>,
    t: usize,
) -> Src<'a> {
    if !chunk.staged.is_empty() && (N == 4 || layout != Layout::Q8_0) {
        Src::Il(record(chunk, nb, t, N))
    } else {
        Src::Rows(chunk.act, t)
    }
}

/// Runs `f` inside a function compiled with AVX2 + FMA when the CPU has them, else as is
/// (`ggml_exact`'s `fma_clone!`): without FMA in the target `f32::mul_add` is a call into a
/// software `fmaf`, with it one instruction, and LLVM can vectorize around it. The bits are
/// the same either way (a fused multiply-add is exactly rounded by definition).
#[inline(always)]
pub fn with_fma<R>(f: impl FnOnce() -> R) -> R {
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fast<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected just above.
        unsafe { fast(f) }
    } else {
        f()
    }
}

/// gemv software-prefetch distance: the code bytes this far ahead of the block being read
/// are requested into L1. A/B on the 200 MB Q4_0 matrix, alternating within one process:
/// 0 / 512 / 1024 / 2048 bytes gave 12.3 / 13.5 / 13.6 / 14.2 GB/s with 1 thread and
/// 12.3 / 9.9 / 12.8 / 15.1 GB/s with 2 (2048 best in most runs; the machine is shared).
pub const PREFETCH_BYTES: usize = 2048;

/// How far ahead of the block being read the same lines are also requested into L2
/// (`prefetcht1`): the L1 requests alone keep too few lines in flight for one core to
/// stream at DRAM speed. A/B in one process (one-token gemv over 120 MNN-Pocket-shaped
/// 2560x896 matrices, 160-310 MB, the modes alternating 30 times each, Sapphire Rapids
/// class): without / with 8 KiB ahead, GB/s 14.2 / 16.7, 12.9 / 15.2 (Q4_1 g64), 15.2 / 18.5
/// (Q4_0), 11.8 / 13.5, 11.5 / 13.1 (Q8_0) with one thread; 25.1 / 27.6 (Q4_1 g64), 27.4 /
/// 30.5 (Q4_0), 23.5 / 27.7 (Q8_0) with two. 4 to 48 KiB were all within a few % of each
/// other (from 8 KiB flat); the L2 requests alone (at 2 KiB, no L1 ones) were no better
/// than none. Those matrices fit this VM's 260 MiB L3; over 500 of them (690 MB, past
/// L3: DRAM) the gain is smaller but there: 12.5 / 13.6 GB/s one thread, 24.7 / 26.3 two.
/// The four-stream read probe gains nothing from them (15.8 / 15.9 GB/s over 512 MiB,
/// 16.2 / 16.3 over 190 MiB).
pub const L2_PREFETCH_BYTES: usize = 8192;

/// Prefetches the `lines` cache lines starting `PREFETCH_BYTES` after `p` into L1 and the
/// ones `L2_PREFETCH_BYTES` after it into L2 (hints: an address past the end of the
/// weights is harmless, hence `wrapping_add`).
///
/// # Safety
/// CPU supports SSE (every x86-64); no memory is accessed.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn prefetch_ahead(p: *const u8, lines: usize) {
    for l in 0..lines {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_BYTES + 64 * l) as *const i8);
        _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(L2_PREFETCH_BYTES + 64 * l) as *const i8);
    }
}

/// Requests the lines of `buf[range]` into L2 (`prefetcht1`; a hint: nothing is read).
pub(crate) fn prefetch_l2(_: ops::Simd, buf: &[u8], range: std::ops::Range<usize>) {
    let mut i = range.start - range.start % 64;
    while i < range.end.min(buf.len()) {
        // SAFETY: the token proves SSE; `i` is inside `buf`; a prefetch reads nothing.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(buf.as_ptr().add(i) as *const i8) };
        i += 64;
    }
}

/// The block loop of the symmetric interleaved tiles (Q4_0, Q5_0, Q8_0), which differ only
/// in their integer core. Per block (`qb` code bytes and 8 fp16 scales of the panel, one
/// `52·N`-byte record of the tile `a`), `isum(qp, ap)` returns each token's exact int32
/// `Σ w·a` for the 8 rows (`qp`, `ap`: the block's codes and record), and the block adds
/// `(dw·da)·isum` to each token's rows with one FMA: the float operations of the
/// row-pointer tiles, in their order.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C; `isum` reads no more than the `qb` bytes at `qp` and the
/// record at `ap`. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_il_sym<const N: usize>(
    q: &[u8],
    s: &[u16],
    a: &[u8],
    nb: usize,
    qb: usize,
    isum: impl Fn(*const u8, *const u8) -> [__m256i; N],
) -> [__m256; N] {
    let rec = N * IL_REC;
    assert!(q.len() >= nb * qb && s.len() >= nb * 8 && a.len() >= nb * rec);
    let mut acc = [_mm256_setzero_ps(); N];
    let (mut qp, mut ap, mut sp) = (q.as_ptr(), a.as_ptr(), s.as_ptr());
    for _ in 0..nb {
        let i = isum(qp, ap);
        // SAFETY: block b's 8 scales and record are in bounds (checked above; the
        // pointers are at block b).
        unsafe {
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(sp as *const __m128i));
            for t in 0..N {
                let sc = _mm256_mul_ps(dw, q4_0::bcast_f(ap.add(32 * N + 4 * t)));
                acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i[t]), acc[t]);
            }
        }
        // Advance to block b+1 (one past the end after the last: never dereferenced).
        qp = qp.wrapping_add(qb);
        sp = sp.wrapping_add(8);
        ap = ap.wrapping_add(rec);
    }
    acc
}

/// Adds block `b`'s `(dw·da)·i` to each token's 8 rows: the one FMA per block of every
/// row-pointer tile, in the scalar reference's order.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C; `b < r.nb`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scale_add<const N: usize>(
    acc: &mut [__m256; N],
    dw: __m256,
    r: &TileRows<N>,
    b: usize,
    i: &[__m256i; N],
) {
    for t in 0..N {
        let sc = _mm256_mul_ps(dw, _mm256_set1_ps(r.ad[t][b]));
        acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(i[t]), acc[t]);
    }
}

/// The block loop of the symmetric row-pointer tiles (Q4_0, Q5_0, Q8_0), which differ only
/// in their integer core, as [`tile_il_sym`] is for the interleaved ones. Per block `b`
/// (`qb` code bytes and 8 fp16 scales of the panel), `isum(b, qp, ap)` returns each
/// token's exact int32 `Σ w·a` for the 8 rows (`qp`: the block's codes, `ap[t]`: row t's
/// 32 codes of the block), and [`scale_add`] applies `dw·da`. gemv (N = 1) streams the
/// weights from DRAM: it prefetches `lines` cache lines ahead of the math.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C; `isum` reads no more than the `qb` bytes at `qp` and the
/// 32 at each `ap[t]`. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_sym<const N: usize>(
    q: &[u8],
    s: &[u16],
    mut r: TileRows<N>,
    (qb, lines): (usize, usize),
    isum: impl Fn(usize, *const u8, &[*const i8; N]) -> [__m256i; N],
) -> [__m256; N] {
    assert!(q.len() >= r.nb * qb && s.len() >= r.nb * 8);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..r.nb {
        let qp = q.as_ptr().wrapping_add(b * qb);
        if N == 1 {
            // SAFETY: a prefetch hint, no memory access (CPU features as this fn's).
            unsafe { prefetch_ahead(qp, lines) };
        }
        let i = isum(b, qp, &r.ap);
        // SAFETY: b < nb: block b's 8 scales are within `s` (checked above).
        unsafe {
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(b * 8) as *const __m128i));
            scale_add(&mut acc, dw, &r, b, &i);
        }
        r.advance();
    }
    acc
}

/// Where a tile's activation rows come from.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    /// Rows `t..t+N` of the activation.
    Rows(&'a QuantizedActivation, usize),
    /// An interleaved tile of N tokens (`staging::interleave`), `blocks·N·52` bytes.
    Il(&'a [u8]),
}

/// The 8 outputs of internal panel `p` (stored as `layout`) for tokens `t..t+N`.
///
/// # Safety
/// CPU supports AVX2, FMA, F16C.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) unsafe fn tile<const N: usize>(
    layout: Layout,
    w: &PackedMatrix,
    p: usize,
    src: Src,
) -> [__m256; N] {
    let (q, s) = (w.panel_quants(p), w.panel_scales(p));
    let (act, t) = match src {
        // SAFETY: CPU features as required by this function's contract.
        Src::Il(a) => unsafe {
            return match layout {
                Layout::Q4_0 => q4_0::tile_il::<N>(q, s, a, w.blocks()),
                Layout::Q4_1 => q4_1::tile_il::<N>(q, s, a, w.blocks()),
                Layout::Q4_1x64 => q4_1::tile_x64_il::<N>(q, s, a, w.blocks()),
                Layout::Q4_K => q4_k::tile_il::<N>(q, s, a, w.blocks()),
                Layout::Q5_0 => q5_0::tile_il::<N>(q, s, a, w.blocks()),
                Layout::Q8_0 if N == 4 => {
                    let v = q8_0::tile_il4(q, s, a, w.blocks());
                    let mut r = [_mm256_setzero_ps(); N];
                    r.copy_from_slice(&v);
                    r
                }
                _ => unreachable!("no interleaved tile for {layout:?}"),
            };
        },
        Src::Rows(act, t) => (act, t),
    };
    // F16 reads the f32 rows; the quantized layouts their codes and scales.
    let rows = || TileRows::new(act, t);
    // SAFETY: CPU features as required by this function's contract.
    unsafe {
        match layout {
            Layout::Q4_0 => q4_0::tile::<N>(q, s, rows()),
            Layout::Q4_1 => q4_1::tile::<N>(q, s, rows()),
            Layout::Q4_1x64 => q4_1::tile_x64::<N>(q, s, rows()),
            Layout::Q8_0 => q8_0::tile::<N>(q, s, rows()),
            Layout::Q4_K => q4_k::tile::<N>(q, s, rows()),
            Layout::Q6_K => q6_k::tile::<N>(q, s, rows()),
            Layout::Q5_0 => q5_0::tile::<N>(q, s, rows()),
            Layout::Q5_K => q5_k::tile::<N>(q, s, rows()),
            Layout::F16 => f16::tile::<N>(q, act, t),
        }
    }
}

/// `out[i] = silu(g[i]) · u[i]` with [`silu_mul`], 8 at a time (the tail through padded
/// copies): the fused gate/up kernels' epilogue, element-wise, so a stacked or split
/// gate/up followed by this gives the bits of the fused SwiGLU product.
///
/// Panics unless `g`, `u` and `out` have the same length.
pub fn silu_mul_rows(_: Simd, g: &[f32], u: &[f32], out: &mut [f32]) {
    assert!(
        u.len() == g.len() && out.len() == g.len(),
        "silu_mul_rows: lengths"
    );
    // SAFETY: the token proves AVX2 + FMA + F16C; lengths checked.
    unsafe { silu_mul_rows_body(g, u, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn silu_mul_rows_body(g: &[f32], u: &[f32], out: &mut [f32]) {
    let n = g.len();
    let mut i = 0;
    while i + 8 <= n {
        let v = silu_mul(
            _mm256_loadu_ps(g.as_ptr().add(i)),
            _mm256_loadu_ps(u.as_ptr().add(i)),
        );
        _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        i += 8;
    }
    if i < n {
        let (mut a, mut b, mut c) = ([0f32; 8], [0f32; 8], [0f32; 8]);
        a[..n - i].copy_from_slice(&g[i..]);
        b[..n - i].copy_from_slice(&u[i..]);
        let v = silu_mul(_mm256_loadu_ps(a.as_ptr()), _mm256_loadu_ps(b.as_ptr()));
        _mm256_storeu_ps(c.as_mut_ptr(), v);
        out[i..].copy_from_slice(&c[..n - i]);
    }
}

/// `silu(g) * u = g / (1 + exp(-g)) * u`, exp by range reduction to `2^n · e^r`,
/// `|r| <= ln2/2`, and a degree-6 polynomial (Cephes `expf`; ~1 ulp), with `|g|` clamped to 88 inside exp.
///
/// # Safety
/// CPU supports AVX2, FMA.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub unsafe fn silu_mul(g: __m256, u: __m256) -> __m256 {
    let x = _mm256_sub_ps(_mm256_setzero_ps(), g);
    let x = _mm256_min_ps(x, _mm256_set1_ps(88.0));
    let x = _mm256_max_ps(x, _mm256_set1_ps(-88.0));
    let fx = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut y = _mm256_set1_ps(1.987_569_1e-4);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.398_2e-3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.333_452e-3));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.166_579_6e-2));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.666_666_5e-1));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5));
    y = _mm256_fmadd_ps(
        y,
        _mm256_mul_ps(r, r),
        _mm256_add_ps(r, _mm256_set1_ps(1.0)),
    );
    // 2^fx with fx in [-127, 127] (|x| <= 88): exponent bits; fx = -127 gives +0.0.
    let n = _mm256_cvtps_epi32(fx);
    let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        n,
        _mm256_set1_epi32(127),
    )));
    let e = _mm256_mul_ps(y, pow2);
    let sig = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e));
    _mm256_mul_ps(sig, u)
}
