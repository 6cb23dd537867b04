//! Byte-level BPE (`tokenizer.ggml.model == "gpt2"`, and the raw-UTF-8 variant of gemma4),
//! as llama.cpp's `llm_tokenizer_bpe_session`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

use super::pretokenize::PreTokenizer;
use super::symbol::{merge, push_chars, Symbol};
use super::unicode::byte_to_char;
use super::vocab::{StrTable, Vocab};

/// Merge ranks from `tokenizer.ggml.merges`: "left right" strings, rank = position.
pub(crate) struct Merges {
    arena: String,
    offs: Vec<u32>,
    /// merge strings → rank (first occurrence wins, as `bpe_ranks.emplace`); built on first
    /// use, so that loading a model stays fast
    table: OnceLock<StrTable>,
}

impl Merges {
    pub fn new<'a>(merges: impl Iterator<Item = std::borrow::Cow<'a, str>>, n: usize) -> Self {
        let mut arena = String::with_capacity(n * 8);
        let mut offs = Vec::with_capacity(n + 1);
        offs.push(0u32);
        for m in merges {
            // llama.cpp splits at the first space after position 0; a line without one gives
            // an ("", "") pair that can never match: store it empty.
            if m.len() > 1 && m.as_bytes()[1..].contains(&b' ') {
                arena.push_str(&m);
            }
            offs.push(arena.len() as u32);
        }
        Merges {
            arena,
            offs,
            table: OnceLock::new(),
        }
    }

    fn table(&self) -> &StrTable {
        self.table.get_or_init(|| {
            let count = self.len();
            let mut table = StrTable::with_capacity(count);
            for i in 0..count as u32 {
                let s = self.text(i);
                if !s.is_empty() {
                    table.insert(s, i, false, |id| self.text(id));
                }
            }
            table
        })
    }

    fn text(&self, id: u32) -> &str {
        &self.arena[self.offs[id as usize] as usize..self.offs[id as usize + 1] as usize]
    }

    pub fn len(&self) -> usize {
        self.offs.len() - 1
    }

    /// Rank of merging `left` and `right` (`find_bpe_rank`); `buf` is scratch space.
    fn rank(&self, left: &str, right: &str, buf: &mut String) -> Option<u32> {
        buf.clear();
        buf.push_str(left);
        buf.push(' ');
        buf.push_str(right);
        self.table().find(buf, |id| self.text(id))
    }
}

/// (rank, left, right, left length, right length): the queue pops the lowest rank, then
/// the leftmost pair, as llama.cpp's `llm_bigram_bpe::comparator`.
type QueuedBigram = (u32, i32, i32, usize, usize);

pub(crate) struct BpeSession<'a> {
    pub vocab: &'a Vocab,
    pub merges: &'a Merges,
    pub pre: &'a PreTokenizer,
    pub byte_encode: bool,
    pub ignore_merges: bool,
    /// gemma4: a word made only of newlines is taken whole when it is a token
    pub newline_words: bool,
}

impl BpeSession<'_> {
    /// `llm_tokenizer_bpe_session::tokenize` for one text fragment.
    pub fn tokenize(&self, text: &str, out: &mut Vec<u32>) {
        let mut buf = String::new();
        let mut word_enc = String::new();
        let mut symbols: Vec<Symbol> = Vec::new();
        let mut heap: BinaryHeap<Reverse<QueuedBigram>> = BinaryHeap::new();

        for word in self.pre.split(text) {
            let word: &str = if self.byte_encode {
                word_enc.clear();
                for &b in word.as_bytes() {
                    word_enc.push(byte_to_char(b));
                }
                &word_enc
            } else {
                word
            };

            symbols.clear();
            heap.clear();
            let whole = (self.ignore_merges
                || (self.newline_words && word.bytes().all(|b| b == b'\n')))
                && self.vocab.find(word).is_some();
            if whole {
                symbols.push(Symbol {
                    prev: -1,
                    next: -1,
                    start: 0,
                    n: word.len(),
                });
            } else {
                push_chars(word, &mut symbols);
            }

            let sym_text = |s: &Symbol| &word[s.start..s.start + s.n];
            let add_bigram = |symbols: &[Symbol],
                              heap: &mut BinaryHeap<_>,
                              buf: &mut String,
                              left: i32,
                              right: i32| {
                if left < 0 || right < 0 {
                    return;
                }
                let (l, r) = (&symbols[left as usize], &symbols[right as usize]);
                if let Some(rank) = self.merges.rank(sym_text(l), sym_text(r), buf) {
                    heap.push(Reverse((rank, left, right, l.n, r.n)));
                }
            };

            for i in 1..symbols.len() as i32 {
                add_bigram(&symbols, &mut heap, &mut buf, i - 1, i);
            }

            while let Some(Reverse((_, left, right, ln, rn))) = heap.pop() {
                let (li, ri) = (left as usize, right as usize);
                // outdated: either side changed since the bigram was queued
                if symbols[li].n == 0 || symbols[ri].n == 0 {
                    continue;
                }
                if symbols[li].n != ln || symbols[ri].n != rn {
                    continue;
                }
                merge(&mut symbols, left, right);
                let (prev, next) = (symbols[li].prev, symbols[li].next);
                add_bigram(&symbols, &mut heap, &mut buf, prev, left);
                add_bigram(&symbols, &mut heap, &mut buf, left, next);
            }

            for s in symbols.iter().filter(|s| s.n > 0) {
                let t = sym_text(s);
                match self.vocab.find(t) {
                    Some(id) => out.push(id),
                    None => {
                        for &b in t.as_bytes() {
                            let id = if self.byte_encode {
                                // llama.cpp looks up the single (encoded) byte as a string
                                std::str::from_utf8(std::slice::from_ref(&b))
                                    .ok()
                                    .and_then(|s| self.vocab.find(s))
                            } else {
                                self.vocab.find(&format!("<0x{b:02X}>"))
                            };
                            if let Some(id) = id {
                                out.push(id);
                            }
                        }
                    }
                }
            }
        }
    }
}
