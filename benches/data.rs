//! Synthetic operands shared by the kernel benchmarks (`benches/matmul.rs`) and the CPU-time
//! A/B tool (`kernels/examples/gemm_cpu.rs`, which includes this file by `#[path]`), so the
//! two measure the same weights.

use pocket_kernels::GgmlType;

pub struct XorShift(pub u64);
impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Every format the benchmarks measure, in the order they report: (name, type, Q4_1
/// 64-groups share (d, m)).
pub const FORMATS: [(&str, GgmlType, bool); 9] = [
    ("q4_0", GgmlType::Q4_0, false),
    ("q4_1", GgmlType::Q4_1, false),
    ("q4_1x64", GgmlType::Q4_1, true),
    ("q8_0", GgmlType::Q8_0, false),
    ("q5_0", GgmlType::Q5_0, false),
    ("q4_k", GgmlType::Q4_K, false),
    ("q5_k", GgmlType::Q5_K, false),
    ("q6_k", GgmlType::Q6_K, false),
    ("f16", GgmlType::F16, false),
];

/// `n` activations uniform in [-2, 2), drawn from `rng`.
pub fn random_activations(rng: &mut XorShift, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0)
        .collect()
}

/// Random raw GGUF bytes with small, sane fp16 scale fields.
pub fn random_tensor(ty: GgmlType, share: bool, rows: usize, cols: usize) -> Vec<u8> {
    let (bs, bb) = (ty.block_size(), ty.type_size());
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut v = vec![0u8; rows * cols / bs * bb];
    for c in v.chunks_mut(8) {
        let r = rng.next().to_le_bytes();
        c.copy_from_slice(&r[..c.len()]);
    }
    let h = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
    let (d, m) = (h(0.01), h(-0.08));
    if ty == GgmlType::F16 {
        // Finite weights of either sign (random bits would include Inf / NaN).
        for (i, w) in v.chunks_exact_mut(2).enumerate() {
            w.copy_from_slice(&h(((i * 37 % 101) as f32 - 50.0) * 1e-3));
        }
        return v;
    }
    for (i, blk) in v.chunks_exact_mut(bb).enumerate() {
        match ty {
            GgmlType::Q4_1 => {
                blk[0..2].copy_from_slice(&d);
                let m = if share {
                    m
                } else {
                    h(-0.08 + (i % 7) as f32 * 1e-3)
                };
                blk[2..4].copy_from_slice(&m);
            }
            GgmlType::Q4_K | GgmlType::Q5_K => {
                blk[0..2].copy_from_slice(&h(0.001));
                blk[2..4].copy_from_slice(&h(0.002));
            }
            GgmlType::Q6_K => blk[208..210].copy_from_slice(&h(0.0005)),
            _ => blk[0..2].copy_from_slice(&d),
        }
    }
    v
}
