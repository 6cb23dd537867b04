//! The hand-written matchers of llama.cpp's unicode.cpp for the common expressions (gpt2,
//! llama3 and its qwen2/qwen35 variants, newline runs), ported line for line. Each takes
//! the code points and the current piece lengths and returns the new piece lengths.

use super::super::unicode::{flags, to_lower, Flags};

const OUT_OF_RANGE: u32 = 0xFFFF_FFFF;

/// One piece of the text being split by a hand-written matcher, with llama.cpp's helpers.
struct Piece<'a> {
    cpts: &'a [u32],
    ini: usize,
    end: usize,
    prev_end: usize,
    out: &'a mut Vec<usize>,
}

impl Piece<'_> {
    #[inline]
    fn cpt(&self, pos: usize) -> u32 {
        if self.ini <= pos && pos < self.end {
            self.cpts[pos]
        } else {
            OUT_OF_RANGE
        }
    }
    #[inline]
    fn flags(&self, pos: usize) -> Flags {
        if self.ini <= pos && pos < self.end {
            flags(self.cpts[pos])
        } else {
            Flags(0)
        }
    }
    #[inline]
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

fn for_each_piece(cpts: &[u32], offsets: &[usize], mut f: impl FnMut(&mut Piece)) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &len in offsets {
        let mut p = Piece {
            cpts,
            ini: start,
            end: start + len,
            prev_end: start,
            out: &mut out,
        };
        f(&mut p);
        start += len;
    }
    out
}

/// The outer loop of the gpt2 and llama3 matchers: token by token through each piece, a
/// contraction (`ci`: case-insensitive) first, else `token(p, pos, cpt, flags)` matches
/// one at `pos` and returns where the next starts.
fn for_each_token(
    cpts: &[u32],
    offsets: &[usize],
    ci: bool,
    mut token: impl FnMut(&mut Piece, usize, u32, Flags) -> usize,
) -> Vec<usize> {
    for_each_piece(cpts, offsets, |p| {
        let mut pos = p.ini;
        while pos < p.end {
            let n = contraction(p, pos, ci);
            if n > 0 {
                pos += p.add(pos + n);
                continue;
            }
            pos = token(p, pos, p.cpt(pos), p.flags(pos));
        }
    })
}

fn is(c: u32, ch: char) -> bool {
    c == ch as u32
}

/// `'s|'t|'re|'ve|'m|'ll|'d` at `pos` (optionally case-insensitive): length matched.
fn contraction(p: &Piece, pos: usize, ci: bool) -> usize {
    if !is(p.cpt(pos), '\'') || pos + 1 >= p.end {
        return 0;
    }
    let low = |c: u32| if ci { to_lower(c) } else { c };
    let n = low(p.cpt(pos + 1));
    if is(n, 's') || is(n, 't') || is(n, 'm') || is(n, 'd') {
        return 2;
    }
    if pos + 2 < p.end {
        let nn = low(p.cpt(pos + 2));
        if (is(n, 'r') && is(nn, 'e')) || (is(n, 'v') && is(nn, 'e')) || (is(n, 'l') && is(nn, 'l'))
        {
            return 3;
        }
    }
    0
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
pub(super) fn split_gpt2(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    for_each_token(cpts, offsets, false, |p, mut pos, cpt, fl| {
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
        let sp = is(cpt, ' ');
        let f2 = if sp { p.flags(pos + 1) } else { fl };
        let other = |f: Flags| !(f.is_whitespace() || f.is_letter() || f.is_number()) && f.any();
        for class in [
            Flags::is_letter as fn(Flags) -> bool,
            Flags::is_number,
            other,
        ] {
            if class(f2) {
                pos += sp as usize;
                while class(p.flags(pos)) {
                    pos += 1;
                }
                p.add(pos);
                return pos;
            }
        }

        let mut nws = 0;
        while p.flags(pos + nws).is_whitespace() {
            nws += 1;
        }
        if nws > 1 && p.cpt(pos + nws) != OUT_OF_RANGE {
            pos += nws - 1;
            p.add(pos);
            return pos;
        }
        if nws > 0 {
            pos += nws;
            p.add(pos);
            return pos;
        }
        pos += 1;
        p.add(pos);
        pos
    })
}

/// llama3 (`\p{N}{1,3}`), qwen2 (`\p{N}`, `single_digits`) and qwen35 (as qwen2, with
/// `marks`: `[\p{L}\p{M}]+` letter runs and `\p{M}` excluded from punctuation runs):
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
pub(super) fn split_llama3(
    cpts: &[u32],
    offsets: &[usize],
    single_digits: bool,
    marks: bool,
) -> Vec<usize> {
    for_each_token(cpts, offsets, true, |p, mut pos, cpt, fl| {
        // [^\r\n\p{L}\p{N}]?\p{L}+ (qwen35: [\p{L}\p{M}]+)
        let letter = |f: Flags| f.is_letter() || (marks && f.is_accent_mark());
        if !(is(cpt, '\r') || is(cpt, '\n') || fl.is_number())
            && (letter(fl) || letter(p.flags(pos + 1)))
        {
            pos += 1;
            while letter(p.flags(pos)) {
                pos += 1;
            }
            p.add(pos);
            return pos;
        }

        if fl.is_number() {
            if single_digits {
                pos += 1;
                p.add(pos);
                return pos;
            }
            let mut ini = pos;
            while p.flags(pos).is_number() {
                pos += 1;
                if pos - ini >= 3 {
                    p.add(pos);
                    ini = pos;
                }
            }
            p.add(pos);
            return pos;
        }

        if !punct_run(p, &mut pos, cpt, fl, marks) {
            whitespace_tail(p, &mut pos);
        }
        pos
    })
}

/// ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with `\p{M}` excluded too for qwen35).
fn punct_run(p: &mut Piece, pos: &mut usize, cpt: u32, fl: Flags, marks: bool) -> bool {
    let sp = is(cpt, ' ');
    let mut f2 = if sp { p.flags(*pos + 1) } else { fl };
    let excluded = |f: Flags| {
        f.is_whitespace() || f.is_letter() || f.is_number() || (marks && f.is_accent_mark())
    };
    // llama.cpp tests `flags` (not `flags2`) for existence here
    if !excluded(f2) && fl.any() {
        *pos += sp as usize;
        while !excluded(f2) && f2.any() {
            *pos += 1;
            f2 = p.flags(*pos);
        }
        let mut c2 = p.cpt(*pos);
        while is(c2, '\r') || is(c2, '\n') {
            *pos += 1;
            c2 = p.cpt(*pos);
        }
        p.add(*pos);
        return true;
    }
    false
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+`, or a single unmatched code point.
fn whitespace_tail(p: &mut Piece, pos: &mut usize) {
    let mut nws = 0;
    let mut last_rn = 0;
    while p.flags(*pos + nws).is_whitespace() {
        let c2 = p.cpt(*pos + nws);
        if is(c2, '\r') || is(c2, '\n') {
            last_rn = *pos + nws + 1;
        }
        nws += 1;
    }
    if last_rn > 0 {
        *pos = last_rn;
        p.add(*pos);
        return;
    }
    if nws > 1 && p.cpt(*pos + nws) != OUT_OF_RANGE {
        *pos += nws - 1;
        p.add(*pos);
        return;
    }
    if nws > 0 {
        *pos += nws;
        p.add(*pos);
        return;
    }
    *pos += 1;
    p.add(*pos);
}

/// `[^\n]+|[\n]+`
pub(super) fn split_newlines(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &len in offsets {
        let end = start + len;
        let mut pos = start;
        while pos < end {
            let nl = cpts[pos] == '\n' as u32;
            let run = pos;
            while pos < end && (cpts[pos] == '\n' as u32) == nl {
                pos += 1;
            }
            out.push(pos - run);
        }
        start = end;
    }
    out
}
