//! llama.cpp's `llm_symbol`, the doubly linked pieces of text that the SPM and BPE sessions
//! merge pairwise.

/// A piece `start..start + n` of the text being merged, linked to its neighbours by index
/// (`-1` past either end); a symbol merged into its left neighbour has `n == 0`.
#[derive(Clone, Copy)]
pub(super) struct Symbol {
    pub prev: i32,
    pub next: i32,
    pub start: usize,
    pub n: usize,
}

/// Appends one symbol per character of `text` to `symbols`, linked in order (the start of
/// both sessions).
pub(super) fn push_chars(text: &str, symbols: &mut Vec<Symbol>) {
    for (idx, (start, ch)) in (0i32..).zip(text.char_indices()) {
        let n = ch.len_utf8();
        symbols.push(Symbol {
            prev: idx - 1,
            next: if start + n == text.len() { -1 } else { idx + 1 },
            start,
            n,
        });
    }
}

/// Merges symbol `right` into its left neighbour `left`: `left` takes over its bytes and its
/// `next` link, and `right` is left empty (the merge step of both sessions).
pub(super) fn merge(symbols: &mut [Symbol], left: i32, right: i32) {
    let (li, ri) = (left as usize, right as usize);
    symbols[li].n += symbols[ri].n;
    symbols[ri].n = 0;
    symbols[li].next = symbols[ri].next;
    let rnext = symbols[ri].next;
    if rnext >= 0 {
        symbols[rnext as usize].prev = left;
    }
}
