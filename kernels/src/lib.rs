//! pocket-kernels: GGUF block formats and the quantized kernels that run on them.
//!
//! Layout (one file per block format, one folder per ISA):
//! - [`ggml_type`]: the ggml type table (ids, block sizes) shared with the GGUF reader.
//! - [`dispatch`]: run-time ISA detection and the `POCKET_ISA` override.
//! - [`formats`]: the GGUF block formats, scalar: block structs, dequantize, reference
//!   quantize and the scalar dot products SIMD kernels are tested against.
//! - [`ops`]: RMSNorm, RoPE, softmax, activations, f16 conversion (scalar, AVX2, NEON).
//! - [`matmul`]: repacked Q4_0/Q4_1/Q8_0 weights, activation quantization, gemv/gemm
//!   (scalar reference + dispatch); [`arch`]: the SIMD kernels behind it.
//! - [`attention`]: the tiled causal attention over cached K/V rows (scalar; AVX2 build).
//! - [`ggml_exact`]: scalar twins of llama.cpp's x86 CPU arithmetic, bit for bit, for
//!   parity runs (`--numerics ggml`).

pub(crate) mod arch;
pub mod attention;
pub mod dispatch;
pub mod formats;
pub mod ggml_exact;
pub mod ggml_type;
pub mod matmul;
pub mod ops;

pub use dispatch::Isa;
pub use ggml_type::GgmlType;
