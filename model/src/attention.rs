//! Causal self-attention over the KV cache: the cache's rows of one layer handed to the
//! tiled kernel of `pocket_kernels::attention` (grouped-query, tiles of 16 keys; scalar,
//! and the same body compiled for AVX2).

use crate::kv_cache::KvCache;

pub use pocket_kernels::attention::AttnScratch;
use pocket_kernels::attention::{attend, F16Rows, KvRows, QueryBlock};
use pocket_kernels::Isa;

/// Layer `l` of a cache, as the kernel reads it.
pub(crate) struct LayerRows<'a> {
    cache: &'a KvCache,
    l: usize,
}

impl<'a> LayerRows<'a> {
    pub(crate) fn new(cache: &'a KvCache, l: usize) -> Self {
        LayerRows { cache, l }
    }
}

impl KvRows for LayerRows<'_> {
    #[inline]
    fn key(&self, pos: usize, off: usize, out: &mut [f32]) {
        self.cache.read_k(self.l, pos, off, out)
    }
    #[inline]
    fn value(&self, pos: usize, off: usize, out: &mut [f32]) {
        self.cache.read_v(self.l, pos, off, out)
    }
    #[inline]
    fn f16(&self) -> Option<F16Rows<'_>> {
        let (k, v) = self.cache.f16_rows(self.l)?;
        let stride = self.cache.kv_dim();
        Some(F16Rows { k, v, stride })
    }
}

/// Attention of one token at `pos` for one KV head `g` of layer `l`.
///
/// `q`: some of the group's query heads (`heads × head_dim`, already roped; `scale` is
/// applied to the scores). Keys `lo..=pos` are visible, `lo = pos + 1 - window` for a
/// sliding window (`window > 0`), else 0. Writes `heads × head_dim` to `out`.
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    cache: &KvCache,
    l: usize,
    g: usize,
    head_dim: usize,
    q: &[f32],
    pos: usize,
    window: usize,
    scale: f32,
    out: &mut [f32],
    s: &mut AttnScratch,
    isa: Isa,
) {
    let n = q.len();
    attend_block(
        cache, l, g, head_dim, q, n, n, pos, window, scale, out, s, isa,
    )
}

/// [`attend_group`] for a block of consecutive tokens at `pos0, pos0 + 1, ..`: row `i` of
/// `q` (stride `q_stride`, `len` values) is the token at `pos0 + i`, its output goes to
/// `out[i·len..]`. Each cached K and V row is converted once for the whole block.
#[allow(clippy::too_many_arguments)]
pub fn attend_block(
    cache: &KvCache,
    l: usize,
    g: usize,
    head_dim: usize,
    q: &[f32],
    q_stride: usize,
    len: usize,
    pos0: usize,
    window: usize,
    scale: f32,
    out: &mut [f32],
    s: &mut AttnScratch,
    isa: Isa,
) {
    let block = QueryBlock {
        q,
        q_stride,
        len,
        head_dim,
        kv_off: g * head_dim,
        pos0,
        window,
        scale,
    };
    attend(&LayerRows { cache, l }, &block, out, s, isa)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::KvType;

    fn rng(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Per query head, straight from the definition.
    fn naive(
        k: &[Vec<f32>],
        v: &[Vec<f32>],
        q: &[f32],
        pos: usize,
        window: usize,
        scale: f32,
    ) -> Vec<f32> {
        let hd = q.len();
        let mut sc: Vec<f64> = (0..=pos)
            .map(|j| {
                if window > 0 && pos - j >= window {
                    f64::NEG_INFINITY
                } else {
                    (0..hd).map(|i| q[i] as f64 * k[j][i] as f64).sum::<f64>() * scale as f64
                }
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = sc.iter().map(|s| (s - m).exp()).sum();
        sc.iter_mut().for_each(|s| *s = (*s - m).exp() / z);
        (0..hd)
            .map(|i| (0..=pos).map(|j| sc[j] * v[j][i] as f64).sum::<f64>() as f32)
            .collect()
    }

    #[test]
    fn block_attention_matches_one_token_at_a_time() {
        for hd in [8, 64] {
            block_case(hd);
        }
    }

    fn block_case(hd: usize) {
        let (n_kv, group, n_ctx) = (2, 2, 24);
        let kv_dim = n_kv * hd;
        let mut seed = 11u64;
        let mut cache = KvCache::new(1, n_ctx, kv_dim, KvType::F16);
        for p in 0..n_ctx {
            let k: Vec<f32> = (0..kv_dim).map(|_| rng(&mut seed)).collect();
            let v: Vec<f32> = (0..kv_dim).map(|_| rng(&mut seed)).collect();
            cache.write(0, p, &k, &v);
        }
        let mut s = AttnScratch::default();
        let isa = Isa::active();
        let (len, stride) = (group * hd, 3 * group * hd);
        for (pos0, bt, window) in [(0, 5, 0), (3, 8, 0), (10, 7, 4), (2, 3, 1), (16, 8, 0)] {
            let q: Vec<f32> = (0..bt * stride).map(|_| rng(&mut seed) * 2.0).collect();
            let mut out = vec![0.0; bt * len];
            attend_block(
                &cache,
                0,
                1,
                hd,
                &q[hd..],
                stride,
                len,
                pos0,
                window,
                0.3,
                &mut out,
                &mut s,
                isa,
            );
            for i in 0..bt {
                let mut one = vec![0.0; len];
                let qi = &q[hd + i * stride..hd + i * stride + len];
                attend_group(
                    &cache,
                    0,
                    1,
                    hd,
                    qi,
                    pos0 + i,
                    window,
                    0.3,
                    &mut one,
                    &mut s,
                    isa,
                );
                for x in 0..len {
                    assert!(
                        (out[i * len + x] - one[x]).abs() < 1e-5,
                        "pos0 {pos0} i {i}"
                    );
                }
            }
        }
    }

    /// q8_0 keys and values (llama.cpp's `-ctk q8_0 -ctv q8_0`) give the f16 cache's
    /// attention within a tight tolerance, at head sizes 64 and 256 (gemma3).
    #[test]
    fn q8_0_cache_attention_is_close_to_f16() {
        for (hd, n_kv, group) in [(64, 2, 3), (256, 1, 4)] {
            let (n_ctx, kv_dim) = (40, n_kv * hd);
            let mut seed = 5u64 + hd as u64;
            let mut f = KvCache::new(1, n_ctx, kv_dim, KvType::F16);
            let mut q8 = KvCache::new(1, n_ctx, kv_dim, KvType::Q8_0);
            let mut mixed = KvCache::with_types(1, n_ctx, kv_dim, KvType::Q8_0, KvType::F16);
            for p in 0..n_ctx {
                // Keys with a few large channels, as real roped keys have.
                let k: Vec<f32> = (0..kv_dim)
                    .map(|i| rng(&mut seed) * if i % 17 == 0 { 4.0 } else { 1.0 })
                    .collect();
                let v: Vec<f32> = (0..kv_dim).map(|_| rng(&mut seed)).collect();
                f.write(0, p, &k, &v);
                q8.write(0, p, &k, &v);
                mixed.write(0, p, &k, &v);
            }
            let mut s = AttnScratch::default();
            let isa = Isa::active();
            let scale = 1.0 / (hd as f32).sqrt();
            let mut worst = 0f32;
            for (pos, window) in [(0, 0), (7, 0), (39, 0), (39, 8)] {
                for g in 0..n_kv {
                    let q: Vec<f32> = (0..group * hd).map(|_| rng(&mut seed) * 2.0).collect();
                    let mut want = vec![0.0; group * hd];
                    attend_group(&f, 0, g, hd, &q, pos, window, scale, &mut want, &mut s, isa);
                    for c in [&q8, &mixed] {
                        let mut got = vec![0.0; group * hd];
                        attend_group(c, 0, g, hd, &q, pos, window, scale, &mut got, &mut s, isa);
                        for (x, y) in got.iter().zip(&want) {
                            worst = worst.max((x - y).abs());
                        }
                    }
                }
            }
            // Values are in [-1, 1] and q8_0 rounds each to half a step of its block's
            // max / 127 (<= 0.004 here, keys with outlier channels up to 4x coarser): the
            // outputs stay within 1e-2 (measured: 7e-3 at head size 64).
            eprintln!("head_dim {hd}: max |q8_0 - f16| = {worst}");
            assert!(worst < 1e-2, "head_dim {hd}: max |q8_0 - f16| = {worst}");
        }
    }

    #[test]
    fn grouped_attention_matches_naive_per_head() {
        // Head sizes below, at and past the 32-wide register block (80 = 2·32 + 16) and
        // gemma3's 256; contexts spanning several 16-key tiles with partial last tiles.
        for (hd, n_ctx) in [(8, 20), (80, 40), (256, 37)] {
            grouped_attention_case(hd, n_ctx);
        }
    }

    fn grouped_attention_case(hd: usize, n_ctx: usize) {
        let (n_kv, group) = (2, 3);
        let kv_dim = n_kv * hd;
        let mut seed = 7u64;
        let mut cache = KvCache::new(1, n_ctx, kv_dim, KvType::F32);
        let mut ks = vec![];
        let mut vs = vec![];
        for p in 0..n_ctx {
            let k: Vec<f32> = (0..kv_dim).map(|_| rng(&mut seed)).collect();
            let v: Vec<f32> = (0..kv_dim).map(|_| rng(&mut seed)).collect();
            cache.write(0, p, &k, &v);
            ks.push(k);
            vs.push(v);
        }
        let mut s = AttnScratch::default();
        let last = n_ctx - 1;
        for (pos, window) in [
            (0, 0),
            (5, 0),
            (19, 0),
            (19, 4),
            (3, 4),
            (10, 1),
            (last, 0),
            (last, 17),
        ] {
            for g in 0..n_kv {
                let q: Vec<f32> = (0..group * hd).map(|_| rng(&mut seed) * 2.0).collect();
                let mut out = vec![0.0; group * hd];
                attend_group(
                    &cache,
                    0,
                    g,
                    hd,
                    &q,
                    pos,
                    window,
                    0.35,
                    &mut out,
                    &mut s,
                    Isa::active(),
                );
                let kh: Vec<Vec<f32>> = ks
                    .iter()
                    .map(|k| k[g * hd..(g + 1) * hd].to_vec())
                    .collect();
                let vh: Vec<Vec<f32>> = vs
                    .iter()
                    .map(|v| v[g * hd..(g + 1) * hd].to_vec())
                    .collect();
                for h in 0..group {
                    let want = naive(&kh, &vh, &q[h * hd..(h + 1) * hd], pos, window, 0.35);
                    for i in 0..hd {
                        assert!(
                            (out[h * hd + i] - want[i]).abs() < 1e-5,
                            "hd {hd} pos {pos} window {window} g {g} h {h}: {} vs {}",
                            out[h * hd + i],
                            want[i]
                        );
                    }
                }
            }
        }
    }
}
