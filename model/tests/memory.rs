//! Resident memory after loading: repacked tensors must not stay resident twice.
//!
//! One test in its own binary, so no other test's mappings share the process. Linux only
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

#[test]
fn packed_tensors_and_embedding_lookups_leave_the_map_nonresident() {
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
