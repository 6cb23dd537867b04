//! One slot's generation in flight: its job, sampler, text and timings. The engine
//! (`engine.rs`) decides what each slot evaluates per step; this file is what happens to
//! a slot when its logits come back.

use std::time::Instant;

use pocket_model::sampler::Sampler;
use pocket_model::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use super::job::{Done, Event, Finish, Job, JobTimings, Progress};
use super::output::Output;
use super::probs::TokenProbs;

pub struct Active {
    pub job: Job,
    /// The slot (KV-cache sequence) this job runs on.
    pub slot: usize,
    pub sampler: Sampler,
    out: Output,
    /// The prompt's tokens before this index are in the slot's cache.
    pub prompt_done: usize,
    /// The sampled token that goes into the next batch (generation phase).
    pub next_token: Option<u32>,
    pub tokens: Vec<u32>,
    /// Probabilities of the tokens not yet sent in a piece, and of all tokens.
    pending_probs: Vec<TokenProbs>,
    probs: Vec<TokenProbs>,
    started: Instant,
    first_token: Option<Instant>,
    pub timings: JobTimings,
    /// Events for the client not handed to the engine's courier yet ([`Active::take_events`]).
    held: Vec<Event>,
}

/// What a sampled token did to its slot.
pub enum Outcome {
    /// Evaluate the token next step.
    Continue,
    Finished(Finish),
}

impl Active {
    /// A job on `slot`, whose cache holds `cached` of its prompt's first tokens.
    pub fn new(job: Job, slot: usize, cached: usize) -> Active {
        let mut sampler = Sampler::new(job.settings.sampling.clone());
        job.prompt.iter().for_each(|&t| sampler.accept(t));
        sampler.set_constraint(job.settings.grammar.as_ref().map(|g| g.constraint()));
        let out = Output::new(job.settings.stop.clone());
        Active {
            slot,
            sampler,
            out,
            prompt_done: cached,
            next_token: None,
            tokens: Vec::new(),
            pending_probs: Vec::new(),
            probs: Vec::new(),
            started: Instant::now(),
            first_token: None,
            held: Vec::new(),
            timings: JobTimings {
                cache_n: cached,
                prompt_n: job.prompt.len() - cached,
                ..Default::default()
            },
            job,
        }
    }

    pub fn prefilling(&self) -> bool {
        self.prompt_done < self.job.prompt.len()
    }

    /// Sends the prompt's progress when the request asked for it (`return_progress`).
    pub fn report_progress(&self) {
        if !self.job.settings.return_progress {
            return;
        }
        let evaluated = self.prompt_done - self.timings.cache_n;
        let elapsed = self.started.elapsed();
        let timings = JobTimings {
            cache_n: self.timings.cache_n,
            prompt_n: evaluated,
            prompt_ms: if evaluated > 0 {
                elapsed.as_secs_f64() * 1e3
            } else {
                0.0
            },
            ..Default::default()
        };
        if !self.job.streams {
            return;
        }
        let _ = self.job.events.send(Event::Progress(Progress {
            total: self.job.prompt.len(),
            cache: self.timings.cache_n,
            processed: self.prompt_done,
            time_ms: elapsed.as_millis() as u64,
            timings,
        }));
    }

    /// The client went away.
    pub fn cancelled(&self) -> bool {
        self.job.events.is_closed()
    }

    /// Tokens still allowed, if limited.
    pub fn remaining(&self) -> Option<usize> {
        self.job
            .settings
            .n_predict
            .map(|n| n.saturating_sub(self.tokens.len()))
    }

    /// The prompt is evaluated and generates nothing (`n_predict: 0`).
    pub fn wants_no_tokens(&self) -> bool {
        self.job.settings.n_predict == Some(0)
    }

    /// Takes the token sampled from this slot's logits; `seq_len` is the slot's cache
    /// length and `n_ctx` its capacity.
    /// `probs` are the step's probabilities when the request asked for them.
    pub fn accept(
        &mut self,
        tok: &Tokenizer,
        token: u32,
        probs: Option<TokenProbs>,
        seq_len: usize,
        n_ctx: usize,
    ) -> Outcome {
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
            self.timings.prompt_ms = self.started.elapsed().as_secs_f64() * 1e3;
        }
        self.sampler.accept(token);
        if let Some(e) = self.sampler.take_grammar_error() {
            // The grammar failed mid-generation (it ended on an end-of-generation token).
            self.held.push(Event::Failed(e.to_string()));
            return Outcome::Finished(Finish::Eos);
        }
        if !self.job.settings.ignore_eos && tok.is_eog(token) {
            return Outcome::Finished(Finish::Eos);
        }
        self.tokens.push(token);
        if let Some(p) = probs {
            self.pending_probs.push(p.clone());
            self.probs.push(p);
        }
        let step = self.out.push(tok, token);
        if let Some((text, tokens)) = step.piece {
            self.send_piece(text, tokens);
        }
        if let Some(word) = step.stopped {
            return Outcome::Finished(Finish::Word(word));
        }
        if self.remaining() == Some(0) || seq_len >= n_ctx {
            return Outcome::Finished(Finish::Limit);
        }
        self.next_token = Some(token);
        Outcome::Continue
    }

    /// Sends text that is final; the probabilities of all tokens since the last piece go
    /// with it (a piece carries every token not yet sent).
    fn send_piece(&mut self, text: String, tokens: Vec<u32>) {
        if !self.job.streams {
            // `Done` carries the whole text and every token's probabilities.
            self.pending_probs.clear();
            return;
        }
        let id_slot = self.slot;
        let probs = std::mem::take(&mut self.pending_probs);
        self.held.push(Event::Piece {
            text,
            tokens,
            id_slot,
            probs,
        });
    }

    /// The events this slot produced since the last call, in order, and their channel.
    pub fn take_events(&mut self) -> (&UnboundedSender<Event>, Vec<Event>) {
        (&self.job.events, std::mem::take(&mut self.held))
    }

    /// Ends the job: its held events, the last text piece, then `Done`, for the courier.
    /// `count` sees the job's timings before any of them is delivered, so the server's
    /// counters already hold this job when its client reads the response (a `/metrics`
    /// request right after it counts it).
    pub fn finish(
        mut self,
        finish: Finish,
        count: impl FnOnce(&JobTimings),
    ) -> (UnboundedSender<Event>, Vec<Event>) {
        if !matches!(finish, Finish::Word(_)) {
            if let Some((text, tokens)) = self.out.finish() {
                self.send_piece(text, tokens);
            }
        }
        self.timings.predicted_n = self.tokens.len();
        self.timings.predicted_ms = self
            .first_token
            .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        if self.first_token.is_none() {
            self.timings.prompt_ms = self.started.elapsed().as_secs_f64() * 1e3;
        }
        let done = Done {
            id_slot: self.slot,
            content: std::mem::take(&mut self.out.text),
            tokens: std::mem::take(&mut self.tokens),
            finish,
            n_prompt: self.job.prompt.len(),
            probs: std::mem::take(&mut self.probs),
            timings: self.timings,
        };
        count(&self.timings);
        self.held.push(Event::Done(Box::new(done)));
        (self.job.events, self.held)
    }
}
