//! The logit dump format shared with `tests/oracle/dump_logits.cpp` (llama.cpp's side):
//! little-endian `i32 n_vocab, i32 n_prompt, i32 n_steps, i32 prompt[n_prompt]`, then per
//! step `i32 chosen token, f32 logits[n_vocab]`. Teacher-forced comparisons replay a dump's
//! chosen tokens and compare logits step by step.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LogitDumpError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a logit dump (truncated or bad header)", .0.display())]
    Bad(PathBuf),
}

/// One greedy run: the prompt ids, and per step the logits and the token fed next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogitDump {
    pub n_vocab: usize,
    pub prompt: Vec<u32>,
    /// `(chosen token, logits)` per step.
    pub steps: Vec<(u32, Vec<f32>)>,
}

impl LogitDump {
    pub fn read(path: impl AsRef<Path>) -> Result<LogitDump, LogitDumpError> {
        let path = path.as_ref();
        let b = std::fs::read(path).map_err(|source| LogitDumpError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = || LogitDumpError::Bad(path.to_path_buf());
        let word = |i: usize| -> Result<[u8; 4], LogitDumpError> {
            b.get(4 * i..4 * i + 4)
                .map(|w| w.try_into().unwrap())
                .ok_or_else(bad)
        };
        let int = |i: usize| -> Result<i32, LogitDumpError> { word(i).map(i32::from_le_bytes) };
        let (n_vocab, n_prompt, n_steps) = (int(0)?, int(1)?, int(2)?);
        if n_vocab <= 0 || n_prompt < 0 || n_steps < 0 {
            return Err(bad());
        }
        let (nv, np, ns) = (n_vocab as usize, n_prompt as usize, n_steps as usize);
        if b.len() != 4 * (3 + np + ns * (1 + nv)) {
            return Err(bad());
        }
        let prompt = (0..np)
            .map(|i| int(3 + i).map(|t| t as u32))
            .collect::<Result<_, _>>()?;
        let mut steps = Vec::with_capacity(ns);
        for s in 0..ns {
            let at = 3 + np + s * (1 + nv);
            let chosen = int(at)? as u32;
            let logits = b[4 * (at + 1)..4 * (at + 1 + nv)]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            steps.push((chosen, logits));
        }
        Ok(LogitDump {
            n_vocab: nv,
            prompt,
            steps,
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for v in [self.n_vocab, self.prompt.len(), self.steps.len()] {
            out.extend((v as i32).to_le_bytes());
        }
        for &t in &self.prompt {
            out.extend((t as i32).to_le_bytes());
        }
        for (t, l) in &self.steps {
            out.extend((*t as i32).to_le_bytes());
            l.iter().for_each(|v| out.extend(v.to_le_bytes()));
        }
        out
    }
}

/// Largest absolute difference of two logit rows.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// The index of the largest logit and its lead over the runner-up.
pub fn top2(l: &[f32]) -> (usize, f32) {
    let mut i1 = 0;
    for i in 1..l.len() {
        if l[i] > l[i1] {
            i1 = i;
        }
    }
    let second = l
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != i1)
        .fold(f32::MIN, |m, (_, &v)| m.max(v));
    (i1, l[i1] - second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_truncation() {
        let d = LogitDump {
            n_vocab: 3,
            prompt: vec![1, 2],
            steps: vec![(2, vec![0.5, -1.0, 3.0]), (0, vec![1.0, 0.0, 0.0])],
        };
        let dir = std::env::temp_dir().join(format!("pocket-dump-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.bin");
        std::fs::write(&p, d.to_bytes()).unwrap();
        assert_eq!(LogitDump::read(&p).unwrap(), d);
        let bytes = d.to_bytes();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(LogitDump::read(&p)
            .unwrap_err()
            .to_string()
            .contains("not a logit dump"));
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(top2(&[0.5, -1.0, 3.0]), (2, 2.5));
    }
}
