//! `pocket run --n-probs N`: generation that also reports, for every generated token, its
//! probability and the N most likely tokens of its step (llama.cpp's `--n-probs`). The
//! numbers are the log-softmax of the step's logits before any sampler, computed by
//! `pocket_model::logprobs` (the same function as the server's `n_probs`). Printed after
//! the text, one line per token:
//!
//! ```text
//!    3  ' Paris'      p=0.91234 | ' Paris' 0.91234 | ' the' 0.02011 | ' a' 0.00912
//! ```

use std::io::Write;
use std::time::Instant;

use pocket_model::forward::ms_since;
use pocket_model::logprobs::{logprob, top_logprobs};
use pocket_model::sampler::Sampler;
use pocket_model::Session;

use super::CliResult;

/// One `--n-probs` generation.
pub struct ProbsRun<'a> {
    pub prompt_text: &'a str,
    /// Print the prompt before the generated text.
    pub echo: bool,
    pub prompt: &'a [u32],
    pub n_predict: usize,
    /// Candidates shown per step.
    pub top: usize,
}

/// One generated token and its step's candidates (token, log-probability).
struct Step {
    token: u32,
    logprob: f32,
    top: Vec<(u32, f32)>,
}

impl ProbsRun<'_> {
    pub fn run(&self, s: &mut Session, sampler: &mut Sampler) -> CliResult {
        let model = s.model;
        let tok = &model.tokenizer;
        let t0 = Instant::now();
        self.prompt.iter().for_each(|&t| sampler.accept(t));
        let mut logits = s.prefill(self.prompt)?.to_vec();
        let prompt_ms = ms_since(t0);
        let t1 = Instant::now();
        let mut steps: Vec<Step> = Vec::new();
        while steps.len() < self.n_predict {
            let token = sampler.sample(&logits);
            sampler.accept(token);
            steps.push(Step {
                token,
                logprob: logprob(&logits, token),
                top: top_logprobs(&logits, self.top),
            });
            if tok.is_eog(token) || s.pos() + 1 > s.n_ctx() || steps.len() == self.n_predict {
                break;
            }
            logits = s.decode(token)?.to_vec();
        }
        let gen_ms = ms_since(t1);
        let ids: Vec<u32> = steps
            .iter()
            .map(|st| st.token)
            .filter(|&t| !tok.is_eog(t))
            .collect();
        let text = String::from_utf8_lossy(&tok.detokenize(&ids, false, false)).into_owned();
        let mut out = std::io::stdout().lock();
        if self.echo {
            write!(out, "{}", self.prompt_text)?;
        }
        writeln!(out, "{text}")?;
        writeln!(
            out,
            "\nn_probs: each generated token, its probability, and the {} most likely tokens of its step:",
            self.top
        )?;
        let piece = |id: u32| format!("{:?}", String::from_utf8_lossy(&tok.token_to_piece(id)));
        for (i, st) in steps.iter().enumerate() {
            write!(
                out,
                "{i:>4}  {:<14} p={:.5}",
                piece(st.token),
                (st.logprob as f64).exp()
            )?;
            for &(id, lp) in &st.top {
                write!(out, " | {} {:.5}", piece(id), (lp as f64).exp())?;
            }
            writeln!(out)?;
        }
        eprintln!(
            "prompt {} tokens in {prompt_ms:.1} ms | generation {} tokens in {gen_ms:.1} ms | {} threads",
            self.prompt.len(),
            steps.len(),
            s.threads()
        );
        Ok(())
    }
}
