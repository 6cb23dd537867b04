//! The statistics of a KL-divergence run, operation for operation as llama.cpp's
//! `kl_divergence` computes and prints them.

use super::{sum_exp, BaseRow};

/// The running sums of llama.cpp's `kl_divergence_result`, and every row's KLD and Δp for
/// the percentiles.
#[derive(Default, Debug, Clone)]
pub struct KldStats {
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    max_p_diff: f32,
    n_same_top: usize,
    count: usize,
    kld_values: Vec<f32>,
    p_diff_values: Vec<f32>,
}

impl KldStats {
    /// One row: this model's `logits`, the base's stored row, the token that follows.
    /// (llama.cpp's `log_softmax(n_vocab, logits, base_log_prob, tok, kld)`.)
    pub fn add_row(&mut self, logits: &[f32], base: &[u16], target: usize) {
        let base = BaseRow::parse(base);
        let mut max_logit = logits[0];
        let mut imax = 0;
        for (i, &l) in logits.iter().enumerate().skip(1) {
            if l > max_logit {
                max_logit = l;
                imax = i;
            }
        }
        let log_sum_exp = sum_exp(logits, max_logit).ln() as f32;
        let nll = max_logit + log_sum_exp - logits[target];
        self.sum_nll += nll as f64;
        self.sum_nll2 += (nll * nll) as f64;
        let nll_base = -base.log_p(target);
        self.sum_nll_base += nll_base as f64;
        self.sum_nll_base2 += (nll_base * nll_base) as f64;
        self.sum_nll_nll_base += (nll * nll_base) as f64;

        max_logit += log_sum_exp;
        let mut sum = 0f64;
        let (mut imax_base, mut p_log_base_max) = (0usize, 0f32);
        for (i, &l) in logits.iter().enumerate() {
            let p_log_base = base.log_p(i);
            if i == 0 || p_log_base > p_log_base_max {
                p_log_base_max = p_log_base;
                imax_base = i;
            }
            if p_log_base > -16.0 {
                let p_base = p_log_base.exp();
                sum += (p_base * (p_log_base - l + max_logit)) as f64;
            }
        }
        self.sum_kld += sum;
        self.sum_kld2 += sum * sum;
        self.count += 1;
        self.n_same_top += usize::from(imax == imax_base);

        let p_diff = (-nll).exp() - (-nll_base).exp();
        self.sum_p_diff += p_diff as f64;
        let p_diff2 = (p_diff * p_diff) as f64;
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.kld_values.push(sum as f32);
        self.p_diff_values.push(p_diff);
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// The figures llama.cpp prints, from the rows so far.
    pub fn summary(&self) -> KldSummary {
        let n = self.count;
        let log_ppl = mean_and_uncertainty(self.sum_nll, self.sum_nll2, n);
        let log_ppl_base = mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = covariance(self.sum_nll, self.sum_nll_base, self.sum_nll_nll_base, n);
        let ppl = log_ppl.0.exp();
        let ppl_base = log_ppl_base.0.exp();
        let p_diff_mse = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, n);
        let rms = p_diff_mse.0.sqrt();
        let same_top = if n > 0 {
            self.n_same_top as f64 / n as f64
        } else {
            0.0
        };
        let mut kld = self.kld_values.clone();
        kld.sort_by(f32::total_cmp);
        let mut dp = self.p_diff_values.clone();
        dp.sort_by(f32::total_cmp);
        KldSummary {
            count: n,
            ppl: (ppl, ppl * log_ppl.1),
            ppl_base: (ppl_base, ppl_base * log_ppl_base.1),
            cor_ln_ppl: cov / (log_ppl.1 * log_ppl_base.1),
            ln_ppl_ratio: (
                log_ppl.0 - log_ppl_base.0,
                (log_ppl.1 * log_ppl.1 + log_ppl_base.1 * log_ppl_base.1 - 2.0 * cov).sqrt(),
            ),
            kld: mean_and_uncertainty(self.sum_kld, self.sum_kld2, n),
            kld_sorted: kld,
            p_diff: mean_and_uncertainty(self.sum_p_diff, self.sum_p_diff2, n),
            p_diff_sorted: dp,
            p_diff_rms: (rms, 0.5 / rms * p_diff_mse.1),
            same_top: (
                same_top,
                (same_top * (1.0 - same_top) / (n as f64 - 1.0)).sqrt(),
            ),
            ppl_cov: ppl * ppl_base * cov,
        }
    }
}

fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let f = sum / count as f64;
    let df = sum2 / count as f64 - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (count as f64 - 1.0)).sqrt()
    } else {
        0.0
    };
    (f, df)
}

fn covariance(a: f64, b: f64, ab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (ab / n - (a / n) * (b / n)) / (n - 1.0)
}

/// llama.cpp's percentile: linear between the two nearest sorted values.
fn percentile(sorted: &[f32], fraction: f32) -> f32 {
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[sorted.len() - 1];
    }
    let p = fraction * (sorted.len() - 1) as f32;
    let ip = p as usize;
    let p = p - ip as f32;
    (1.0 - p) * sorted[ip] + p * sorted[(ip + 1).min(sorted.len() - 1)]
}

fn median(sorted: &[f32]) -> f32 {
    let n = sorted.len();
    if n.is_multiple_of(2) {
        0.5 * (sorted[n / 2] + sorted[n / 2 - 1])
    } else {
        sorted[n / 2]
    }
}

/// The spread of `sorted` as llama.cpp reports it: maximum, the `upper` percentiles,
/// median, the `lower` ones, minimum; `line(label, value)` writes each, labels 7 wide.
fn spread_lines(
    sorted: &[f32],
    upper: &[(&str, f32)],
    lower: &[(&str, f32)],
    mut line: impl FnMut(&str, f32),
) {
    line("Maximum", sorted[sorted.len() - 1]);
    for &(label, f) in upper {
        line(&format!("{label:<7}"), percentile(sorted, f));
    }
    line("Median ", median(sorted));
    for &(label, f) in lower {
        line(&format!("{label:<7}"), percentile(sorted, f));
    }
    line("Minimum", sorted[0]);
}

/// The result of a KL-divergence run: (value, uncertainty) pairs as llama.cpp prints them.
#[derive(Debug, Clone)]
pub struct KldSummary {
    /// Rows compared.
    pub count: usize,
    /// PPL(Q): this model's perplexity on the base's tokens.
    pub ppl: (f64, f64),
    /// PPL(base), from the stored log-probabilities.
    pub ppl_base: (f64, f64),
    pub cor_ln_ppl: f64,
    /// ln(PPL(Q)/PPL(base)).
    pub ln_ppl_ratio: (f64, f64),
    /// Mean KL-divergence (nats) of this model from the base.
    pub kld: (f64, f64),
    pub kld_sorted: Vec<f32>,
    /// Mean Δp of the next token's probability (this model − base).
    pub p_diff: (f64, f64),
    pub p_diff_sorted: Vec<f32>,
    pub p_diff_rms: (f64, f64),
    /// "Same top p": the share of rows whose most likely token is the base's.
    pub same_top: (f64, f64),
    ppl_cov: f64,
}

impl KldSummary {
    /// The chunk line of llama.cpp's table (`chunk PPL ln(PPL(Q)/PPL(base)) KLD Δp-RMS same-top`).
    pub fn chunk_line(&self, chunk: usize) -> String {
        format!(
            "{chunk:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
            self.ppl.0,
            self.ppl.1,
            self.ln_ppl_ratio.0,
            self.ln_ppl_ratio.1,
            self.kld.0,
            self.kld.1,
            100.0 * self.p_diff_rms.0,
            100.0 * self.p_diff_rms.1,
            100.0 * self.same_top.0,
            100.0 * self.same_top.1,
        )
    }

    /// The table header llama.cpp prints before the chunk lines.
    pub const TABLE_HEADER: &'static str = "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p";

    /// llama.cpp's closing statistics, line for line (it prints them from 100 rows up).
    pub fn report(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let (k, dp) = (&self.kld_sorted, &self.p_diff_sorted);
        if k.is_empty() {
            return s;
        }
        let ratio = self.ln_ppl_ratio.0.exp();
        let diff_unc = (self.ppl.1 * self.ppl.1 + self.ppl_base.1 * self.ppl_base.1
            - 2.0 * self.ppl_cov)
            .sqrt();
        let _ = writeln!(s, "====== Perplexity statistics ======");
        let _ = writeln!(
            s,
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            self.ppl.0, self.ppl.1
        );
        let _ = writeln!(
            s,
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            self.ppl_base.0, self.ppl_base.1
        );
        let _ = writeln!(
            s,
            "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
            100.0 * self.cor_ln_ppl
        );
        let _ = writeln!(
            s,
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
            self.ln_ppl_ratio.0, self.ln_ppl_ratio.1
        );
        let _ = writeln!(
            s,
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            ratio,
            ratio * self.ln_ppl_ratio.1
        );
        let _ = writeln!(
            s,
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
            self.ppl.0 - self.ppl_base.0,
            diff_unc
        );
        let _ = writeln!(s);
        let _ = writeln!(s, "====== KL divergence statistics ======");
        let _ = writeln!(s, "Mean    KLD: {:10.6} ± {:10.6}", self.kld.0, self.kld.1);
        let upper = [
            ("99.9%", 0.999),
            ("99.0%", 0.990),
            ("95.0%", 0.950),
            ("90.0%", 0.900),
        ];
        let lower = [
            ("10.0%", 0.100),
            (" 5.0%", 0.050),
            (" 1.0%", 0.010),
            (" 0.1%", 0.001),
        ];
        spread_lines(k, &upper, &lower, |label, v| {
            let _ = writeln!(s, "{label} KLD: {v:10.6}");
        });
        let _ = writeln!(s);
        let _ = writeln!(s, "====== Token probability statistics ======");
        let _ = writeln!(
            s,
            "Mean    Δp: {:6.3} ± {:5.3} %",
            100.0 * self.p_diff.0,
            100.0 * self.p_diff.1
        );
        // Δp adds the quartiles.
        let upper = [upper.as_slice(), &[("75.0%", 0.750)]].concat();
        let lower = [[("25.0%", 0.250)].as_slice(), &lower].concat();
        spread_lines(dp, &upper, &lower, |label, v| {
            let _ = writeln!(s, "{label} Δp: {:6.3}%", 100.0 * v);
        });
        let _ = writeln!(
            s,
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * self.p_diff_rms.0,
            100.0 * self.p_diff_rms.1
        );
        let _ = writeln!(
            s,
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * self.same_top.0,
            100.0 * self.same_top.1
        );
        s
    }
}
