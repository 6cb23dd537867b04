//! Resident memory after loading: repacked tensors must not stay resident twice.
//!
//! Tests in their own binary, one at a time, so no other test's mappings share the process. Linux only
//! (reads `/proc/self/status`).

#![cfg(target_os = "linux")]

use pocket_model::{LoadOptions, Model, Session, SessionOptions};

mod common;

/// `RssFile` of this process in bytes: resident pages of file mappings.
fn rss_file() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The tests measure the whole process's RSS: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn packed_tensors_and_embedding_lookups_leave_the_map_nonresident() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = common::fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let file_len = std::fs::metadata(&path).unwrap().len();
    let tokens: Vec<u32> = (0..256u32).map(|i| (i * 7919) % 49_000).collect();

    let resident = |release_mapped: bool| {
        let o = LoadOptions {
            release_mapped,
            ..Default::default()
        };
        let before = rss_file();
        let model = Model::load_with(&path, o).unwrap();
        let mut s = Session::new(
            &model,
            SessionOptions {
                n_ctx: 300,
                n_threads: 1,
                ..Default::default()
            },
        );
        s.prefill(&tokens).unwrap();
        // (`Model::load_with` leaks its map by design: it lives for the process.)
        rss_file().saturating_sub(before)
    };
    let released = resident(true);
    let kept = resident(false);
    // Every matrix of this file is packed (tied head included), so with release on only
    // the small f32 vectors' pages and the metadata stay mapped.
    assert!(
        released < file_len / 8,
        "{released} bytes of the {file_len}-byte file stayed resident"
    );
    // The check can fail: without release the packed tensors' source pages stay resident.
    assert!(
        kept > file_len / 2,
        "without release only {kept} bytes resident"
    );
}

/// The load's peak on an MNN-Pocket-shaped file (8 of its 28 layers) whose page cache
/// holds large folios, as after a cold read: dropped with `dd iflag=nocache count=0`
/// (`posix_fadvise(DONTNEED)` on the whole file), then read back through readahead.
#[test]
fn loading_peaks_at_the_packed_copy_when_the_page_cache_holds_large_folios() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use pocket_model::gguf::GgufFile;
    use pocket_model::synth::{self, BaseVocab, SynthType};

    let vocab = common::fixture("llama.cpp/models/ggml-vocab-qwen2.gguf");
    let base = BaseVocab::from_gguf(&GgufFile::open(&vocab).unwrap()).unwrap();
    let mut p = synth::preset("mnn-pocket-0.3b").unwrap();
    p.shape.layers = 8;
    let mut bytes = Vec::new();
    synth::synthesize(&p, SynthType::Q4_1, 1, &base, &mut bytes, &mut |_, _| {}).unwrap();
    let path = std::env::temp_dir().join(format!("pocket-memory-{}.gguf", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    drop(bytes);
    let dropped = std::process::Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .unwrap();
    assert!(dropped.success(), "dd iflag=nocache failed");
    drop(std::fs::read(&path).unwrap()); // readahead: large folios where the fs has them

    let model = Model::load_with(&path, LoadOptions::default()).unwrap();
    let mapped = model.gguf().resident_bytes().unwrap() as u64;
    std::fs::remove_file(&path).unwrap();
    let mib = |b: u64| b as f64 / 1048576.0;
    eprintln!(
        "MNN-Pocket shape, 8 layers: {:.1} MiB of the map resident after the load (packed {:.1} MiB)",
        mib(mapped),
        mib(model.weights.packed_bytes() as u64)
    );
    // Every matrix is packed and its pages released; what stays mapped is the metadata and
    // the norms (~1 MiB). A read maps whole page-cache folios (up to 2 MiB): with the
    // layers' norms read after their matrices and exact-page releases, each layer left
    // ~2 MiB of released tensors mapped again (57 MiB on the 28-layer file, 22 MiB here).
    assert!(
        mapped < 4 << 20,
        "{:.1} MiB of the map stayed resident after the load",
        mib(mapped)
    );
}
