//! A loaded model (it owns its mapped file) and the options of a session over it.

use std::path::Path;
use std::sync::Arc;

use pocket_kernels::Isa;

use super::{exact, Result};
use crate::config::Config;
use crate::gguf::GgufFile;
use crate::kv_cache::KvType;
use crate::linear::Linear;
use crate::threadpool::Placement;
use crate::tokenizer::Tokenizer;
use crate::weights::{LoadOptions, Numerics, Weights};

pub struct Model {
    pub config: Config,
    pub weights: Weights,
    pub tokenizer: Tokenizer,
    pub isa: Isa,
    /// The arithmetic of the forward pass (see [`Numerics`]).
    pub numerics: Numerics,
    /// The mapped file: the zero-copy matrices and the embeddings read it; the model owns
    /// it (shared with those matrices), so it is unmapped when the model is dropped.
    pub(super) file: Arc<GgufFile>,
    /// Drop the token-embedding pages from the map after each lookup (see `forward`): set
    /// when those pages serve nothing else (the head is a packed copy or its own tensor).
    pub(super) release_embd: bool,
    /// The LoRA adapters a new session applies (`lora::attach`; a session may change its
    /// own with `Session::set_lora`). Empty: the base model.
    pub lora_default: crate::lora::LoraSet,
}

impl Model {
    /// Maps and loads a GGUF model.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_with(path, LoadOptions::default())
    }

    pub fn load_with(path: impl AsRef<Path>, o: LoadOptions) -> Result<Model> {
        Model::from_gguf(Arc::new(GgufFile::open(path)?), o)
    }

    /// The file the model was loaded from (metadata: chat template, tokenizer, ...).
    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }

    pub fn from_gguf(g: Arc<GgufFile>, mut o: LoadOptions) -> Result<Model> {
        let config = Config::from_gguf(&g)?;
        if o.numerics == Numerics::Ggml {
            // The twins read the GGUF blocks as they are.
            (o.pack, o.fuse) = (false, false);
        }
        let weights = if o.release_mapped {
            // The span a read can have mapped (whole page-cache folios, up to 2 MiB), not
            // just the tensor's pages: a tensor's read re-maps the released pages of the
            // tensor before it that share its folio (`Weights::load` reads in file order).
            Weights::load(&g, &config, o, &|bytes| {
                g.release_around(bytes, g.bytes());
            })?
        } else {
            Weights::load(&g, &config, o, &|_| {})?
        };
        if o.numerics == Numerics::Ggml {
            exact::check(&weights)?;
        }
        let tokenizer = Tokenizer::from_gguf(&g)?;
        let head_reads_embd = weights.tied && !matches!(weights.output, Linear::Packed(_));
        Ok(Model {
            config,
            weights,
            tokenizer,
            isa: Isa::active(),
            numerics: o.numerics,
            file: g,
            release_embd: o.release_mapped && !head_reads_embd,
            lora_default: Default::default(),
        })
    }
}

#[derive(Clone, Copy, Debug)]
pub struct SessionOptions {
    pub n_ctx: usize,
    pub n_threads: usize,
    /// KV cache element types of keys and values (llama.cpp's `-ctk` / `-ctv`).
    pub type_k: KvType,
    pub type_v: KvType,
    /// Pin pool threads to cores.
    pub pin: bool,
    /// CPU mask, strict pinning and spin-or-park policy of the pool (overrides `pin` when
    /// it sets a mask or strict placement).
    pub placement: Placement,
    /// Sequences the KV cache holds (`0..n_seq`), each with room for `n_ctx` tokens.
    pub n_seq: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 2048,
            n_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            type_k: KvType::F16,
            type_v: KvType::F16,
            pin: false,
            placement: Placement::default(),
            n_seq: 1,
        }
    }
}
