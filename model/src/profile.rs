//! Per-operation accounting of the forward pass (`pocket bench --breakdown`).
//!
//! A [`Breakdown`] lives on a [`crate::Session`] when asked for
//! ([`crate::Session::set_breakdown`]); without it the forward pass pays one branch per
//! operation boundary. With it, each boundary reads the clock once on the calling thread
//! (which the pool's barrier has already synchronized with the workers: a `run` returns
//! only when every share is done) and charges the time since the previous boundary to the
//! operation that just ended, so the operations tile the forward call without gaps: their
//! sum is the forward pass's wall time. Matrix operations also count the bytes of weights
//! they read (the packed matrix's size) and their arithmetic (2 · rows · cols · tokens).

use std::time::Instant;

/// The kinds of operation the forward pass is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Quantizing a layer input for the matrices that read it (q8_0/q8_1/q8_K forms).
    ActQuant,
    /// Q, K, V projections (one fused matrix when packed), with the split into q/k/v.
    Qkv,
    /// Grouped-query attention over the KV cache.
    Attention,
    /// Attention output projection (`wo`).
    OutProj,
    /// Gate and up projections (fused with SiLU when packed) and the activation.
    GateUp,
    /// FFN down projection.
    Down,
    /// RMSNorms, q/k head norms, RoPE, biases, the KV-cache write and residual adds.
    NormRope,
    /// Final norm and the LM head (and softcap).
    Head,
    /// Picking the next token from the logits (timed by the caller; `pocket bench` times a
    /// greedy argmax per generated token).
    Sampling,
    /// Embedding lookup and what is left.
    Other,
}

impl Op {
    pub const ALL: [Op; 10] = [
        Op::ActQuant,
        Op::Qkv,
        Op::Attention,
        Op::OutProj,
        Op::GateUp,
        Op::Down,
        Op::NormRope,
        Op::Head,
        Op::Sampling,
        Op::Other,
    ];

    /// A short stable name (json keys, table rows).
    pub fn name(self) -> &'static str {
        match self {
            Op::ActQuant => "act_quant",
            Op::Qkv => "qkv",
            Op::Attention => "attention",
            Op::OutProj => "out_proj",
            Op::GateUp => "gate_up",
            Op::Down => "down",
            Op::NormRope => "norm_rope",
            Op::Head => "head",
            Op::Sampling => "sampling",
            Op::Other => "other",
        }
    }

    /// Whether the operation is a weight matrix times the activations.
    pub fn is_matrix(self) -> bool {
        matches!(
            self,
            Op::Qkv | Op::OutProj | Op::GateUp | Op::Down | Op::Head
        )
    }
}

/// What one operation cost over a phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpStat {
    pub ns: u64,
    /// Bytes of weights read (matrix operations).
    pub weight_bytes: u64,
    /// Multiply-adds × 2 (matrix operations).
    pub ops: u64,
}

/// The operations of one phase: prefill (batches) or decode (single tokens).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PhaseStats {
    /// Tokens evaluated (batch rows for prefill, decode calls for decode).
    pub tokens: u64,
    /// Forward calls.
    pub calls: u64,
    pub ops: [OpStat; Op::ALL.len()],
}

impl PhaseStats {
    pub fn get(&self, op: Op) -> &OpStat {
        &self.ops[op as usize]
    }
    /// Nanoseconds over every operation.
    pub fn total_ns(&self) -> u64 {
        self.ops.iter().map(|s| s.ns).sum()
    }
}

/// Per-operation time of a session, kept apart for prefill and decode.
#[derive(Clone, Debug)]
pub struct Breakdown {
    pub prefill: PhaseStats,
    pub decode: PhaseStats,
    last: Instant,
    decoding: bool,
}

impl Default for Breakdown {
    fn default() -> Self {
        Breakdown {
            prefill: PhaseStats::default(),
            decode: PhaseStats::default(),
            last: Instant::now(),
            decoding: false,
        }
    }
}

impl Breakdown {
    /// Forgets everything counted so far.
    pub fn reset(&mut self) {
        *self = Breakdown::default();
    }

    fn phase(&mut self) -> &mut PhaseStats {
        if self.decoding {
            &mut self.decode
        } else {
            &mut self.prefill
        }
    }

    /// A forward call of `tokens` rows starts now.
    #[inline]
    pub fn begin(&mut self, tokens: usize) {
        self.decoding = tokens == 1;
        let p = self.phase();
        p.tokens += tokens as u64;
        p.calls += 1;
        self.last = Instant::now();
    }

    /// `op` ended now: charges it the time since the previous boundary.
    #[inline]
    pub fn mark(&mut self, op: Op) {
        let now = Instant::now();
        let ns = now.duration_since(self.last).as_nanos() as u64;
        self.last = now;
        self.phase().ops[op as usize].ns += ns;
    }

    /// Counts a matrix product on `tokens` rows reading `weight_bytes` of weights with
    /// `rows × cols` multiply-adds per token.
    #[inline]
    pub fn matrix(&mut self, op: Op, weight_bytes: usize, rows: usize, cols: usize, tokens: usize) {
        let s = &mut self.phase().ops[op as usize];
        s.weight_bytes += weight_bytes as u64;
        s.ops += 2 * (rows * cols * tokens) as u64;
    }

    /// Adds time measured outside the forward pass (sampling) to the phase of the last call.
    pub fn add(&mut self, op: Op, ns: u64) {
        self.phase().ops[op as usize].ns += ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_tile_the_call_and_phases_are_apart() {
        let mut b = Breakdown::default();
        b.begin(4);
        std::thread::sleep(std::time::Duration::from_millis(2));
        b.mark(Op::Qkv);
        b.matrix(Op::Qkv, 100, 8, 16, 4);
        b.mark(Op::Attention);
        b.begin(1);
        b.mark(Op::Down);
        b.add(Op::Sampling, 5);
        assert_eq!((b.prefill.tokens, b.decode.tokens), (4, 1));
        assert!(b.prefill.get(Op::Qkv).ns >= 2_000_000);
        assert_eq!(b.prefill.get(Op::Qkv).ops, 2 * 8 * 16 * 4);
        assert_eq!(b.prefill.get(Op::Qkv).weight_bytes, 100);
        assert_eq!(b.decode.get(Op::Sampling).ns, 5);
        assert_eq!(b.decode.get(Op::Qkv).ns, 0);
        b.reset();
        assert_eq!(b.prefill.total_ns() + b.decode.total_ns(), 0);
    }
}
