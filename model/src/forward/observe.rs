//! The forward pass's one observer hook: each step of the layer walker reports
//! `(operation, tensor name, layer, values)` here once, and the observer turns that into
//! the per-operation time breakdown ([`Breakdown`], `pocket bench --breakdown`) and, with
//! `POCKET_TRACE_DIR`, into tensor dumps. Without either, a report costs one branch.

use std::path::PathBuf;

use crate::linear::Linear;
use crate::profile::{Breakdown, Op};

pub(super) struct Observer<'p> {
    prof: Option<&'p mut Breakdown>,
    /// `POCKET_TRACE_DIR=DIR`: each reported tensor is written as raw f32 to
    /// `DIR/<name>-<layer>.bin`, named as llama.cpp's graph names it, so a run can be
    /// compared op by op with the tensors `tests/oracle/dump_logits.cpp` writes under
    /// `DUMP_TENSORS` (same names).
    trace_dir: Option<PathBuf>,
}

impl<'p> Observer<'p> {
    /// Starts a forward call of `tokens` rows.
    pub fn new(mut prof: Option<&'p mut Breakdown>, tokens: usize) -> Observer<'p> {
        if let Some(p) = prof.as_deref_mut() {
            p.begin(tokens);
        }
        let trace_dir = std::env::var_os("POCKET_TRACE_DIR").map(PathBuf::from);
        Observer { prof, trace_dir }
    }

    /// The time since the last report goes to `op`.
    #[inline]
    pub fn mark(&mut self, op: Op) {
        if let Some(p) = &mut self.prof {
            p.mark(op);
        }
    }

    /// Step `op` is done and produced tensor `name` of layer `l`.
    #[inline]
    pub fn step(&mut self, op: Op, name: &str, l: usize, x: &[f32]) {
        self.mark(op);
        if self.trace_dir.is_some() {
            self.trace(name, l, x);
        }
    }

    /// Counts the weights and arithmetic of `lins` on `tokens` rows.
    #[inline]
    pub fn matrix(&mut self, op: Op, lins: &[&Linear], tokens: usize) {
        if let Some(p) = &mut self.prof {
            for l in lins {
                p.matrix(op, l.weight_bytes(), l.macs(), 1, tokens);
            }
        }
    }

    #[cold]
    fn trace(&self, name: &str, l: usize, x: &[f32]) {
        let Some(dir) = &self.trace_dir else { return };
        let path = dir.join(format!("{name}-{l}.bin"));
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        if let Err(e) = std::fs::write(&path, bytes) {
            eprintln!("trace: cannot write {}: {e}", path.display());
        }
    }
}
