//! The KV cache: per layer, `n_ctx` rows of `kv_dim` keys and values, preallocated at
//! full size (f16 by default, f32 optional) and written in place at each token's position.

use half::{f16, slice::HalfFloatSliceExt};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F16,
    F32,
}

enum Store {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl Store {
    fn new(ty: KvType, n: usize) -> Store {
        match ty {
            KvType::F16 => Store::F16(vec![f16::ZERO; n]),
            KvType::F32 => Store::F32(vec![0.0; n]),
        }
    }
    fn write(&mut self, at: usize, x: &[f32]) {
        match self {
            Store::F16(v) => {
                v[at..at + x.len()].convert_from_f32_slice(x);
            }
            Store::F32(v) => v[at..at + x.len()].copy_from_slice(x),
        }
    }
    fn read(&self, at: usize, out: &mut [f32]) {
        match self {
            Store::F16(v) => {
                v[at..at + out.len()].convert_to_f32_slice(out);
            }
            Store::F32(v) => out.copy_from_slice(&v[at..at + out.len()]),
        }
    }
}

pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    ty: KvType,
    k: Vec<Store>,
    v: Vec<Store>,
}

impl KvCache {
    pub fn new(n_layer: usize, n_ctx: usize, kv_dim: usize, ty: KvType) -> KvCache {
        KvCache {
            n_ctx,
            kv_dim,
            ty,
            k: (0..n_layer)
                .map(|_| Store::new(ty, n_ctx * kv_dim))
                .collect(),
            v: (0..n_layer)
                .map(|_| Store::new(ty, n_ctx * kv_dim))
                .collect(),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }
    pub fn ty(&self) -> KvType {
        self.ty
    }
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let per = match self.ty {
            KvType::F16 => 2,
            KvType::F32 => 4,
        };
        2 * self.k.len() * self.n_ctx * self.kv_dim * per
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

    /// Key of layer `l`, position `pos`, elements `off..off + out.len()` (one head).
    #[inline]
    pub fn read_k(&self, l: usize, pos: usize, off: usize, out: &mut [f32]) {
        self.k[l].read(pos * self.kv_dim + off, out)
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
    #[should_panic(expected = "past the context")]
    fn writing_past_the_context_panics() {
        let mut c = KvCache::new(1, 4, 2, KvType::F16);
        c.write(0, 4, &[0.0; 2], &[0.0; 2]);
    }
}
