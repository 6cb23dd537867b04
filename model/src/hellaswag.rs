//! HellaSwag scoring by llama-perplexity's method (`tools/perplexity/perplexity.cpp`,
//! `hellaswag_score`), so pocket's multiple-choice numbers can be checked against
//! llama.cpp's.
//!
//! The input has 6 lines per task: the context, the index of the gold ending, and 4
//! endings. Each ending is tokenized with its context as one text (`context + " " +
//! ending`, BOS as the model adds it, special tokens not parsed); the 4 share their common
//! prefix, evaluated once, and each ending's score is the MEAN log-probability of its
//! tokens after that prefix (acc_norm). A task counts when the gold ending has the
//! highest score (the first one on a tie). Like llama-perplexity, `n_tasks` tasks are
//! drawn at random (a Mersenne twister seeded with 1 and libstdc++'s uniform integer
//! distribution, reproduced here so the task order, and so every cumulative accuracy
//! line, is llama-perplexity's).

use crate::forward::{Model, ModelError, Session, SessionOptions};
use crate::score::{score_in, ScoreError, ScoreInput};

#[derive(Debug, thiserror::Error)]
pub enum HellaswagError {
    #[error("the task file has {0} lines, not a multiple of 6 (context, gold index, 4 endings per task)")]
    Lines(usize),
    #[error("line {line}: the gold ending index {text:?} is not 0, 1, 2 or 3")]
    Gold { line: usize, text: String },
    #[error("task at line {line}: an ending adds no token after the endings' common prefix")]
    EmptyEnding { line: usize },
    #[error(
        "task at line {line} needs {need} tokens, more than the context of {n_ctx} (raise -c)"
    )]
    TooLong {
        line: usize,
        need: usize,
        n_ctx: usize,
    },
    #[error(transparent)]
    Score(#[from] ScoreError),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// One task of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// 1-based line of its context in the file.
    pub line: usize,
    pub context: String,
    pub gold: usize,
    pub endings: [String; 4],
}

/// The tasks of a file in llama-perplexity's 6-line format.
pub fn parse_tasks(text: &str) -> Result<Vec<Task>, HellaswagError> {
    // As std::getline: a final newline does not start another line.
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .collect();
    let lines = if text.is_empty() { Vec::new() } else { lines };
    if lines.len() % 6 != 0 {
        return Err(HellaswagError::Lines(lines.len()));
    }
    lines
        .chunks_exact(6)
        .enumerate()
        .map(|(i, l)| {
            let gold = l[1]
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&g| g < 4)
                .ok_or_else(|| HellaswagError::Gold {
                    line: 6 * i + 2,
                    text: l[1].to_string(),
                })?;
            Ok(Task {
                line: 6 * i + 1,
                context: l[0].to_string(),
                gold,
                endings: [2, 3, 4, 5].map(|j| l[j].to_string()),
            })
        })
        .collect()
}

/// std::mt19937 (32-bit Mersenne twister), as libstdc++ seeds and steps it.
pub struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1812433253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: 624 }
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            for i in 0..624 {
                let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
                let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.state[i] = v;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// libstdc++'s `uniform_int_distribution<size_t>(0, n - 1)` over a 32-bit generator
    /// (Lemire's nearly divisionless method), for `1 <= n <= 2^32`.
    pub fn below(&mut self, n: u64) -> u64 {
        let range = n as u32; // n = 2^32 wraps to 0: not reached (task counts are small)
        let mut product = self.next_u32() as u64 * range as u64;
        let mut low = product as u32;
        if low < range {
            let threshold = range.wrapping_neg() % range;
            while low < threshold {
                product = self.next_u32() as u64 * range as u64;
                low = product as u32;
            }
        }
        product >> 32
    }
}

/// The first `n` tasks in llama-perplexity's random order (each drawn from those left).
pub fn select_tasks(mut tasks: Vec<Task>, n: usize) -> Vec<Task> {
    let n = n.min(tasks.len());
    let mut rng = Mt19937::new(1);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let idx = rng.below(tasks.len() as u64) as usize;
        out.push(tasks.remove(idx));
    }
    out
}

/// One scored task.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskScore {
    pub line: usize,
    /// Mean log-probability of each ending's tokens.
    pub mean_logprob: [f64; 4],
    pub predicted: usize,
    pub gold: usize,
    /// Accuracy over the tasks up to this one, and its 95 % Wilson interval (fractions).
    pub acc: f64,
    pub interval: (f64, f64),
}

/// The tokens of one task: the endings' common prefix and each ending after it; and the
/// tokens llama-perplexity's batch needs for it (prefix + the 4 suffixes).
fn task_input(model: &Model, t: &Task) -> Result<(ScoreInput, usize), HellaswagError> {
    let tok = &model.tokenizer;
    let full: Vec<Vec<u32>> = t
        .endings
        .iter()
        .map(|e| tok.encode(&format!("{} {e}", t.context), true, false))
        .collect();
    let shortest = full.iter().map(Vec::len).min().unwrap_or(0);
    let common = (0..shortest)
        .take_while(|&k| full.iter().all(|f| f[k] == full[0][k]))
        .count();
    if common == 0 || full.iter().any(|f| f.len() == common) {
        return Err(HellaswagError::EmptyEnding { line: t.line });
    }
    let options: Vec<Vec<u32>> = full.iter().map(|f| f[common..].to_vec()).collect();
    let need = common + options.iter().map(Vec::len).sum::<usize>();
    let input = ScoreInput {
        prefix: full[0][..common].to_vec(),
        options,
    };
    Ok((input, need))
}

/// Wilson score interval of `acc` over `n` tasks at 95 %, as llama-perplexity prints it.
fn wilson(acc: f64, n: usize) -> (f64, f64) {
    let za = 1.95996398454;
    let z = za * za / n as f64;
    let cnf = z * (n as f64 * (4.0 * acc * (1.0 - acc) + z)).sqrt() / (za + za);
    (
        (acc + z * 0.5 - cnf) / (1.0 + z),
        (acc + z * 0.5 + cnf) / (1.0 + z),
    )
}

/// Scores `tasks` in order (after [`select_tasks`]); a task needing more than
/// `4 * o.n_ctx` tokens is an error, as llama-perplexity's context of 4 sequences.
/// `progress` gets each task's score as it is done.
pub fn hellaswag(
    model: &Model,
    tasks: &[Task],
    o: SessionOptions,
    mut progress: impl FnMut(&TaskScore),
) -> Result<Vec<TaskScore>, HellaswagError> {
    let mut inputs = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (input, need) = task_input(model, t)?;
        if need > 4 * o.n_ctx {
            return Err(HellaswagError::TooLong {
                line: t.line,
                need,
                n_ctx: 4 * o.n_ctx,
            });
        }
        inputs.push(input);
    }
    let n_ctx = inputs.iter().map(ScoreInput::n_ctx).max().unwrap_or(1);
    let mut s = Session::try_new(
        model,
        SessionOptions {
            n_ctx,
            n_seq: 4,
            ..o
        },
    )?;
    let mut correct = 0usize;
    let mut out = Vec::with_capacity(tasks.len());
    for (i, (t, input)) in tasks.iter().zip(&inputs).enumerate() {
        let scores = score_in(&mut s, input)?;
        let mut mean = [0.0; 4];
        for (m, sc) in mean.iter_mut().zip(&scores) {
            *m = sc.logprob / sc.n_tokens as f64;
        }
        let predicted = (1..4).fold(0, |b, j| if mean[j] > mean[b] { j } else { b });
        correct += usize::from(predicted == t.gold);
        let acc = correct as f64 / (i + 1) as f64;
        let ts = TaskScore {
            line: t.line,
            mean_logprob: mean,
            predicted,
            gold: t.gold,
            acc,
            interval: wilson(acc, i + 1),
        };
        progress(&ts);
        out.push(ts);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard() {
        // The C++ standard's check: the 10000th value of a default-seeded mt19937.
        let mut r = Mt19937::new(5489);
        let v = (0..10000).map(|_| r.next_u32()).last().unwrap();
        assert_eq!(v, 4123659995);
        // Seed 1's first output (std::mt19937 rng(1); rng()).
        assert_eq!(Mt19937::new(1).next_u32(), 1791095845);
    }

    #[test]
    fn below_stays_in_range_and_selection_is_a_permutation() {
        let mut r = Mt19937::new(1);
        assert!((0..1000).all(|_| r.below(7) < 7));
        let tasks: Vec<Task> = (0..10)
            .map(|i| Task {
                line: 6 * i + 1,
                context: format!("c{i}"),
                gold: 0,
                endings: Default::default(),
            })
            .collect();
        let mut lines: Vec<usize> = select_tasks(tasks, 99).iter().map(|t| t.line).collect();
        lines.sort();
        assert_eq!(lines, (0..10).map(|i| 6 * i + 1).collect::<Vec<_>>());
    }

    #[test]
    fn parse_checks_the_format() {
        let t = parse_tasks("ctx\n2\na\nb\nc\nd\n").unwrap();
        assert_eq!(t[0].gold, 2);
        assert_eq!(t[0].endings[3], "d");
        assert!(matches!(
            parse_tasks("a\nb\n"),
            Err(HellaswagError::Lines(2))
        ));
        let e = parse_tasks("ctx\n4\na\nb\nc\nd").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }
}
