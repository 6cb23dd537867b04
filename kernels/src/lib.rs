//! pocket-kernels: GGUF block formats and the quantized kernels that run on them.
//!
//! Layout (one file per block format, one folder per ISA):
//! - [`ggml_type`]: the ggml type table (ids, block sizes) shared with the GGUF reader.
//! - [`dispatch`]: run-time ISA detection and the `POCKET_ISA` override.
//! - [`formats`]: the GGUF block formats, scalar: block structs, dequantize, reference
//!   quantize and the scalar dot products SIMD kernels are tested against.
//! - [`ops`]: RMSNorm, RoPE, softmax, activations, f16 conversion (scalar, AVX2, NEON).

pub mod dispatch;
pub mod formats;
pub mod ggml_type;
pub mod ops;

pub use dispatch::Isa;
pub use ggml_type::GgmlType;
