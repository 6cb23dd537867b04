//! The KV cache: per layer, `n_ctx` rows of `kv_dim` keys and values, preallocated at
//! full size and written in place at each token's position. Keys and values each have
//! their own element type (llama.cpp's `-ctk` / `-ctv`): f16 (default), f32, or q8_0
//! (blocks of 32 int8 with an f16 scale, llama.cpp's `block_q8_0`, quantized by its
//! reference rounding; 8.5 bits per element, 47% less memory than f16). A q8_0 block never
//! straddles two heads: the head size must be a multiple of 32 ([`KvType::check`]).

use std::fmt;
use std::str::FromStr;

use half::{f16, slice::HalfFloatSliceExt};
use pocket_kernels::formats::q8_0::{self, BlockQ8_0, QK8_0};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F16,
    F32,
    Q8_0,
}

/// The names `-ctk` / `-ctv` accept.
pub const KV_TYPE_NAMES: &[&str] = &["f16", "f32", "q8_0"];

impl KvType {
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::F32 => "f32",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Elements per storage block (32 for q8_0, else 1).
    pub fn block(self) -> usize {
        match self {
            KvType::Q8_0 => QK8_0,
            _ => 1,
        }
    }

    /// Bytes of `n` elements (`n` a multiple of [`KvType::block`]).
    pub fn bytes(self, n: usize) -> usize {
        match self {
            KvType::F16 => 2 * n,
            KvType::F32 => 4 * n,
            KvType::Q8_0 => n / QK8_0 * std::mem::size_of::<BlockQ8_0>(),
        }
    }

    /// Whether rows of heads of `head_dim` elements can be stored in this type.
    pub fn check(self, head_dim: usize) -> Result<(), KvTypeError> {
        if !head_dim.is_multiple_of(self.block()) {
            return Err(KvTypeError::HeadSize { ty: self, head_dim });
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvTypeError {
    #[error("unknown KV cache type '{0}' (expected one of: {names})", names = KV_TYPE_NAMES.join(", "))]
    Unknown(String),
    #[error("KV cache type {ty} needs a head size that is a multiple of {block}; this model's is {head_dim}", block = ty.block())]
    HeadSize { ty: KvType, head_dim: usize },
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KvType {
    type Err = KvTypeError;
    fn from_str(s: &str) -> Result<Self, KvTypeError> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvType::F16),
            "f32" => Ok(KvType::F32),
            "q8_0" => Ok(KvType::Q8_0),
            _ => Err(KvTypeError::Unknown(s.to_string())),
        }
    }
}

enum Store {
    F16(Vec<f16>),
    F32(Vec<f32>),
    Q8_0(Vec<BlockQ8_0>),
}

impl Store {
    fn new(ty: KvType, n: usize) -> Store {
        match ty {
            KvType::F16 => Store::F16(vec![f16::ZERO; n]),
            KvType::F32 => Store::F32(vec![0.0; n]),
            KvType::Q8_0 => Store::Q8_0(vec![
                BlockQ8_0 {
                    d: f16::ZERO,
                    qs: [0; QK8_0]
                };
                n / QK8_0
            ]),
        }
    }
    fn write(&mut self, at: usize, x: &[f32]) {
        match self {
            Store::F16(v) => {
                v[at..at + x.len()].convert_from_f32_slice(x);
            }
            Store::F32(v) => v[at..at + x.len()].copy_from_slice(x),
            Store::Q8_0(v) => {
                let b = at / QK8_0;
                q8_0::quantize_row(x, &mut v[b..b + x.len() / QK8_0]);
            }
        }
    }
    /// Copies the first `n` elements of `src` (a store of the same type and row size).
    fn copy_prefix(&mut self, src: &Store, n: usize) {
        match (self, src) {
            (Store::F16(d), Store::F16(s)) => d[..n].copy_from_slice(&s[..n]),
            (Store::F32(d), Store::F32(s)) => d[..n].copy_from_slice(&s[..n]),
            (Store::Q8_0(d), Store::Q8_0(s)) => {
                d[..n / QK8_0].copy_from_slice(&s[..n / QK8_0]);
            }
            _ => unreachable!("copy between KV stores of different types"),
        }
    }
    #[inline(always)]
    fn read(&self, at: usize, out: &mut [f32]) {
        match self {
            Store::F16(v) => {
                v[at..at + out.len()].convert_to_f32_slice(out);
            }
            Store::F32(v) => out.copy_from_slice(&v[at..at + out.len()]),
            Store::Q8_0(v) => {
                // `at` and `out.len()` are multiples of 32 (whole heads, `KvType::check`).
                let b = at / QK8_0;
                for (blk, o) in v[b..b + out.len() / QK8_0]
                    .iter()
                    .zip(out.chunks_exact_mut(QK8_0))
                {
                    let d = blk.d.to_f32();
                    for (o, &q) in o.iter_mut().zip(&blk.qs) {
                        *o = q as f32 * d;
                    }
                }
            }
        }
    }
}

pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    ty_k: KvType,
    ty_v: KvType,
    k: Vec<Store>,
    v: Vec<Store>,
}

impl KvCache {
    /// Keys and values both of type `ty`.
    pub fn new(n_layer: usize, n_ctx: usize, kv_dim: usize, ty: KvType) -> KvCache {
        Self::with_types(n_layer, n_ctx, kv_dim, ty, ty)
    }

    /// Keys of type `ty_k`, values of type `ty_v`. Panics if `kv_dim` is not a multiple
    /// of a type's block (check the head size with [`KvType::check`] first).
    pub fn with_types(
        n_layer: usize,
        n_ctx: usize,
        kv_dim: usize,
        ty_k: KvType,
        ty_v: KvType,
    ) -> KvCache {
        for ty in [ty_k, ty_v] {
            assert!(
                kv_dim.is_multiple_of(ty.block()),
                "KV row of {kv_dim} is not a whole number of {} blocks",
                ty.name()
            );
        }
        KvCache {
            n_ctx,
            kv_dim,
            ty_k,
            ty_v,
            k: (0..n_layer)
                .map(|_| Store::new(ty_k, n_ctx * kv_dim))
                .collect(),
            v: (0..n_layer)
                .map(|_| Store::new(ty_v, n_ctx * kv_dim))
                .collect(),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }
    /// Key and value element types.
    pub fn types(&self) -> (KvType, KvType) {
        (self.ty_k, self.ty_v)
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let n = self.n_ctx * self.kv_dim;
        self.k.len() * (self.ty_k.bytes(n) + self.ty_v.bytes(n))
    }

    /// Stores the key and value rows (`kv_dim` each) of position `pos` of layer `l`.
    pub fn write(&mut self, l: usize, pos: usize, k: &[f32], v: &[f32]) {
        assert!(
            pos < self.n_ctx,
            "position {pos} past the context of {}",
            self.n_ctx
        );
        assert!(k.len() == self.kv_dim && v.len() == self.kv_dim);
        self.k[l].write(pos * self.kv_dim, k);
        self.v[l].write(pos * self.kv_dim, v);
    }

    /// Copies positions `0..n` of every layer from `src` (a cache of the same shape and
    /// types): a forked sequence starts from another's prefix. Returns false (and copies
    /// nothing) when the shapes or types differ or `n` is past either context.
    pub fn copy_prefix_from(&mut self, src: &KvCache, n: usize) -> bool {
        let same =
            (self.kv_dim, self.types(), self.k.len()) == (src.kv_dim, src.types(), src.k.len());
        if !same || n > self.n_ctx || n > src.n_ctx {
            return false;
        }
        let elems = n * self.kv_dim;
        for (d, s) in self
            .k
            .iter_mut()
            .zip(&src.k)
            .chain(self.v.iter_mut().zip(&src.v))
        {
            d.copy_prefix(s, elems);
        }
        true
    }

    /// Key of layer `l`, position `pos`, elements `off..off + out.len()` (one head).
    #[inline]
    pub fn read_k(&self, l: usize, pos: usize, off: usize, out: &mut [f32]) {
        self.k[l].read(pos * self.kv_dim + off, out)
    }

    /// The f16 key and value stores of layer `l` (`n_ctx x kv_dim`, row per position), or
    /// `None` unless both are f16 (the exact-numerics attention reads them in place).
    pub fn f16_rows(&self, l: usize) -> Option<(&[f16], &[f16])> {
        match (&self.k[l], &self.v[l]) {
            (Store::F16(k), Store::F16(v)) => Some((k, v)),
            _ => None,
        }
    }

    #[inline]
    pub fn read_v(&self, l: usize, pos: usize, off: usize, out: &mut [f32]) {
        self.v[l].read(pos * self.kv_dim + off, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_land_at_their_positions() {
        for ty in [KvType::F16, KvType::F32] {
            let mut c = KvCache::new(2, 8, 4, ty);
            c.write(1, 5, &[1.0, 2.0, 3.0, 4.0], &[-1.0, -2.0, -3.0, -4.0]);
            c.write(1, 6, &[9.0; 4], &[8.0; 4]);
            let mut o = [0.0; 2];
            c.read_k(1, 5, 2, &mut o);
            assert_eq!(o, [3.0, 4.0]);
            c.read_v(1, 5, 0, &mut o);
            assert_eq!(o, [-1.0, -2.0]);
            c.read_k(0, 5, 0, &mut o);
            assert_eq!(o, [0.0, 0.0], "other layer untouched");
            c.read_k(1, 6, 0, &mut o);
            assert_eq!(o, [9.0, 9.0]);
            c.read_k(1, 4, 0, &mut o);
            assert_eq!(o, [0.0, 0.0]);
        }
    }

    #[test]
    fn copy_prefix_takes_the_first_positions_of_every_layer() {
        for ty in [KvType::F16, KvType::F32, KvType::Q8_0] {
            let mut a = KvCache::new(2, 4, 32, ty);
            let mut b = KvCache::new(2, 4, 32, ty);
            for pos in 0..3 {
                a.write(1, pos, &[pos as f32 + 1.0; 32], &[-(pos as f32) - 1.0; 32]);
                b.write(1, pos, &[9.0; 32], &[9.0; 32]);
            }
            assert!(b.copy_prefix_from(&a, 2));
            let (mut o, mut want) = ([0.0; 32], [0.0; 32]);
            for pos in 0..3 {
                b.read_k(1, pos, 0, &mut o);
                a.read_k(1, pos, 0, &mut want);
                assert_eq!(o == want, pos < 2, "{ty:?} key at {pos}");
                b.read_v(1, pos, 0, &mut o);
                a.read_v(1, pos, 0, &mut want);
                assert_eq!(o == want, pos < 2, "{ty:?} value at {pos}");
            }
            assert!(!b.copy_prefix_from(&a, 5), "past the context");
            let other = KvCache::new(
                2,
                4,
                32,
                if ty == KvType::F32 {
                    KvType::F16
                } else {
                    KvType::F32
                },
            );
            assert!(!b.copy_prefix_from(&other, 1), "other type");
        }
    }

    #[test]
    fn q8_0_rows_round_trip_per_head() {
        // Two heads of 32: each head is its own block with its own scale.
        let mut c = KvCache::with_types(1, 4, 64, KvType::Q8_0, KvType::F16);
        let k: Vec<f32> = (0..64)
            .map(|i| {
                if i < 32 {
                    i as f32 * 0.01
                } else {
                    -(i as f32) * 3.0
                }
            })
            .collect();
        let v: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
        c.write(0, 2, &k, &v);
        let mut o = [0.0; 32];
        for h in 0..2 {
            c.read_k(0, 2, h * 32, &mut o);
            let amax = k[h * 32..(h + 1) * 32]
                .iter()
                .fold(0f32, |m, x| m.max(x.abs()));
            for (i, &x) in o.iter().enumerate() {
                let want = k[h * 32 + i];
                assert!(
                    (x - want).abs() <= amax / 127.0 * 0.5 + 1e-3 * amax,
                    "head {h} elem {i}: {x} vs {want}"
                );
            }
        }
        c.read_v(0, 2, 32, &mut o);
        assert_eq!(o[1], 16.5);
        c.read_k(0, 1, 0, &mut o);
        assert_eq!(o, [0.0; 32], "untouched position reads zero");
        assert_eq!(c.types(), (KvType::Q8_0, KvType::F16));
        assert_eq!(c.bytes(), 4 * 64 / 32 * 34 + 4 * 64 * 2);
    }

    #[test]
    fn type_names_and_head_checks() {
        for n in KV_TYPE_NAMES {
            assert_eq!(n.parse::<KvType>().unwrap().name(), *n);
        }
        let e = "q4_0".parse::<KvType>().unwrap_err().to_string();
        assert!(e.contains("q4_0") && e.contains("q8_0"), "{e}");
        assert!(KvType::Q8_0.check(64).is_ok());
        let e = KvType::Q8_0.check(16).unwrap_err().to_string();
        assert!(e.contains("multiple of 32") && e.contains("16"), "{e}");
        assert!(KvType::F16.check(16).is_ok());
    }

    #[test]
    #[should_panic(expected = "past the context")]
    fn writing_past_the_context_panics() {
        let mut c = KvCache::new(1, 4, 2, KvType::F16);
        c.write(0, 4, &[0.0; 2], &[0.0; 2]);
    }
}
