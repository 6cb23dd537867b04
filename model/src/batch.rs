//! A batch of tokens from one or several sequences, in the shape of llama.cpp's
//! `llama_batch`: each row is (token, position, sequence id, wants logits). One
//! [`crate::Session::forward_batch`] call evaluates every row: the rows of all sequences go
//! through each weight matrix as one gemm, and each row attends to its own sequence's
//! cache. A row's arithmetic does not depend on the other rows (the matmul kernels compute
//! every row alike, attention reads only its own sequence), so a sequence's logits are the
//! same bit for bit whatever it is batched with (tested in model/tests/batch.rs).

use std::ops::Range;

/// A sequence of the session's KV cache (`0..n_seq`).
pub type SeqId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRow {
    pub token: u32,
    /// Its position in its sequence: the sequence's length before the batch plus the number
    /// of earlier rows of the same sequence in the batch.
    pub pos: usize,
    pub seq: SeqId,
    /// Return this row's logits.
    pub logits: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub rows: Vec<BatchRow>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// `tokens` of sequence `seq` at positions `pos0..`, logits for the rows in `want`.
    pub fn sequence(tokens: &[u32], pos0: usize, seq: SeqId, want: Range<usize>) -> Batch {
        let mut b = Batch::new();
        for (i, &t) in tokens.iter().enumerate() {
            b.add(t, pos0 + i, seq, want.contains(&i));
        }
        b
    }

    pub fn add(&mut self, token: u32, pos: usize, seq: SeqId, logits: bool) -> &mut Batch {
        self.rows.push(BatchRow {
            token,
            pos,
            seq,
            logits,
        });
        self
    }

    pub fn clear(&mut self) {
        self.rows.clear();
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Rows that return logits, in batch order (the order of the returned logits).
    pub fn logit_rows(&self) -> Vec<usize> {
        (0..self.rows.len())
            .filter(|&i| self.rows[i].logits)
            .collect()
    }

    /// Runs of rows for attention: consecutive batch rows of one sequence at consecutive
    /// positions, each cut to at most `max` rows. Attention handles a run as one block.
    pub(crate) fn runs(&self, rows: &[usize], max: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut start = 0;
        for i in 1..=rows.len() {
            let breaks = i == rows.len() || {
                let (a, b) = (&self.rows[rows[i - 1]], &self.rows[rows[i]]);
                rows[i] != rows[i - 1] + 1
                    || a.seq != b.seq
                    || b.pos != a.pos + 1
                    || i - start == max
            };
            if breaks {
                out.push(start..i);
                start = i;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_on_sequence_position_gap_and_size() {
        let mut b = Batch::new();
        for p in 0..5 {
            b.add(1, p, 0, false);
        }
        b.add(1, 7, 1, true).add(1, 8, 1, true).add(1, 3, 0, true);
        let all: Vec<usize> = (0..b.len()).collect();
        assert_eq!(b.runs(&all, 8), vec![0..5, 5..7, 7..8]);
        assert_eq!(b.runs(&all, 2), vec![0..2, 2..4, 4..5, 5..7, 7..8]);
        // Indices into a subset of rows (the logit rows of the last layer).
        let sub = b.logit_rows();
        assert_eq!(sub, vec![5, 6, 7]);
        assert_eq!(b.runs(&sub, 8), vec![0..2, 2..3]);
        assert_eq!(b.runs(&[], 8), Vec::<Range<usize>>::new());
    }

    #[test]
    fn sequence_batch_marks_wanted_rows() {
        let b = Batch::sequence(&[5, 6, 7], 10, 2, 2..3);
        assert_eq!(
            b.rows[0],
            BatchRow {
                token: 5,
                pos: 10,
                seq: 2,
                logits: false
            }
        );
        assert_eq!(b.logit_rows(), vec![2]);
    }
}
