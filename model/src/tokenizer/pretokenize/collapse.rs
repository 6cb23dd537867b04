//! How llama.cpp runs a general expression (`unicode_regex_split`): expressions with
//! `\p{..}` classes run on a "collapsed" text with one byte per code point (ASCII as is,
//! else a byte for its category), the others on the code points with non-ASCII whitespace
//! replaced by U+000B; matches and the gaps between them become pieces.

use super::super::unicode::{flags, Flags};
use super::super::TokenizerError;

/// `k_ucat_enum`: the `\p{..}` names llama.cpp collapses, with their category byte and
/// ASCII members (regex syntax).
fn ucat(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "\\p{N}" => ("\\xD1", "0-9"),
        "\\p{L}" | "\\p{Lu}" | "\\p{Ll}" | "\\p{Lt}" | "\\p{Lm}" | "\\p{Lo}" => ("\\xD2", "A-Za-z"),
        "\\p{P}" => ("\\xD3", "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"),
        "\\p{M}" => ("\\xD4", ""),
        "\\p{S}" => ("\\xD5", "\\$\\+<->\\^`\\|\\~"),
        _ => return None,
    })
}

const UCAT_NAMES: [&str; 10] = [
    "\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}",
    "\\p{Lo}",
];

pub(super) fn uses_ucat(expr: &str) -> bool {
    UCAT_NAMES.iter().any(|n| expr.contains(n))
}

/// The collapsed form of an expression (the loop in `unicode_regex_split`).
pub(super) fn collapse_expr(expr: &str) -> Result<String, TokenizerError> {
    if !expr.is_ascii() {
        return Err(TokenizerError::Regex(format!(
            "expression mixes unicode categories and non-ASCII characters: {expr:?}"
        )));
    }
    let b = expr.as_bytes();
    let mut out = String::from("(?-u)");
    let mut inside = false;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && b[i] == b']' && b[i - 1] != b'\\' {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1] == b'p' && b[i + 2] == b'{' {
            if let Some(rel) = expr[i + 3..].find('}') {
                let close = i + 3 + rel;
                if close <= i + 10 {
                    if let Some((byte, members)) = ucat(&expr[i..=close]) {
                        if !inside {
                            out.push('[');
                        }
                        out.push_str(byte);
                        out.push_str(members);
                        if !inside {
                            out.push(']');
                        }
                        i = close + 1;
                        continue;
                    }
                }
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    Ok(out)
}

/// One byte per code point: ASCII as is, whitespace → 0x0B, else the category byte.
pub(super) fn collapse_cpt(c: u32) -> u8 {
    if c < 128 {
        return c as u8;
    }
    let f = flags(c);
    if f.is_whitespace() {
        return 0x0B;
    }
    match f.category() {
        Flags::NUMBER => 0xD1,
        Flags::LETTER => 0xD2,
        Flags::PUNCTUATION => 0xD3,
        Flags::ACCENT_MARK => 0xD4,
        Flags::SYMBOL => 0xD5,
        _ => 0xD0,
    }
}

/// The code points as a string with non-ASCII whitespace replaced by U+000B, and the byte
/// offset of each code point (plus the end).
pub(super) fn wide_text(cpts: &[u32]) -> (String, Vec<usize>) {
    let mut s = String::with_capacity(cpts.len());
    let mut offs = Vec::with_capacity(cpts.len() + 1);
    for &c in cpts {
        offs.push(s.len());
        let c = if c > 0x7F && flags(c).is_whitespace() {
            0x0B
        } else {
            c
        };
        s.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
    }
    offs.push(s.len());
    (s, offs)
}

/// `unicode_regex_split_stl`: within each piece, matches and the gaps between them become
/// pieces. `find(start, end)` returns the matches in code point positions.
pub(super) fn split_regex(
    offsets: &[usize],
    find: impl Fn(usize, usize) -> Vec<(usize, usize)>,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &len in offsets {
        let mut prev = start;
        for (ms, me) in find(start, start + len) {
            if me == ms {
                continue;
            }
            if ms > prev {
                out.push(ms - prev);
            }
            out.push(me - ms);
            prev = me;
        }
        if prev < start + len {
            out.push(start + len - prev);
        }
        start += len;
    }
    out
}
