//! A `Model` owns its mapped file: it can be shared across threads (`Send + Sync`, one
//! model behind an `Arc`, a session per thread) and dropping it unmaps the file, so a
//! server that loads and unloads models does not accumulate maps. Linux only (reads
//! `/proc/self/maps`).

#![cfg(target_os = "linux")]

use std::sync::Arc;

use pocket_model::{Model, Session, SessionOptions};

mod common;

/// Mappings of `path` in this process.
fn maps_of(path: &std::path::Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let p = path.canonicalize().unwrap();
    maps.lines()
        .filter(|l| l.ends_with(p.to_str().unwrap()))
        .count()
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn a_model_is_shared_across_threads_and_unmapped_when_dropped() {
    assert_send_sync::<Model>();
    let path = common::fixture("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let before = maps_of(&path);
    for _ in 0..3 {
        let m = Arc::new(Model::load(&path).unwrap());
        assert!(
            maps_of(&path) > before,
            "the file is mapped while the model lives"
        );
        let prompt = m.tokenizer.encode("The capital of France is", true, false);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (m, prompt) = (m.clone(), prompt.clone());
                std::thread::spawn(move || {
                    let o = SessionOptions {
                        n_ctx: 64,
                        n_threads: 1,
                        ..Default::default()
                    };
                    let mut s = Session::new(&m, o);
                    let l = s.prefill(&prompt).unwrap();
                    l.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
                })
            })
            .collect();
        let out: Vec<Vec<u32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(out[0], out[1], "two threads, one model, the same logits");
        drop(m);
        assert_eq!(maps_of(&path), before, "dropping the model unmaps its file");
    }
}
