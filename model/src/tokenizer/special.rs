//! Special-token partitioning of the prompt text (llama.cpp's `tokenizer_st_partition`).
//!
//! Every control, user-defined and unknown token is searched for in the raw text, longest
//! token first; each occurrence becomes a fragment of its own and the text around it is left
//! for the tokenizer proper. Control and unknown tokens are only recognised with
//! `parse_special`; user-defined tokens always are (as Hugging Face tokenizers do).

use super::attr;
use super::vocab::Vocab;

/// A piece of the prompt: raw text (byte range of the input) or an already-known token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text { start: usize, len: usize },
    Token(u32),
}

/// The ids that take part in partitioning, longest text first (`cache_special_tokens`).
pub(crate) fn special_cache(vocab: &Vocab) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&id| vocab.attr(id) & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
        .collect();
    // llama.cpp uses an unstable std::sort on length alone; ties keep id order here.
    ids.sort_by_key(|&id| std::cmp::Reverse(vocab.text(id).len()));
    ids
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Splits `text` into fragments around the special tokens of `cache`.
pub(crate) fn partition(
    vocab: &Vocab,
    cache: &[u32],
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text {
        start: 0,
        len: text.len(),
    });

    for &id in cache {
        let a = vocab.attr(id);
        if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let tok = vocab.text(id);
        if tok.is_empty() {
            continue;
        }
        let mut out = Vec::with_capacity(frags.len() + 2);
        let mut changed = false;
        for &f in &frags {
            let Fragment::Text { start, len } = f else {
                out.push(f);
                continue;
            };
            let (mut base, mut blen) = (start, len);
            loop {
                let Some(rel) = text[base..base + blen].find(tok) else {
                    out.push(Fragment::Text {
                        start: base,
                        len: blen,
                    });
                    break;
                };
                changed = true;
                let m = base + rel;
                if m > base {
                    let mut left_len = m - base;
                    if a & attr::LSTRIP != 0 {
                        while left_len > 0 && is_c_space(bytes[base + left_len - 1]) {
                            left_len -= 1;
                        }
                    }
                    if left_len > 0 {
                        out.push(Fragment::Text {
                            start: base,
                            len: left_len,
                        });
                    }
                }
                out.push(Fragment::Token(id));
                let end = m + tok.len();
                if end < base + blen {
                    let mut r_off = end;
                    let mut r_len = blen - (m - base + tok.len());
                    if a & attr::RSTRIP != 0 {
                        while r_len > 0 && is_c_space(bytes[r_off]) {
                            r_off += 1;
                            r_len -= 1;
                        }
                    }
                    if r_len == 0 {
                        break;
                    }
                    base = r_off;
                    blen = r_len;
                } else {
                    break;
                }
            }
        }
        if changed {
            frags = out;
        }
    }
    frags
}
