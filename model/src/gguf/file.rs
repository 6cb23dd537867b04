//! Opening a GGUF file from disk as a read-only memory map: the tensor data is never
//! copied; the kernels read it (or repack it) straight from the page cache.

use std::fs::File;
use std::path::Path;

use memmap2::{Mmap, UncheckedAdvice};

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

    /// Drops this process's mapping of the whole pages inside `bytes` (a sub-slice of the
    /// map, e.g. a tensor that was just repacked into an owned copy), so they no longer
    /// count in the resident set; the page cache keeps them and a later read of the same
    /// bytes faults them back in unchanged. Bytes outside the map, partial pages at either
    /// end and platforms without `madvise` are left alone. Returns the bytes released.
    ///
    /// Why: a repacked matrix would otherwise stay resident twice (mapped + packed), which
    /// is what makes llama.cpp's repacking builds' peak RSS ~2x the file size.
    pub fn release_pages(&self, bytes: &[u8]) -> usize {
        let map = self.backing();
        let base = map.as_ptr() as usize;
        let (start, end) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        if bytes.is_empty() || start < base || end > base + map.len() {
            return 0;
        }
        let page = page_size();
        // The map itself is page-aligned, so offsets rounded inward are whole pages.
        let lo = (start - base).div_ceil(page) * page;
        let hi = (end - base) / page * page;
        if hi <= lo {
            return 0;
        }
        // SAFETY: `Mmap` is a read-only private file mapping; MADV_DONTNEED on it only
        // discards this process's page-table entries, and the next access re-reads the
        // same file bytes (the file is not modified while mapped: see `open`). No `&mut`
        // into the map exists and no slice is invalidated: contents stay identical.
        match unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, lo, hi - lo) } {
            Ok(()) => hi - lo,
            Err(_) => 0,
        }
    }
}

fn page_size() -> usize {
    // 4 KiB on x86-64; aarch64 kernels use 4, 16 (Apple) or 64 KiB pages. A larger guess
    // only releases fewer bytes (rounding is inward), never the wrong ones.
    if cfg!(target_arch = "x86_64") {
        4 << 10
    } else {
        64 << 10
    }
}

/// A tensor's bytes inside a mapped file shared by reference count: cheap to clone,
/// derefs to the bytes, and keeps the map alive, so a model owns its file instead of
/// borrowing it (no leaked maps, a model can be loaded, shared across threads and dropped).
#[derive(Clone)]
pub struct TensorBytes {
    file: std::sync::Arc<GgufFile>,
    start: usize,
    len: usize,
}

impl TensorBytes {
    /// The bytes of tensor `name` (an error if the file has no such tensor).
    pub fn of(file: &std::sync::Arc<GgufFile>, name: &str) -> Result<TensorBytes> {
        let (info, bytes) = file.tensor(name)?;
        let start = (file.data_start() + info.offset) as usize;
        // `tensor` bounds-checked the range (an empty slice if it was out of range).
        Ok(TensorBytes {
            file: file.clone(),
            start,
            len: bytes.len(),
        })
    }

    /// The file these bytes are in.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}

impl std::ops::Deref for TensorBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.file.bytes()[self.start..self.start + self.len]
    }
}
