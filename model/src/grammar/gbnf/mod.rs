//! GBNF (llama.cpp's grammar format, `grammars/README.md`) to llguidance's Lark, because
//! llguidance has no GBNF front end. The parser follows llama.cpp's `llama-grammar.cpp`
//! (b11434) rule for rule: the same names (`[a-zA-Z0-9-]`), escapes, character classes,
//! repetitions (`{m,n}` capped at 2000), token references (`<[id]>`, `<text>`, `!<...>`),
//! comments and where newlines may stand; a grammar llama.cpp refuses is refused here with
//! the line and column of the problem.
//!
//! The translation is one to one: every GBNF rule becomes a Lark *rule* (lowercase), every
//! literal a string lexeme and every character class or `.` a one-character regex lexeme.
//! No rule is merged into a Lark terminal (uppercase, one regex), unlike llguidance's own
//! `gbnf_to_lark.py`: llguidance lexes terminals greedily, so a terminal that can grow by
//! a character that may also follow it (`ident ::= [a-z]+ ws` before `"\n"` in
//! `arithmetic.gbnf`, where `ws` takes newlines) would swallow that character and the
//! grammar could never finish. With lexemes of bounded length the language is GBNF's.

mod lark;
mod parse;

use lark::{emit, mangle};
use parse::Parser;
use std::fmt::Write;

/// A GBNF grammar llama.cpp would refuse, with where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {msg}")]
pub struct GbnfError {
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

/// A token named in a grammar: `<[id]>` or `<text>` (the text must be one token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRef {
    Id(u32),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    Alt(Vec<Expr>),
    Seq(Vec<Expr>),
    Lit(String),
    /// Inclusive code-point ranges; `negated` matches any other character.
    Class {
        negated: bool,
        ranges: Vec<(u32, u32)>,
    },
    Any,
    Ref(String),
    Token {
        negated: bool,
        token: TokenRef,
    },
    Repeat {
        item: Box<Expr>,
        min: u64,
        max: Option<u64>,
    },
}

/// llama.cpp's `MAX_REPETITION_THRESHOLD`: a larger minimum is an error, a larger
/// maximum means unbounded.
const MAX_REPETITION: u64 = 2000;

/// GBNF's `.`: any character, newlines included.
const ANY: &str = "/[\\x{0}-\\x{10FFFF}]/";

/// Converts a GBNF grammar (start rule `root`) to llguidance Lark. `resolve` turns a
/// `<text>` token reference into its id (None: not exactly one token of the vocabulary).
pub fn gbnf_to_lark(src: &str, resolve: &dyn Fn(&str) -> Option<u32>) -> Result<String, GbnfError> {
    let rules = Parser { src, pos: 0 }.grammar()?;
    let find = |name: &str| rules.iter().find(|(n, _)| n == name);
    if find("root").is_none() {
        return Err(GbnfError {
            line: 1,
            col: 1,
            msg: "the grammar has no 'root' rule".into(),
        });
    }
    let mut out = String::from("start: g_root\n");
    for (name, body) in &rules {
        check_refs(body, &|r| find(r).is_some())
            .map_err(|r| rule_error(src, name, format!("undefined rule '{r}'")))?;
        let mut text = String::new();
        emit(body, &mut text, resolve, true).map_err(|m| rule_error(src, name, m))?;
        let _ = writeln!(out, "{}: {text}", mangle(name));
    }
    Ok(out)
}

/// Whether `text` is llguidance Lark rather than GBNF (`%llguidance` or a `start:` rule,
/// as llguidance's `any_to_lark`; a GBNF rule needs `::=`).
pub fn is_lark(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("%llguidance")
            || (l.starts_with("start") && l["start".len()..].trim_start().starts_with(':'))
    })
}

fn rule_error(src: &str, rule: &str, msg: String) -> GbnfError {
    // Point at the rule's definition.
    let at = src
        .match_indices(rule)
        .map(|(i, _)| i)
        .find(|&i| src[i + rule.len()..].trim_start().starts_with("::="))
        .unwrap_or(0);
    let (line, col) = line_col(src, at);
    GbnfError {
        line,
        col,
        msg: format!("rule '{rule}': {msg}"),
    }
}

fn line_col(src: &str, at: usize) -> (usize, usize) {
    let before = &src[..at.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn check_refs(e: &Expr, defined: &dyn Fn(&str) -> bool) -> Result<(), String> {
    match e {
        Expr::Alt(v) | Expr::Seq(v) => v.iter().try_for_each(|x| check_refs(x, defined)),
        Expr::Ref(r) if !defined(r) => Err(r.clone()),
        Expr::Repeat { item, .. } => check_refs(item, defined),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
