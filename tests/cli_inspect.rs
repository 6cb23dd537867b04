//! `pocket inspect` end to end: table and JSON output on a real model agree with the
//! reader, and bad files end in one `error:` line and exit status 1.

mod common;

use std::process::Command;

use pocket_model::gguf::GgufFile;

fn pocket(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(args)
        .output()
        .expect("run pocket")
}

#[test]
fn inspect_json_matches_the_file() {
    let path = common::smollm2();
    let out = pocket(&["inspect".as_ref(), path.as_os_str(), "--json".as_ref()]);
    common::assert_success(&out, "pocket inspect");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(doc["version"], 3);
    assert_eq!(doc["tensors"].as_array().unwrap().len(), g.tensors().len());
    assert_eq!(doc["metadata"]["general.architecture"], "llama");
    // Long arrays are summarised, not dumped.
    let toks = &doc["metadata"]["tokenizer.ggml.tokens"];
    assert_eq!(toks["len"], 49152);
    assert_eq!(toks["head"].as_array().unwrap().len(), 8);
    let params: u64 = g.tensors().iter().map(|t| t.n_elements()).sum();
    assert_eq!(doc["totals"]["parameters"].as_u64(), Some(params));
    let first = &doc["tensors"][0];
    assert_eq!(first["name"], "token_embd.weight");
    assert_eq!(first["type"], "q8_0");
    assert_eq!(first["dims"], serde_json::json!([576, 49152]));
    assert_eq!(first["offset"].as_u64(), Some(g.data_start()));
}

#[test]
fn inspect_table_lists_metadata_tensors_and_totals() {
    let out = pocket(&["inspect".as_ref(), common::gemma3().as_os_str()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "* metadata",
        "* tensors",
        "* totals",
        "gemma3.block_count",
        "q6_K",
        "q5_0",
        "bits per weight",
    ] {
        assert!(text.contains(needle), "missing {needle:?}");
    }
    assert!(
        text.contains("... 262"),
        "long vocabulary arrays are summarised"
    );
}

#[test]
fn inspect_bad_files_fail_with_one_clear_line() {
    let dir = std::env::temp_dir().join(format!("pocket-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = std::fs::read(common::smollm2()).unwrap();
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..1_000_000]).unwrap();
    let not = dir.join("not.gguf");
    std::fs::write(&not, b"hello world").unwrap();
    for (path, want) in [
        (&cut, "truncated"),
        (&not, "not a GGUF file"),
        (&dir.join("missing.gguf"), "cannot open"),
    ] {
        let out = pocket(&["inspect".as_ref(), path.as_os_str()]);
        assert_eq!(out.status.code(), Some(1), "{}", path.display());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("error: ") && err.contains(want), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let out = pocket(&["inspect".as_ref(), "--bogus".as_ref()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap reports bad flags with status 2"
    );
    std::fs::remove_dir_all(&dir).ok();
}
