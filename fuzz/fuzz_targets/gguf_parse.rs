//! Any bytes into the GGUF reader: it must return Ok or a typed error, never panic, hang,
//! read out of bounds or allocate without bound. On success, every accessor is exercised
//! (all metadata decoded, arrays iterated, every tensor's bytes borrowed).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pocket_model::gguf::{Gguf, Value};

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = Gguf::parse(data) {
        for (_, v) in g.metadata() {
            if let Value::Array(a) = &v {
                let _ = a.iter().count();
                let _ = a.get(a.len().saturating_sub(1));
                let _ = a.to_f32_vec();
            }
            let _ = v.to_string();
        }
        for t in g.tensors() {
            let d = g.tensor_data(t);
            assert_eq!(d.len() as u64, t.size);
        }
    }
});
