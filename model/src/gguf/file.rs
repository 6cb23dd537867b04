//! Opening a GGUF file from disk as a read-only memory map: the tensor data is never
//! copied; the kernels read it (or repack it) straight from the page cache.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use super::error::{GgufError, Result};
use super::reader::Gguf;

/// A GGUF file mapped into memory.
pub type GgufFile = Gguf<Mmap>;

impl Gguf<Mmap> {
    /// Maps `path` read-only and parses its header.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process. The one hazard of a
        // file map is another process truncating or rewriting the file while it is mapped
        // (reads could then fault or see new bytes); like llama.cpp, pocket accepts that for
        // model files, which are not modified while being run.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Gguf::parse(map)
    }
}
