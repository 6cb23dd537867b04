use pocket_kernels::matmul::{gemm, PackedMatrix, QuantizedActivation};
use pocket_kernels::{GgmlType, Isa};
#[test]
#[ignore]
fn tmp_gemm() {
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let (rows, cols, tokens) = (4864usize, 896usize, 512usize);
        let bb = ty.type_size();
        let mut raw = vec![0x5Au8; rows * cols / 32 * bb];
        for blk in raw.chunks_exact_mut(bb) {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
        let w = PackedMatrix::pack(ty, &raw, rows, cols).unwrap();
        let x: Vec<f32> = (0..cols * tokens).map(|i| (i % 13) as f32 - 6.0).collect();
        let act = QuantizedActivation::quantize(&x, tokens);
        let mut out = vec![0f32; rows * tokens];
        let mut best = f64::INFINITY;
        std::thread::yield_now();
        let c = cpu_ns();
        for _ in 0..6 {
            gemm(&w, &act, &mut out, rows, 0..w.panels(), Isa::Avx2);
        }
        std::thread::yield_now();
        best = best.min((cpu_ns() - c) as f64 * 1e-9 / 6.0);
        println!(
            "{ty:?} {:.1} GOP/s",
            2.0 * (rows * cols * tokens) as f64 / best / 1e9
        );
    }
}

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
