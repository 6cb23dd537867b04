//! `pocket bench --roof`: decode set against the read bandwidth of the same moments.
//!
//! A shared host's bandwidth moves by ±15 % from one second to the next, so a probe run
//! once after the timed runs (the receipts' roof) sets decode against another moment's
//! bandwidth: 68-84 % of it on a busy host, 90-104 % in quiet moments, for the same
//! engine. Here every decode repetition is followed by a probe on the same number of
//! threads (one also runs before the first), and each repetition's decode bandwidth (the
//! bytes a token reads, llama-bench's `model_size`, times its tokens a second) is set
//! against the mean of the probes on either side of it.

use crate::bandwidth::ProbeBuffer;
use crate::bench_row::BenchRow;
use crate::engine::Test;
use crate::pocket_bench::{self, BenchOptions, Loaded};
use crate::Result;

/// Each decode repetition's bandwidth and the probes around the repetitions (GB/s).
#[derive(Debug, Clone, PartialEq)]
pub struct Roof {
    /// Bytes a token reads × tokens a second, per repetition.
    pub decode_gbs: Vec<f64>,
    /// One probe before the first repetition and one after each (`decode_gbs.len() + 1`).
    pub probe_gbs: Vec<f64>,
}

impl Roof {
    /// Repetition `i`'s decode bandwidth ÷ the mean of the probes before and after it.
    pub fn shares(&self) -> Vec<f64> {
        self.decode_gbs
            .iter()
            .zip(self.probe_gbs.windows(2))
            .map(|(d, p)| d / ((p[0] + p[1]) / 2.0))
            .collect()
    }

    /// `roof tg128 t2: decode 29.1 GB/s, probes around it 30.2 GB/s: 96.4 % (per
    /// repetition: median 96.0 %, 91.2 .. 99.8 %)`.
    pub fn line(&self, test: Test, threads: u32) -> String {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (decode, probe) = (mean(&self.decode_gbs), mean(&self.probe_gbs));
        let mut shares = self.shares();
        shares.sort_by(f64::total_cmp);
        let median = shares.get(shares.len() / 2).copied().unwrap_or(f64::NAN);
        let (lo, hi) = (
            shares.first().copied().unwrap_or(f64::NAN),
            shares.last().copied().unwrap_or(f64::NAN),
        );
        format!(
            "roof {test} t{threads}: decode {decode:.1} GB/s, probes around it {probe:.1} GB/s: {:.1} % (per repetition: median {:.1} %, {:.1} .. {:.1} %)",
            100.0 * decode / probe,
            100.0 * median,
            100.0 * lo,
            100.0 * hi
        )
    }

    /// The row's `roof` field in json/jsonl.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "decode_gbs": self.decode_gbs,
            "probe_gbs": self.probe_gbs,
            "shares": self.shares(),
        })
    }
}

/// Runs decode test `test` (`tgN`) `reps` times on `m` with `threads` threads, reading
/// `buf` with as many threads before the first repetition and after each.
pub fn measure(
    m: &Loaded,
    (test, threads, reps): (Test, u32, u32),
    o: &BenchOptions,
    buf: &ProbeBuffer,
) -> Result<(BenchRow, Roof)> {
    let per_token = m.info.model_size as f64 * test.n_gen as f64;
    let mut roof = Roof {
        decode_gbs: Vec::new(),
        probe_gbs: vec![buf.read_gbs(threads as usize)],
    };
    let measured = pocket_bench::measure_each(m, test, threads, reps, o, |ns| {
        roof.decode_gbs.push(per_token / ns as f64);
        roof.probe_gbs.push(buf.read_gbs(threads as usize));
    })?;
    Ok((measured.row, roof))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_repetition_is_set_against_the_probes_around_it() {
        let roof = Roof {
            decode_gbs: vec![27.0, 18.0],
            probe_gbs: vec![28.0, 32.0, 16.0],
        };
        assert_eq!(roof.shares(), vec![0.9, 0.75]);
        let line = roof.line(Test::tg(128), 2);
        assert!(
            line.starts_with("roof tg128 t2: decode 22.5 GB/s, probes around it 25.3 GB/s: 88.8 %"),
            "{line}"
        );
        assert!(
            line.ends_with("(per repetition: median 90.0 %, 75.0 .. 90.0 %)"),
            "{line}"
        );
    }
}
