//! The engine thread: one [`Session`] with a KV-cache sequence per slot, fed by a channel
//! of [`Job`]s. Each step it admits waiting jobs to free slots (the slot whose cached
//! tokens share the longest prefix with the prompt; only the rest is prefilled), drops the
//! jobs whose client went away, and runs ONE forward batch holding the next token of every
//! generating slot and a chunk of the pending prompts (at most `n_batch` rows in all):
//! continuous batching. It never runs on the async runtime's threads.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use pocket_model::speculative::Speculator;
use pocket_model::{Batch, Session};

use super::courier::Courier;
use super::job::{Event, Finish, Job};
use super::metrics::SlotView;
use super::probs::{post_sampling_probs, token_probs};
use super::slot::{Active, Outcome};
use super::state::Shared;
use super::trace::{Phase, StepTrace};

/// A slot's logits rows in a step: its next token's row and one per draft after it (or
/// the prompt's last row); `len`: the slot's cache length before the step.
struct Want {
    slot: usize,
    len: usize,
    drafts: Vec<u32>,
}

pub struct Engine<'m> {
    s: Session<'m>,
    slots: Vec<Option<Active>>,
    /// Each slot's speculative drafter (`--spec-type`), kept across requests (a draft
    /// model's cache then reuses the slot's prefix).
    specs: Vec<Option<Speculator<'m>>>,
    pending: VecDeque<Job>,
    n_batch: usize,
    shared: Arc<Shared>,
    /// Scratch for the logits with a request's `logit_bias` added.
    masked: Vec<f32>,
    /// The last step's logits rows.
    logits: Vec<f32>,
    /// The step's events for the clients, delivered at its end.
    courier: Courier,
    trace: StepTrace,
}

impl<'m> Engine<'m> {
    /// The engine over `s`'s sequences; `specs`: a drafter per slot, or none at all;
    /// `runtime`: where the courier's dispatcher runs (none: events go out directly).
    pub fn new(
        s: Session<'m>,
        specs: Vec<Option<Speculator<'m>>>,
        n_batch: usize,
        shared: Arc<Shared>,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Engine<'m> {
        let n = s.n_seq();
        let mut specs = specs;
        specs.resize_with(n, || None);
        Engine {
            s,
            slots: (0..n).map(|_| None).collect(),
            specs,
            pending: VecDeque::new(),
            n_batch,
            shared,
            masked: Vec::new(),
            logits: Vec::new(),
            courier: Courier::new(runtime),
            trace: StepTrace::from_env(),
        }
    }

    /// Serves jobs until every sender is gone.
    pub fn run(mut self, rx: Receiver<Job>) {
        loop {
            if self.idle() {
                self.trace.idle();
                match rx.recv() {
                    Ok(job) => self.pending.push_back(job),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(job) => self.pending.push_back(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) if self.idle() => return,
                    Err(TryRecvError::Disconnected) => break,
                }
            }
            self.trace.mark(Phase::Other);
            self.drop_cancelled();
            self.admit();
            self.step();
            self.publish();
        }
    }

    fn idle(&self) -> bool {
        self.pending.is_empty() && self.slots.iter().all(Option::is_none)
    }

    fn drop_cancelled(&mut self) {
        let before = self.pending.len();
        self.pending.retain(|j| !j.events.is_closed());
        let gone = before - self.pending.len();
        let mut cancelled = gone as u64;
        self.shared.queued.fetch_sub(gone, Ordering::SeqCst);
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(Active::cancelled) {
                // Nothing to tell the client: it is gone. What the slot evaluated stays
                // cached for the next request.
                self.slots[i] = None;
                cancelled += 1;
            }
        }
        let mut m = self.shared.metrics.lock().unwrap();
        m.requests_cancelled += cancelled;
        m.requests_done += cancelled;
    }

    /// Moves waiting jobs to free slots, in arrival order.
    fn admit(&mut self) {
        let mut waiting = VecDeque::new();
        while let Some(job) = self.pending.pop_front() {
            match self.pick_slot(&job) {
                Some((slot, common)) => {
                    let common = super::lora::switch(&mut self.s, slot, &job.settings.lora, common);
                    self.s.truncate_seq(slot, common);
                    let a = Active::new(job, slot, common);
                    a.report_progress();
                    self.slots[slot] = Some(a);
                    self.shared.queued.fetch_sub(1, Ordering::SeqCst);
                }
                None => waiting.push_back(job),
            }
        }
        self.pending = waiting;
    }

    /// A free slot for `job` and how many of its prompt's tokens it keeps: the requested
    /// slot, else the one sharing the longest prefix (at least the prompt's last token is
    /// evaluated again: its logits are needed).
    fn pick_slot(&self, job: &Job) -> Option<(usize, usize)> {
        let keep = |slot: usize| {
            if !job.settings.cache_prompt {
                return 0;
            }
            let common = self
                .s
                .seq_tokens(slot)
                .iter()
                .zip(&job.prompt)
                .take_while(|(a, b)| a == b)
                .count();
            common.min(job.prompt.len() - 1)
        };
        if let Some(slot) = job.settings.id_slot {
            return self.slots[slot].is_none().then(|| (slot, keep(slot)));
        }
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_none())
            // Longest prefix first; among equals the slot holding least (keeps others' caches).
            .max_by_key(|&i| (keep(i), usize::MAX - self.s.seq_len(i)))
            .map(|i| (i, keep(i)))
    }

    /// One forward batch over every busy slot.
    fn step(&mut self) {
        let mut batch = Batch::new();
        let mut wants: Vec<Want> = Vec::new(); // in the order of the logits rows
        let (mut gen_rows, mut prompt_rows) = (0usize, 0usize);
        for i in 0..self.slots.len() {
            let Some(a) = self.slots[i].as_ref() else {
                continue;
            };
            let Some(t) = a.next_token else {
                continue;
            };
            let len = self.s.seq_len(i);
            let drafts = self.draft(i, t, len, gen_rows);
            batch.add(t, len, i, true);
            for (k, &d) in drafts.iter().enumerate() {
                batch.add(d, len + 1 + k, i, true);
            }
            gen_rows += 1 + drafts.len();
            wants.push(Want {
                slot: i,
                len,
                drafts,
            });
        }
        let mut budget = self.n_batch.saturating_sub(gen_rows).max(1);
        for (i, a) in self.slots.iter().enumerate() {
            let Some(a) = a.as_ref().filter(|a| a.prefilling()) else {
                continue;
            };
            if budget == 0 {
                break;
            }
            let p = &a.job.prompt;
            let n = (p.len() - a.prompt_done).min(budget);
            let pos0 = self.s.seq_len(i);
            for k in 0..n {
                let idx = a.prompt_done + k;
                let last = idx + 1 == p.len();
                batch.add(p[idx], pos0 + k, i, last);
                if last {
                    // The prompt's last row: its logits give the first token.
                    wants.push(Want {
                        slot: i,
                        len: pos0 + k,
                        drafts: Vec::new(),
                    });
                }
            }
            budget -= n;
            prompt_rows += n;
        }
        if batch.is_empty() {
            return;
        }
        self.trace.mark(Phase::Other);
        let t0 = Instant::now();
        // The logits go to a buffer kept from step to step (a fresh one per step was a
        // fresh mapping of n_vocab floats per row: page faults on every step).
        let mut logits = std::mem::take(&mut self.logits);
        let result = self.s.forward_batch(&batch).map(|l| {
            logits.clear();
            logits.extend_from_slice(l);
        });
        let secs = t0.elapsed().as_secs_f64();
        self.trace.mark(Phase::Forward);
        self.trace.step(batch.len(), self.s.pool_parking());
        if let Err(e) = result {
            self.logits = logits;
            return self.fail_batch(&batch, &e.to_string());
        }
        let mut prefilled = vec![false; self.slots.len()];
        for row in &batch.rows {
            if let Some(a) = self.slots[row.seq].as_mut() {
                if a.prefilling() {
                    a.prompt_done += 1;
                    prefilled[row.seq] = true;
                }
            }
        }
        for (a, _) in self.slots.iter().zip(&prefilled).filter(|(_, &p)| p) {
            if let Some(a) = a {
                a.report_progress();
            }
        }
        {
            let mut m = self.shared.metrics.lock().unwrap();
            let total = (gen_rows + prompt_rows) as f64;
            m.n_decode += 1;
            m.n_busy_slots += self.slots.iter().filter(|a| a.is_some()).count() as u64;
            m.prompt_tokens += prompt_rows as u64;
            m.prompt_seconds += secs * prompt_rows as f64 / total;
            m.predicted_seconds += secs * gen_rows as f64 / total;
        }
        let n_vocab = self.s.model.config.n_vocab;
        let mut row = 0;
        for w in wants {
            let rows = &logits[row * n_vocab..(row + 1 + w.drafts.len()) * n_vocab];
            row += 1 + w.drafts.len();
            self.verify(&w, rows, n_vocab);
        }
        self.logits = logits;
        self.trace.mark(Phase::Sample);
        // Every slot's tokens of this step go out together (courier.rs).
        for a in self.slots.iter_mut().flatten() {
            let (to, events) = a.take_events();
            self.courier.hold(to, events);
        }
        self.courier.flush();
        self.trace.mark(Phase::Deliver);
    }

    /// Drafts for slot `i`, whose next token is `next` and cache holds `len` tokens, when
    /// it has a drafter and room (context, tokens left, batch rows beside `rows_so_far`).
    fn draft(&mut self, i: usize, next: u32, len: usize, rows_so_far: usize) -> Vec<u32> {
        let (Some(spec), Some(a)) = (self.specs[i].as_mut(), self.slots[i].as_ref()) else {
            return Vec::new();
        };
        // Row 0 emits a token too, so a step may emit 1 + drafts tokens.
        let left = a.remaining().unwrap_or(usize::MAX).saturating_sub(1);
        let ctx = self.s.n_ctx().saturating_sub(len + 1);
        let rows = self.n_batch.saturating_sub(rows_so_far + 1);
        let room = left.min(ctx).min(rows);
        match spec.draft(self.s.seq_tokens(i), next, room) {
            Ok(d) => d,
            Err(e) => {
                // A failing draft model costs the speculation, not the request.
                eprintln!("warning: slot {i}: drafting failed ({e}); decoding without drafts");
                self.specs[i] = None;
                Vec::new()
            }
        }
    }

    /// Samples slot `w.slot`'s tokens from its logits rows (`1 + drafts`, `n_vocab` each):
    /// row `j` is sampled exactly as plain decoding would sample that position, and the
    /// next row is used only while the sample equals the draft the row was fed. The cache
    /// is cut back to the rows whose tokens were kept.
    fn verify(&mut self, w: &Want, rows: &[f32], n_vocab: usize) {
        // The counts go into the slot's timings before any row can finish it (its timings
        // are sent when it finishes), and /metrics counts exactly the same.
        let (drafted, mut counted) = (w.drafts.len(), 0);
        if drafted > 0 {
            if let Some(a) = self.slots[w.slot].as_mut() {
                a.timings.draft_n += drafted;
            }
        }
        let mut j = 0;
        loop {
            let logits = &rows[j * n_vocab..(j + 1) * n_vocab];
            let token = self.sample_and_accept(w.slot, logits, w.len + 1 + j);
            let live = self.slots[w.slot].is_some();
            if !live || j == drafted || token != Some(w.drafts[j]) {
                break;
            }
            // Draft j was the target's own sample: kept (the slot goes on to row j + 1).
            if let Some(a) = self.slots[w.slot].as_mut() {
                a.timings.draft_n_accepted += 1;
                counted += 1;
            }
            j += 1;
        }
        if drafted == 0 {
            return;
        }
        // Rows 0..=j fed tokens that stay (the next token and the j kept drafts).
        self.s.truncate_seq(w.slot, w.len + 1 + j);
        if let Some(spec) = self.specs[w.slot].as_mut() {
            spec.verified(drafted, j);
        }
        let mut m = self.shared.metrics.lock().unwrap();
        m.draft_tokens += drafted as u64;
        m.draft_tokens_accepted += counted as u64;
        m.drafts += 1;
    }

    /// Samples and takes slot `slot`'s next token from `logits`; `seq_len`: the cache
    /// length plain decoding would have at this point. The token, unless the request
    /// wanted none.
    fn sample_and_accept(&mut self, slot: usize, logits: &[f32], seq_len: usize) -> Option<u32> {
        let model = self.s.model;
        let tok = &model.tokenizer;
        let n_ctx = self.s.n_ctx();
        let a = self.slots[slot].as_mut()?;
        if a.wants_no_tokens() {
            self.finish(slot, Finish::Limit);
            return None;
        }
        let fast = match a.job.settings.probs {
            // The candidates stay unbuilt: only the probabilities read them.
            None => a
                .sampler
                .sample_greedy_biased(logits, &a.job.settings.logit_bias),
            Some(_) => None,
        };
        let token = if let Some(t) = fast {
            t
        } else if !a.job.settings.logit_bias.is_empty() {
            self.masked.clear();
            self.masked.extend_from_slice(logits);
            for &(id, bias) in &a.job.settings.logit_bias {
                if let Some(l) = self.masked.get_mut(id as usize) {
                    *l += bias;
                }
            }
            a.sampler.sample(&self.masked)
        } else {
            a.sampler.sample(logits)
        };
        self.trace.mark(Phase::Sample);
        let settings = &a.job.settings;
        let probs = settings.probs.map(|k| match settings.post_sampling_probs {
            false => token_probs(tok, logits, token, k),
            true => {
                let greedy = a.sampler.params().temp <= 0.0;
                post_sampling_probs(tok, a.sampler.candidates(), greedy, token, k)
            }
        });
        let mut m = self.shared.metrics.lock().unwrap();
        m.tokens_predicted += 1;
        m.n_tokens_max = m.n_tokens_max.max(seq_len as u64 + 1);
        drop(m);
        if let Outcome::Finished(f) = a.accept(tok, token, probs, seq_len, n_ctx) {
            self.finish(slot, f);
        }
        self.trace.mark(Phase::Deliver);
        Some(token)
    }

    fn finish(&mut self, slot: usize, f: Finish) {
        if let Some(a) = self.slots[slot].take() {
            // The slot shows idle before its client gets the answer: a client that asks
            // /slots or /metrics right after must not see it still processing.
            self.publish();
            let (to, events) = a.finish(f, |t| {
                let mut m = self.shared.metrics.lock().unwrap();
                m.prompt_tokens_cached += t.cache_n as u64;
                m.requests_done += 1;
            });
            self.courier.hold(&to, events);
        }
    }

    /// A forward error (not expected: rows are checked before they are built): the slots
    /// of the batch get it, their sequences are forgotten.
    fn fail_batch(&mut self, batch: &Batch, msg: &str) {
        let mut seqs: Vec<usize> = batch.rows.iter().map(|r| r.seq).collect();
        seqs.dedup();
        for seq in seqs {
            if let Some(a) = self.slots[seq].take() {
                let _ = a.job.events.send(Event::Failed(msg.to_string()));
            }
            self.s.clear_seq(seq);
        }
    }

    /// What `/slots` and `/metrics` show.
    pub fn publish(&self) {
        let views: Vec<SlotView> = (0..self.slots.len())
            .map(|i| {
                let a = self.slots[i].as_ref();
                SlotView {
                    id: i,
                    n_ctx: self.s.n_ctx(),
                    id_task: a.map(|a| a.job.id),
                    n_cached: self.s.seq_len(i),
                    n_decoded: a.map_or(0, |a| a.tokens.len()),
                    n_remain: a.and_then(Active::remaining),
                }
            })
            .collect();
        let busy = views.iter().filter(|v| v.id_task.is_some()).count();
        *self.shared.slots.lock().unwrap() = views;
        let mut m = self.shared.metrics.lock().unwrap();
        m.requests_processing = busy as u64;
        m.requests_deferred = self.pending.len() as u64;
    }
}
