//! `pocket bench --breakdown`: the engine's per-operation accounting
//! ([`pocket_model::Breakdown`]) of a bench's timed repetitions, as a table and as the
//! `breakdown` field of the json row.
//!
//! Shares are of the measured wall time of the timed repetitions (what t/s is computed
//! from); what the forward passes and the timed argmax do not cover (the bench's own loop)
//! shows as `unaccounted`. Matrix operations carry the GB/s of weights they read (decode:
//! each token reads every weight once) or their GOP/s (prefill), next to the machine's
//! measured read bandwidth.

use std::fmt::Write as _;

use pocket_model::profile::{Op, PhaseStats};
use pocket_model::Breakdown;
use serde::{Deserialize, Serialize};

/// One operation of one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRow {
    pub op: String,
    pub ms_per_token: f64,
    /// Fraction of the measured time of the test (all phases).
    pub share: f64,
    /// Weights read per second, 10^9 bytes (matrix operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_gbs: Option<f64>,
    /// 10^9 arithmetic operations (2 per multiply-add) per second (matrix operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gops: Option<f64>,
}

/// The operations of one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// `prefill` or `decode`.
    pub phase: String,
    pub tokens: u64,
    pub ms_per_token: f64,
    pub ops: Vec<OpRow>,
}

/// The breakdown of one bench row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Measured wall time of the timed repetitions, ms.
    pub total_ms: f64,
    /// Accounted time over measured time (1 when the operations cover the whole run).
    pub accounted_share: f64,
    /// The machine's read bandwidth for the bench's thread count, GB/s, when probed.
    #[serde(default)]
    pub read_bandwidth_gbs: Option<f64>,
    pub phases: Vec<Phase>,
}

fn phase(name: &str, p: &PhaseStats, total_ns: u64) -> Option<Phase> {
    if p.tokens == 0 {
        return None;
    }
    let tok = p.tokens as f64;
    let ops = Op::ALL
        .iter()
        .map(|&op| {
            let s = p.get(op);
            let secs = s.ns as f64 / 1e9;
            let rate = |v: u64| (op.is_matrix() && secs > 0.0).then(|| v as f64 / secs / 1e9);
            OpRow {
                op: op.name().to_string(),
                ms_per_token: s.ns as f64 / 1e6 / tok,
                share: s.ns as f64 / total_ns.max(1) as f64,
                weight_gbs: rate(s.weight_bytes),
                gops: rate(s.ops),
            }
        })
        .collect();
    Some(Phase {
        phase: name.to_string(),
        tokens: p.tokens,
        ms_per_token: p.total_ns() as f64 / 1e6 / tok,
        ops,
    })
}

impl Report {
    /// The report of `b` for a run measured at `total_ns`.
    pub fn new(b: &Breakdown, total_ns: u64, read_bandwidth_gbs: Option<f64>) -> Report {
        let accounted = b.prefill.total_ns() + b.decode.total_ns();
        Report {
            total_ms: total_ns as f64 / 1e6,
            accounted_share: accounted as f64 / total_ns.max(1) as f64,
            read_bandwidth_gbs,
            phases: [
                phase("prefill", &b.prefill, total_ns),
                phase("decode", &b.decode, total_ns),
            ]
            .into_iter()
            .flatten()
            .collect(),
        }
    }

    /// The operation `op` of `phase`, if present.
    pub fn op(&self, phase: &str, op: &str) -> Option<&OpRow> {
        self.phases
            .iter()
            .find(|p| p.phase == phase)?
            .ops
            .iter()
            .find(|o| o.op == op)
    }

    /// A markdown table per phase, headed by `title` (`model tg128 t2`).
    pub fn table(&self, title: &str) -> String {
        let mut out = String::new();
        let bw = self
            .read_bandwidth_gbs
            .map_or("not probed".into(), |g| format!("{g:.1} GB/s"));
        for p in &self.phases {
            let decode = p.phase == "decode";
            let _ = writeln!(
                out,
                "\n{title}: {} {} tokens, {:.3} ms/token; read bandwidth {bw}\n",
                p.phase, p.tokens, p.ms_per_token
            );
            let rate = if decode {
                "weights GB/s | of read bw"
            } else {
                "GOP/s | weights GB/s"
            };
            let _ = writeln!(out, "| operation | ms/token | share | {rate} |");
            let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: |");
            for o in &p.ops {
                let (a, b) = if decode {
                    (
                        o.weight_gbs.map(|g| format!("{g:.1}")),
                        o.weight_gbs
                            .zip(self.read_bandwidth_gbs)
                            .map(|(g, r)| format!("{:.0} %", 100.0 * g / r)),
                    )
                } else {
                    (
                        o.gops.map(|g| format!("{g:.1}")),
                        o.weight_gbs.map(|g| format!("{g:.1}")),
                    )
                };
                let _ = writeln!(
                    out,
                    "| {} | {:.4} | {:.1} % | {} | {} |",
                    label(&o.op),
                    o.ms_per_token,
                    100.0 * o.share,
                    a.unwrap_or_default(),
                    b.unwrap_or_default()
                );
            }
        }
        let _ = writeln!(
            out,
            "\naccounted {:.1} % of {:.1} ms measured (the rest: the bench's own loop)",
            100.0 * self.accounted_share,
            self.total_ms
        );
        out
    }
}

/// The table's name for an operation.
pub fn label(op: &str) -> &str {
    match op {
        "act_quant" => "activation quantization",
        "qkv" => "QKV (fused)",
        "attention" => "attention",
        "out_proj" => "output projection",
        "gate_up" => "gate/up + SiLU (fused)",
        "down" => "down projection",
        "norm_rope" => "norms, RoPE, residual, KV write",
        "head" => "output head",
        "sampling" => "sampling (greedy argmax)",
        "other" => "embedding, other",
        o => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_rates() {
        let mut b = Breakdown::default();
        b.begin(1);
        b.matrix(Op::Down, 1_000_000, 10, 10, 1);
        b.add(Op::Down, 1_000_000); // 1 ms
        b.add(Op::Attention, 1_000_000);
        let r = Report::new(&b, 2_000_000, Some(10.0));
        assert!((r.accounted_share - 1.0).abs() < 1e-9);
        let d = r.op("decode", "down").unwrap();
        assert!((d.share - 0.5).abs() < 1e-9);
        assert!((d.weight_gbs.unwrap() - 1.0).abs() < 1e-9); // 1 MB in 1 ms
        assert!(r.op("decode", "attention").unwrap().weight_gbs.is_none());
        assert!(r.op("prefill", "down").is_none());
        assert!(r
            .table("x tg1")
            .contains("| down projection | 1.0000 | 50.0 % | 1.0 | 10 % |"));
    }
}
