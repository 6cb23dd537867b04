//! The work split does not change a single bit (issue #19): the logits of a prompt and of
//! the decode steps after it are the same with 1, 2 and 3 threads, and with 2 threads while
//! a busy loop shares the worker's core, so that the worker is preempted at arbitrary
//! points and the caller takes over its items (claiming and stealing in the pool,
//! `model/src/threadpool/claims.rs`). Every item is a fixed block of output panels, tokens
//! or attention heads, computed by the same arithmetic whichever thread takes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pocket_model::sample_basic::argmax;
use pocket_model::{LoadOptions, Model, Numerics, Session, SessionOptions};

mod common;
use common::fixture;

const PROMPT: &str = "Once upon a time, in a small village at the edge of a dark forest, there \
    lived an old clockmaker who had never once been late for anything in his long life.";
const STEPS: usize = 6;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every prompt row's logits and `STEPS` greedy decode steps', with `threads` threads.
fn run(m: &Model, prompt: &[u32], threads: usize) -> Vec<Vec<u32>> {
    let mut s = Session::new(
        m,
        SessionOptions {
            n_ctx: 256,
            n_threads: threads,
            pin: true,
            ..Default::default()
        },
    );
    s.logits_all = true;
    let v = m.config.n_vocab;
    let all = s.prefill(prompt).unwrap().to_vec();
    let mut rows: Vec<Vec<u32>> = all.chunks_exact(v).map(bits).collect();
    let mut next = argmax(&all[all.len() - v..]);
    for _ in 0..STEPS {
        let l = s.decode(next).unwrap();
        rows.push(bits(l));
        next = argmax(l);
    }
    rows
}

/// A thread spinning on `cpu` until dropped (the stalled worker's competitor).
struct Busy(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Busy {
    fn on(cpu: usize) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let h = std::thread::spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        Busy(stop, Some(h))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            let _ = h.join();
        }
    }
}

fn check(name: &str, numerics: Numerics) {
    let o = LoadOptions {
        numerics,
        ..Default::default()
    };
    let m = Model::load_with(fixture(&format!("models/{name}")), o).unwrap();
    let prompt = m.tokenizer.encode(PROMPT, true, false);
    let one = run(&m, &prompt, 1);
    for threads in [2, 3] {
        assert!(
            run(&m, &prompt, threads) == one,
            "{name} {numerics:?}: {threads} threads differ from 1"
        );
    }
    let cores = pocket_model::threadpool::process_cores();
    if cores.len() < 2 {
        eprintln!("SKIPPED the busy-core part: this machine has one core");
        return;
    }
    // The pool pins its worker to the second core; the busy loop shares that core.
    let busy = Busy::on(cores[1].id);
    let contended = run(&m, &prompt, 2);
    drop(busy);
    assert!(
        contended == one,
        "{name} {numerics:?}: a busy core changed the logits"
    );
}

#[test]
fn smollm2_logits_do_not_depend_on_threads_or_a_busy_core() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf", Numerics::Fast);
    check("SmolLM2-135M-Instruct.Q4_1.gguf", Numerics::Ggml);
}

#[test]
fn gemma3_logits_do_not_depend_on_threads_or_a_busy_core() {
    check("gemma-3-270m-q4_k_m.gguf", Numerics::Fast);
}
