//! One query row of ggml's CPU flash attention with an f16 KV cache
//! (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`, the path llama.cpp takes for
//! decode and for batches of fewer than 64 rows (`GGML_FA_TILE_Q`) while the cache holds
//! < 512 cells):
//! Q rounded to fp16, scores by [`vec_dot_f16`], an online softmax in f32 with libm `expf`,
//! and the V sum kept in an fp16 accumulator that is rounded after every key.
//!
//! A single decode row over a cache of 512 cells or more takes the split-KV path instead
//! ([`KvCells::flash_attn_row_split_kv`]): each of the `nth` threads runs that same loop over its
//! own contiguous range of cells, and the partial results are merged in f32. Batches of 64
//! rows or more take the tiled path ([`KvCells::flash_attn_row_tiled`]: f32 Q, f32 sums).

use half::f16;

use super::vec::{vec_dot_f16, vec_mad_f16, vec_scale_f16};
use super::{f2h, h2f};

/// The online-softmax loop of `one_chunk` over the visible keys `keys(i)` / `values(i)`,
/// `i in 0..n`: returns (M, S) and leaves the fp16 V accumulator in `acc`.
fn chunk<'a>(
    qh: &[f16],
    n: usize,
    keys: impl Fn(usize) -> &'a [f16],
    values: impl Fn(usize) -> &'a [f16],
    scale: f32,
    acc: &mut [f16],
) -> (f32, f32) {
    acc.fill(f16::ZERO);
    let (mut s_sum, mut m) = (0.0f32, f32::NEG_INFINITY);
    for i in 0..n {
        let s = vec_dot_f16(keys(i), qh) * scale;
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if s > m {
            let m_old = m;
            m = s;
            ms = (m_old - m).exp();
            vec_scale_f16(acc, ms);
        } else {
            vs = (s - m).exp();
        }
        vec_mad_f16(acc, values(i), vs);
        // `S = S*ms + vs`: contracted by GCC into one fused multiply-add.
        s_sum = s_sum.mul_add(ms, vs);
    }
    (m, s_sum)
}

/// `GGML_FA_TILE_Q`: batches of at least this many query rows take the tiled path.
pub const FA_TILE_Q: usize = 64;

/// Attends query `q` (`DK` values) over the visible keys `keys(i)` / values `values(i)`
/// for `i in 0..n`, in cache order; writes `DV` outputs. `scale` multiplies each score.
pub fn flash_attn_row<'a>(
    q: &[f32],
    n: usize,
    keys: impl Fn(usize) -> &'a [f16],
    values: impl Fn(usize) -> &'a [f16],
    scale: f32,
    out: &mut [f32],
) {
    let qh: Vec<f16> = q.iter().map(|&v| f2h(v)).collect();
    let mut acc = vec![f16::ZERO; out.len()];
    let (_, s_sum) = chunk(&qh, n, keys, values, scale, &mut acc);
    let inv = if s_sum == 0.0 { 0.0 } else { 1.0 / s_sum };
    for (o, &a) in out.iter_mut().zip(&acc) {
        *o = h2f(a) * inv;
    }
}

/// Cells per KV tile of the tiled path (`GGML_FA_TILE_KV`).
const KV_TILE: usize = 64;

/// The cells of the cache a query row attends over on the paths that take the whole cache
/// view: cells `0..n_kv`, `visible(c)` whether cell `c` is unmasked (its mask is not -INF),
/// `keys(c)` / `values(c)` its rows.
#[derive(Debug, Clone, Copy)]
pub struct KvCells<V, K, W> {
    pub n_kv: usize,
    pub visible: V,
    pub keys: K,
    pub values: W,
}

impl<'a, V, K, W> KvCells<V, K, W>
where
    V: Fn(usize) -> bool,
    K: Fn(usize) -> &'a [f16],
    W: Fn(usize) -> &'a [f16],
{
    /// The split-KV decode path (`ggml_compute_forward_flash_attn_ext_f16` with one query row,
    /// f16 K and V and `n_kv >= 512` cache cells, i.e. llama.cpp decoding once its padded
    /// cache view reaches 512 cells): the `n_kv` cells are cut into `nth` (the thread count)
    /// ranges of `ceil(n_kv / nth)` cells, each attended as in [`flash_attn_row`] up to its
    /// unnormalized (M, S, V), and those merged in cell order by
    /// `ggml_flash_attn_ext_reduce_partials`. With `nth == 1` this is [`flash_attn_row`]'s
    /// arithmetic.
    pub fn flash_attn_row_split_kv(&self, q: &[f32], scale: f32, nth: usize, out: &mut [f32]) {
        let (n_kv, visible, keys, values) = (self.n_kv, &self.visible, &self.keys, &self.values);
        assert!(nth > 0, "flash_attn_row_split_kv: nth");
        let qh: Vec<f16> = q.iter().map(|&v| f2h(v)).collect();
        let dv = out.len();
        let mut acc = vec![f16::ZERO; dv];
        let mut vkq = vec![0f32; dv];
        let (mut m_final, mut s_final) = (f32::NEG_INFINITY, 0.0f32);
        let chunk_size = n_kv.div_ceil(nth);
        for c in 0..nth {
            let start = c * chunk_size;
            if start >= n_kv {
                continue;
            }
            let end = (start + chunk_size).min(n_kv);
            let seen: Vec<usize> = (start..end).filter(|&i| visible(i)).collect();
            let (m_chunk, s_chunk) = chunk(
                &qh,
                seen.len(),
                |i| keys(seen[i]),
                |i| values(seen[i]),
                scale,
                &mut acc,
            );
            if s_chunk == 0.0 {
                continue;
            }
            let m_new = m_final.max(m_chunk);
            let scale_old = (m_final - m_new).exp();
            let scale_new = (m_chunk - m_new).exp();
            // `a*scale_old + b*scale_new`: GCC fuses the first product (vfmadd over the
            // rounded second), in the vectorized V loop and for S alike.
            for (v, &a) in vkq.iter_mut().zip(&acc) {
                *v = v.mul_add(scale_old, h2f(a) * scale_new);
            }
            s_final = s_final.mul_add(scale_old, s_chunk * scale_new);
            m_final = m_new;
        }
        if s_final != 0.0 {
            let inv = 1.0 / s_final;
            vkq.iter_mut().for_each(|v| *v *= inv);
        }
        out.copy_from_slice(&vkq);
    }

    /// One query row of the tiled path (`ggml_compute_forward_flash_attn_ext_tiled`, taken by
    /// batches of 64 rows or more (`GGML_FA_TILE_Q`) with f16 or f32 K and V of one type).
    /// Unlike the one-row paths, Q stays f32 and the sums are f32: per tile of 64 cells,
    /// scores by `simd_gemm` (one fused multiply-add chain over `DK` per score, from 0), times
    /// `scale`, the mask added; the tile's max updates M (rescaling V and S by `expf` of the
    /// difference), `ggml_vec_soft_max_f32` turns the scores into `ggml_v_expf(s - M)` and its
    /// f64 sum of [`hsum8`]s of eight is added to S; V accumulates in f32 by `simd_gemm` (a
    /// fused multiply-add chain over the tile's 64 cells, masked cells contributing 0).
    /// A tile where the row sees nothing leaves it untouched, so the result does not depend on
    /// which other rows share its Q tile.
    ///
    /// [`hsum8`]: super::hsum8
    pub fn flash_attn_row_tiled(&self, q: &[f32], scale: f32, out: &mut [f32]) {
        let (n_kv, visible, keys, values) = (self.n_kv, &self.visible, &self.keys, &self.values);
        use super::hsum8;
        use super::vec::v_expf;
        let dv = out.len();
        let mut vkq = vec![0f32; dv];
        let (mut m, mut s_sum) = (f32::NEG_INFINITY, 0.0f32);
        let mut kq = [0f32; KV_TILE];
        for ic in (0..n_kv).step_by(KV_TILE) {
            let kv_tile = KV_TILE.min(n_kv - ic);
            for (tk, s) in kq.iter_mut().enumerate() {
                *s = if tk < kv_tile && visible(ic + tk) {
                    let k = keys(ic + tk);
                    let mut acc = 0.0f32;
                    for (&kd, &qd) in k.iter().zip(q) {
                        acc = h2f(kd).mul_add(qd, acc);
                    }
                    // scale, then + 0.0 (the mask): turns a -0 score into +0.
                    acc * scale + 0.0
                } else {
                    f32::NEG_INFINITY
                };
            }
            let tile_max = kq.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            if tile_max == f32::NEG_INFINITY {
                continue;
            }
            let m_new = m.max(tile_max);
            if m_new > m {
                let ms = (m - m_new).exp();
                vkq.iter_mut().for_each(|v| *v *= ms);
                s_sum *= ms;
            }
            m = m_new;
            let mut sum = 0.0f64;
            for g in kq.chunks_exact_mut(8) {
                for s in g.iter_mut() {
                    *s = v_expf(*s - m_new);
                }
                sum += hsum8(&std::array::from_fn(|l| g[l])) as f64;
            }
            s_sum = (s_sum as f64 + sum) as f32;
            for (tk, &p) in kq.iter().enumerate().take(kv_tile) {
                if p == 0.0 {
                    continue; // adds +-0 to every lane: no change
                }
                for (a, &vd) in vkq.iter_mut().zip(values(ic + tk)) {
                    *a = h2f(vd).mul_add(p, *a);
                }
            }
        }
        let inv = if s_sum == 0.0 { 0.0 } else { 1.0 / s_sum };
        for (o, &a) in out.iter_mut().zip(&vkq) {
            *o = a * inv;
        }
    }
}
