//! The Lark writer: one Lark rule per GBNF rule, one lexeme per literal, character class
//! or `.` (see the module's header for why nothing is merged into a terminal).

use super::{Expr, TokenRef, ANY};
use std::fmt::Write;

/// A Lark rule name for a GBNF one. GBNF names are `[a-zA-Z0-9-]`; Lark rule names are
/// lowercase, so an uppercase letter becomes `_` + its lowercase (no GBNF name has `_`,
/// so two names never meet).
pub(super) fn mangle(name: &str) -> String {
    let mut s = String::from("g_");
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

pub(super) fn emit(
    e: &Expr,
    out: &mut String,
    resolve: &dyn Fn(&str) -> Option<u32>,
    top: bool,
) -> Result<(), String> {
    match e {
        Expr::Alt(alts) => {
            // An empty alternative makes the group optional (no empty lexemes).
            let full: Vec<&Expr> = alts.iter().filter(|a| !is_empty(a)).collect();
            let optional = full.len() < alts.len();
            if full.is_empty() {
                out.push_str("\"\"");
                return Ok(());
            }
            let wrap = optional || (!top && full.len() > 1);
            if wrap {
                out.push('(');
            }
            for (i, a) in full.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                emit(a, out, resolve, true)?;
            }
            if wrap {
                out.push(')');
            }
            if optional {
                out.push('?');
            }
        }
        Expr::Seq(items) => {
            if items.is_empty() {
                out.push_str("\"\"");
            }
            if items.len() > 1 && !top {
                out.push('(');
            }
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                emit(x, out, resolve, false)?;
            }
            if items.len() > 1 && !top {
                out.push(')');
            }
        }
        Expr::Lit(s) => lark_string(s, out),
        Expr::Class { negated, ranges } => {
            let valid: Vec<(u32, u32)> = ranges.iter().flat_map(|&r| scalar_ranges(r)).collect();
            if valid.is_empty() {
                // `[]` matches nothing, `[^]` anything: classes regex-syntax can write.
                out.push_str(if *negated {
                    ANY
                } else {
                    "/[^\\x{0}-\\x{10FFFF}]/"
                });
                return Ok(());
            }
            out.push_str(if *negated { "/[^" } else { "/[" });
            for (lo, hi) in valid {
                let _ = write!(out, "\\x{{{lo:X}}}");
                if hi != lo {
                    let _ = write!(out, "-\\x{{{hi:X}}}");
                }
            }
            out.push_str("]/");
        }
        Expr::Any => out.push_str(ANY),
        Expr::Ref(r) => out.push_str(&mangle(r)),
        Expr::Token { negated, token } => {
            let id = match token {
                TokenRef::Id(id) => *id,
                TokenRef::Text(t) => resolve(t)
                    .ok_or_else(|| format!("{t} is not exactly one token of this vocabulary"))?,
            };
            let _ = write!(out, "<[{}{id}]>", if *negated { "^" } else { "" });
        }
        Expr::Repeat { max: Some(0), .. } => {
            // `x{0}`: nothing (Lark refuses a range ending at 0).
            out.push_str("\"\"");
        }
        Expr::Repeat { item, min, max } => {
            let atomic = match &**item {
                Expr::Seq(v) => v.len() == 1,
                Expr::Alt(_) | Expr::Repeat { .. } => false,
                _ => true,
            };
            if !atomic {
                out.push('(');
            }
            emit(item, out, resolve, !atomic)?;
            if !atomic {
                out.push(')');
            }
            match (min, max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => {
                    let _ = write!(out, "{{{m},}}");
                }
                (m, Some(n)) if m == n => {
                    let _ = write!(out, "{{{m}}}");
                }
                (m, Some(n)) => {
                    let _ = write!(out, "{{{m},{n}}}");
                }
            }
        }
    }
    Ok(())
}

fn is_empty(e: &Expr) -> bool {
    match e {
        Expr::Seq(v) => v.iter().all(is_empty),
        Expr::Lit(s) => s.is_empty(),
        _ => false,
    }
}

/// A code-point range as Unicode scalar ranges (no surrogates, nothing past U+10FFFF):
/// GBNF's `\U` escapes can name code points a regex cannot.
fn scalar_ranges((lo, hi): (u32, u32)) -> Vec<(u32, u32)> {
    let hi = hi.min(0x10FFFF);
    let mut v = Vec::new();
    if lo > hi {
        return v;
    }
    if lo < 0xD800 {
        v.push((lo, hi.min(0xD7FF)));
    }
    if hi > 0xDFFF {
        v.push((lo.max(0xE000), hi));
    }
    v
}

/// A Lark string literal (JSON string syntax; DEL and control characters escaped).
fn lark_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
