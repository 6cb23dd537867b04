//! `POCKET_SERVE_TRACE=FILE`: where the engine thread's time goes, appended to FILE as one
//! line per busy period (from a job's arrival on an idle engine to the engine idle again):
//! steps, rows, and the milliseconds per step spent in the forward pass, in sampling, in
//! delivering the tokens, and in the rest of the loop (admission, cancellation, /slots).
//! Without the variable a step pays a branch per phase.

use std::io::Write;
use std::time::Instant;

#[derive(Default)]
struct Totals {
    steps: u64,
    rows: u64,
    /// Steps after which the pool was parking its workers (it saw them preempted).
    parked: u64,
    forward: f64,
    sample: f64,
    deliver: f64,
    other: f64,
}

pub struct StepTrace {
    file: Option<std::fs::File>,
    t: Totals,
    /// The start of the current phase.
    mark: Option<Instant>,
    busy_since: Option<Instant>,
}

/// The phases of a step.
#[derive(Clone, Copy)]
pub enum Phase {
    Forward,
    Sample,
    /// A token's text, stop strings and its event to the client.
    Deliver,
    Other,
}

impl StepTrace {
    pub fn from_env() -> StepTrace {
        let file = std::env::var_os("POCKET_SERVE_TRACE").and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        });
        StepTrace {
            file,
            t: Totals::default(),
            mark: None,
            busy_since: None,
        }
    }

    /// The time since the last mark goes to `phase`.
    #[inline]
    pub fn mark(&mut self, phase: Phase) {
        if self.file.is_none() {
            return;
        }
        let now = Instant::now();
        self.busy_since.get_or_insert(now);
        if let Some(m) = self.mark.replace(now) {
            let ms = (now - m).as_secs_f64() * 1e3;
            match phase {
                Phase::Forward => self.t.forward += ms,
                Phase::Sample => self.t.sample += ms,
                Phase::Deliver => self.t.deliver += ms,
                Phase::Other => self.t.other += ms,
            }
        }
    }

    /// A forward pass of `rows` rows ran.
    #[inline]
    pub fn step(&mut self, rows: usize, parking: bool) {
        self.t.parked += parking as u64;
        self.t.steps += 1;
        self.t.rows += rows as u64;
    }

    /// The engine goes idle: write the busy period's line.
    pub fn idle(&mut self) {
        let Some(f) = self.file.as_mut() else { return };
        self.mark = None;
        let (t, since) = (std::mem::take(&mut self.t), self.busy_since.take());
        if t.steps == 0 {
            return;
        }
        let wall = since.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e3);
        let n = t.steps as f64;
        let _ = writeln!(
            f,
            "steps {} (pool parking after {}) rows/step {:.2} wall {:.1} ms; per step ms: forward {:.3} sample {:.3} deliver {:.3} other {:.3}",
            t.steps,
            t.parked,
            t.rows as f64 / n,
            wall,
            t.forward / n,
            t.sample / n,
            t.deliver / n,
            t.other / n
        );
    }
}
