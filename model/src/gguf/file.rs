//! Opening a GGUF file from disk as a read-only memory map: the tensor data is never
//! copied; the kernels read it (or repack it) straight from the page cache.

use std::fs::File;
use std::path::Path;

use memmap2::{Mmap, UncheckedAdvice};

use super::error::{GgufError, Result};
use super::reader::Gguf;

/// A GGUF file mapped into memory.
pub type GgufFile = Gguf<Mmap>;

/// The largest span of the file one fault through the map can make resident: a PMD-sized
/// (2 MiB) page-cache folio, which Linux 6.x maps whole for a read of any byte of it.
pub const FOLIO_SPAN: usize = 2 << 20;

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
    /// [`Self::release_pages`] of the span a read of `bytes` (a sub-slice of `within`, itself
    /// a sub-slice of the map) can have mapped: `bytes` widened to whole [`FOLIO_SPAN`]s of
    /// the file, clamped to `within`. A read through the map faults in whole page-cache
    /// folios (up to 2 MiB on Linux with large folios, and the fault-around window around
    /// them), not just the pages it reads.
    pub fn release_around(&self, bytes: &[u8], within: &[u8]) -> usize {
        let (base, w0) = (self.backing().as_ptr() as usize, within.as_ptr() as usize);
        let (b0, b1) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        if bytes.is_empty() || b0 < w0 || b1 > w0 + within.len() || w0 < base {
            return 0;
        }
        // File offsets: the map starts at offset 0, so folio boundaries are multiples of
        // FOLIO_SPAN from `base`.
        let lo = ((b0 - base) / FOLIO_SPAN * FOLIO_SPAN).max(w0 - base);
        let hi = ((b1 - base).div_ceil(FOLIO_SPAN) * FOLIO_SPAN).min(w0 - base + within.len());
        self.release_pages(&within[lo - (w0 - base)..hi - (w0 - base)])
    }

    /// Resident bytes of this file's mapping in this process (its `/proc/self/smaps`
    /// `Rss`; unaffected by other mappings), or `None` where that is not readable (not
    /// Linux). For tests and diagnostics of the releases above.
    pub fn resident_bytes(&self) -> Option<usize> {
        let base = self.backing().as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut ours = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
                // A mapping's header line: `start-end perms ...`, in hex.
                let range =
                    usize::from_str_radix(lo, 16).ok()?..usize::from_str_radix(hi, 16).ok()?;
                ours = range.contains(&base);
            } else if ours && first == "Rss:" {
                let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
                return Some(kb * 1024);
            }
        }
        None
    }

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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;
    use pocket_kernels::GgmlType;

    #[test]
    fn release_around_drops_the_folio_span_of_a_read_clamped_to_its_table() {
        // A 12 MiB table, so a read in its middle has whole 2 MiB spans on both sides.
        let len = 12 << 20;
        let mut w = GgufWriter::new();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        w.tensor("t", GgmlType::I8, &[len as u64], data).unwrap();
        let name = format!("pocket-release-{}.gguf", std::process::id());
        let path = std::env::temp_dir().join(&name);
        std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
        let g = GgufFile::open(&path).unwrap();
        let (_, table) = g.tensor("t").unwrap();
        let off = table.as_ptr() as usize - g.backing().as_ptr() as usize; // file offset
        let before = g.resident_bytes().unwrap();

        // A row in the middle: the whole 2 MiB span (in file offsets) around it.
        let at = 5 << 20;
        let row = &table[at..at + 1000];
        assert!(row.iter().map(|&b| b as u64).sum::<u64>() > 0);
        let read = g.resident_bytes().unwrap();
        assert!(read > before, "the read mapped pages ({before} -> {read})");
        let span_lo = (off + at) / FOLIO_SPAN * FOLIO_SPAN;
        let span_hi = (off + at + 1000).div_ceil(FOLIO_SPAN) * FOLIO_SPAN;
        assert_eq!(g.release_around(row, table), span_hi - span_lo);
        assert_eq!(
            g.resident_bytes().unwrap(),
            before,
            "every page the read mapped is released"
        );

        // At the table's start the span is clamped to the table (the header's pages stay).
        let first = &table[..10];
        let page = page_size();
        let hi = (off + 10).div_ceil(FOLIO_SPAN) * FOLIO_SPAN;
        let want = (hi / page * page).saturating_sub(off.div_ceil(page) * page);
        assert_eq!(g.release_around(first, table), want);
        // Empty, or bytes outside `within`: nothing.
        assert_eq!(g.release_around(&table[..0], table), 0);
        assert_eq!(g.release_around(table, &table[1..]), 0);
        drop(g);
        std::fs::remove_file(&path).unwrap();
    }
}
