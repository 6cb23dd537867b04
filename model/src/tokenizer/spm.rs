//! SentencePiece-style tokenizer (`tokenizer.ggml.model == "llama"`: llama 1/2, mistral v1,
//! phi-3, gemma 1–3), as llama.cpp's `llm_tokenizer_spm_session`: greedy merging of the
//! highest-scoring adjacent pair that forms a vocabulary token, then byte fallback
//! (`<0xXX>`) for whatever is left unknown.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::symbol::{merge, push_chars, Symbol};
use super::vocab::Vocab;

struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .partial_cmp(&o.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Tokenizes `text` (spaces already escaped to ▁) into `out`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    push_chars(text, &mut symbols);

    let mut heap = BinaryHeap::new();
    let try_add = |symbols: &[Symbol], heap: &mut BinaryHeap<Bigram>, left: i32, right: i32| {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (&symbols[left as usize], &symbols[right as usize]);
        let s = &text[l.start..l.start + l.n + r.n];
        if let Some(id) = vocab.find(s) {
            heap.push(Bigram {
                left,
                right,
                score: vocab.score(id),
                size: s.len(),
            });
        }
    };

    for i in 1..symbols.len() as i32 {
        try_add(&symbols, &mut heap, i - 1, i);
    }

    while let Some(b) = heap.pop() {
        let (li, ri) = (b.left as usize, b.right as usize);
        if symbols[li].n == 0 || symbols[ri].n == 0 || symbols[li].n + symbols[ri].n != b.size {
            continue;
        }
        merge(&mut symbols, b.left, b.right);
        let (prev, next) = (symbols[li].prev, symbols[li].next);
        try_add(&symbols, &mut heap, prev, b.left);
        try_add(&symbols, &mut heap, b.left, next);
    }

    if symbols.is_empty() {
        return;
    }
    let mut i = 0i32;
    while i != -1 {
        let s = symbols[i as usize];
        let t = &text[s.start..s.start + s.n];
        match vocab.find(t) {
            Some(id) => out.push(id),
            None => {
                // Every merged symbol is a token, so only single code points get here
                // (llama.cpp's re-segmentation through `rev_merge` never applies to them).
                for &byte in t.as_bytes() {
                    if let Some(id) = vocab.byte_to_token(byte) {
                        out.push(id);
                    }
                }
            }
        }
        i = s.next;
    }
}
