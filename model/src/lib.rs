//! pocket-model: reads GGUF models and runs them.
//!
//! The data path, top to bottom: GGUF bytes ([`gguf`]) → hyper-parameters ([`config`]) →
//! checked tensors ([`weights`]; matrices as [`linear::Linear`], repacked by
//! pocket-kernels or zero-copy) → forward pass ([`forward`]: [`attention`] over the
//! [`kv_cache`], element-wise ops from `pocket_kernels::ops`, split across the [`threadpool`]) →
//! logits → sampler ([`sample_basic`]).

pub mod attention;
pub mod batch;
pub mod chat;
pub mod config;
pub mod decision;
pub mod forward;
pub mod generate;
pub mod gguf;
pub mod grammar;
pub mod hellaswag;
pub mod kld;
pub mod kv_cache;
pub mod linear;
pub mod logit_dump;
pub mod logprobs;
pub mod lora;
pub mod perplexity;
pub mod profile;
pub mod sample_basic;
pub mod sampler;
pub mod score;
pub mod speculative;
pub mod synth;
pub mod threadpool;
pub mod tokenizer;
pub mod weights;

pub use batch::{Batch, BatchRow, SeqId};
pub use config::{Arch, Config};
pub use forward::{GgmlUnsupported, Model, ModelError, Session, SessionOptions};
pub use kv_cache::{KvType, KvTypeError};
pub use profile::{Breakdown, Op};
pub use threadpool::{ClassError, CoreClasses, CpuClass, MaskError, Placement};
pub use weights::{LoadOptions, Numerics};
