//! pocket's GGUF reader against two independent readers, on every real GGUF we have (the
//! two fixture models and every `ggml-vocab-*.gguf` of the llama.cpp sdist):
//! - the `gguf` PyPI package (tests/oracle/gguf_dump.py): metadata (every value, arrays by
//!   hash), tensor names, types, dims, absolute offsets and sizes, alignment;
//! - the `gguf-rs-lib` crate: tensor names, types, dims, offsets, sizes and metadata.

mod common;

use std::io::Write;

use gguf_rs_lib::format::metadata::MetadataValue;
use pocket_model::gguf::{GgufFile, Value};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// The oracle's canonical text of a scalar (see gguf_dump.py).
fn canon(v: &Value<'_>) -> String {
    match v {
        Value::String(s) => s.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::F32(x) => (*x as f64).to_bits().to_string(),
        Value::F64(x) => x.to_bits().to_string(),
        Value::Array(_) => unreachable!("arrays are summarised"),
        other => other
            .as_i64()
            .map(|i| i.to_string())
            .or_else(|| other.as_u64().map(|u| u.to_string()))
            .unwrap(),
    }
}

fn check_against_python(path: &std::path::Path) {
    let g = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let out = common::run_oracle("gguf_dump.py", &[path.as_os_str()]);
    let want: Json = serde_json::from_str(&out).expect("oracle JSON");
    let name = path.display();

    assert_eq!(
        want["alignment"].as_u64(),
        Some(g.alignment()),
        "{name}: alignment"
    );
    let meta = want["metadata"].as_object().unwrap();
    assert_eq!(meta.len(), g.n_kv(), "{name}: metadata count");
    for (key, v) in g.metadata() {
        let w = &meta
            .get(key)
            .unwrap_or_else(|| panic!("{name}: oracle lacks key {key}"));
        match &v {
            Value::Array(a) => {
                assert_eq!(w["type"], "array", "{name}: {key} type");
                assert_eq!(w["len"].as_u64(), Some(a.len()), "{name}: {key} length");
                assert_eq!(
                    w["elem_type"],
                    a.elem_type().name(),
                    "{name}: {key} element type"
                );
                let mut h = Sha256::new();
                let mut head = Vec::new();
                for e in a.iter() {
                    let t = canon(&e);
                    if head.len() < 4 {
                        head.push(Json::String(t.clone()));
                    }
                    h.update((t.len() as u64).to_le_bytes());
                    h.update(t.as_bytes());
                }
                assert_eq!(Json::Array(head), w["head"], "{name}: {key} first elements");
                assert_eq!(
                    w["hash"].as_str(),
                    Some(format!("{:x}", h.finalize()).as_str()),
                    "{name}: {key} elements"
                );
            }
            _ => {
                assert_eq!(w["type"], v.value_type().name(), "{name}: {key} type");
                assert_eq!(
                    w["value"].as_str(),
                    Some(canon(&v).as_str()),
                    "{name}: {key} value"
                );
            }
        }
    }

    let tensors = want["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), g.tensors().len(), "{name}: tensor count");
    for (t, w) in g.tensors().iter().zip(tensors) {
        assert_eq!(w["name"], t.name.as_str(), "{name}: tensor order");
        assert_eq!(
            w["type_id"].as_u64(),
            Some(t.ggml_type.id() as u64),
            "{name}: {} type",
            t.name
        );
        assert_eq!(common::u64s(&w["dims"]), t.dims, "{name}: {} dims", t.name);
        assert_eq!(
            w["offset"].as_u64(),
            Some(g.data_start() + t.offset),
            "{name}: {} offset",
            t.name
        );
        assert_eq!(
            w["bytes"].as_u64(),
            Some(t.size),
            "{name}: {} bytes",
            t.name
        );
    }
}

#[test]
fn reader_agrees_with_the_gguf_python_package() {
    // The Python reader takes ~10 s of CPU per vocabulary file: use both cores.
    let files = common::all_real_ggufs();
    let (a, b) = files.split_at(files.len() / 2);
    std::thread::scope(|s| {
        let h = s.spawn(|| a.iter().for_each(|p| check_against_python(p)));
        b.iter().for_each(|p| check_against_python(p));
        h.join().expect("oracle thread");
    });
}

fn rs_lib_value_eq(ours: &Value<'_>, theirs: &MetadataValue) -> bool {
    match (ours, theirs) {
        (Value::U8(a), MetadataValue::U8(b)) => a == b,
        (Value::I8(a), MetadataValue::I8(b)) => a == b,
        (Value::U16(a), MetadataValue::U16(b)) => a == b,
        (Value::I16(a), MetadataValue::I16(b)) => a == b,
        (Value::U32(a), MetadataValue::U32(b)) => a == b,
        (Value::I32(a), MetadataValue::I32(b)) => a == b,
        (Value::U64(a), MetadataValue::U64(b)) => a == b,
        (Value::I64(a), MetadataValue::I64(b)) => a == b,
        (Value::F32(a), MetadataValue::F32(b)) => a.to_bits() == b.to_bits(),
        (Value::F64(a), MetadataValue::F64(b)) => a.to_bits() == b.to_bits(),
        (Value::Bool(a), MetadataValue::Bool(b)) => a == b,
        (Value::String(a), MetadataValue::String(b)) => a.as_ref() == b.as_str(),
        (Value::Array(a), MetadataValue::Array(b)) => {
            a.len() == b.length
                && a.len() as usize == b.values.len()
                && a.iter().zip(&b.values).all(|(x, y)| rs_lib_value_eq(&x, y))
        }
        _ => false,
    }
}

#[test]
fn reader_agrees_with_gguf_rs_lib() {
    let mut compared = Vec::new();
    let mut refused = Vec::new();
    for path in common::all_real_ggufs() {
        let ours = GgufFile::open(&path).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let theirs = match gguf_rs_lib::reader::GGUFFileReader::new(std::io::BufReader::new(file)) {
            Ok(r) => r,
            // gguf-rs-lib rejects some valid files (hyphenated keys, non-UTF-8 strings):
            // record them; the two models must be read by both.
            Err(e) => {
                refused.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let name = path.display();
        assert_eq!(
            theirs.tensor_data_offset(),
            ours.data_start(),
            "{name}: data offset"
        );
        assert_eq!(
            theirs.tensor_count(),
            ours.tensors().len(),
            "{name}: tensor count"
        );
        for t in ours.tensors() {
            let w = theirs
                .get_tensor_info(&t.name)
                .unwrap_or_else(|| panic!("{name}: gguf-rs-lib lacks {}", t.name));
            assert_eq!(
                w.tensor_type() as u32,
                t.ggml_type.id(),
                "{name}: {} type",
                t.name
            );
            assert_eq!(w.shape().dims(), &t.dims[..], "{name}: {} dims", t.name);
            assert_eq!(w.data_offset(), t.offset, "{name}: {} offset", t.name);
            assert_eq!(w.expected_data_size(), t.size, "{name}: {} size", t.name);
        }
        let meta = theirs.metadata();
        assert_eq!(meta.data.len(), ours.n_kv(), "{name}: metadata count");
        for (key, v) in ours.metadata() {
            let w = meta
                .get(key)
                .unwrap_or_else(|| panic!("{name}: gguf-rs-lib lacks {key}"));
            assert!(rs_lib_value_eq(&v, w), "{name}: {key} differs");
        }
        compared.push(path);
    }
    let mut log = std::io::stderr();
    writeln!(
        log,
        "gguf-rs-lib compared {} files; refused {}: {:#?}",
        compared.len(),
        refused.len(),
        refused
    )
    .ok();
    assert!(
        compared.contains(&common::smollm2()) && compared.contains(&common::gemma3()),
        "both models compared: {refused:?}"
    );
    assert!(
        compared.len() >= 10,
        "gguf-rs-lib read too few files to be an oracle: {refused:#?}"
    );
}
