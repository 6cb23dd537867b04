//! pocket-model: reads GGUF models and runs them.
//!
//! The data path, top to bottom: GGUF bytes ([`gguf`]) → typed tensors → repacked weights
//! (pocket-kernels) → forward step → logits → sampler.

pub mod chat;
pub mod gguf;
pub mod sampler;
pub mod synth;
pub mod tokenizer;
