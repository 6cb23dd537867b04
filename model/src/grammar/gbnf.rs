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

/// A Lark rule name for a GBNF one. GBNF names are `[a-zA-Z0-9-]`; Lark rule names are
/// lowercase, so an uppercase letter becomes `_` + its lowercase (no GBNF name has `_`,
/// so two names never meet).
fn mangle(name: &str) -> String {
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

fn emit(
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

/// llama.cpp's recursive-descent GBNF parser, over bytes of valid UTF-8.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.src.as_bytes().get(self.pos + k).copied()
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, GbnfError> {
        let (line, col) = line_col(self.src, self.pos);
        Err(GbnfError {
            line,
            col,
            msg: msg.into(),
        })
    }

    /// Spaces, tabs, `#` comments, and newlines where `newline_ok`.
    fn space(&mut self, newline_ok: bool) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' => self.pos += 1,
                b'#' => {
                    while self.peek().is_some_and(|b| b != b'\r' && b != b'\n') {
                        self.pos += 1;
                    }
                }
                b'\r' | b'\n' if newline_ok => self.pos += 1,
                _ => break,
            }
        }
    }

    /// All rules, in order; a rule defined twice keeps its last definition (llama.cpp).
    fn grammar(mut self) -> Result<Vec<(String, Expr)>, GbnfError> {
        let mut rules: Vec<(String, Expr)> = Vec::new();
        self.space(true);
        while self.peek().is_some() {
            let (name, body) = self.rule()?;
            match rules.iter_mut().find(|(n, _)| *n == name) {
                Some(r) => r.1 = body,
                None => rules.push((name, body)),
            }
        }
        Ok(rules)
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        if self.pos == start {
            return self.err("expecting a rule name");
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn rule(&mut self) -> Result<(String, Expr), GbnfError> {
        let name = self.name()?;
        self.space(false);
        if !self.src[self.pos..].starts_with("::=") {
            return self.err(format!("expecting ::= after rule name '{name}'"));
        }
        self.pos += 3;
        self.space(true);
        let body = self.alternates(false)?;
        match self.peek() {
            Some(b'\r') => {
                self.pos += 1;
                if self.peek() == Some(b'\n') {
                    self.pos += 1;
                }
            }
            Some(b'\n') => self.pos += 1,
            None => {}
            Some(_) => return self.err("expecting a newline or the end of the grammar"),
        }
        self.space(true);
        Ok((name, body))
    }

    fn alternates(&mut self, nested: bool) -> Result<Expr, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some(b'|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().expect("one")
        } else {
            Expr::Alt(alts)
        })
    }

    fn sequence(&mut self, nested: bool) -> Result<Expr, GbnfError> {
        let mut items: Vec<Expr> = Vec::new();
        while let Some(b) = self.peek() {
            match b {
                b'"' => {
                    self.pos += 1;
                    let mut s = String::new();
                    loop {
                        match self.peek() {
                            None => return self.err("unexpected end of input in a string"),
                            Some(b'"') => break,
                            _ => {
                                let c = self.char()?;
                                match char::from_u32(c) {
                                    Some(c) => s.push(c),
                                    None => {
                                        return self.err(format!(
                                        "U+{c:X} is not a character (a surrogate or past U+10FFFF)"
                                    ))
                                    }
                                }
                            }
                        }
                    }
                    self.pos += 1;
                    items.push(Expr::Lit(s));
                }
                b'[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some(b'^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None => return self.err("unexpected end of input in a class"),
                            Some(b']') => break,
                            _ => {}
                        }
                        let lo = self.char()?;
                        let mut hi = lo;
                        if self.peek() == Some(b'-') && self.peek_at(1) != Some(b']') {
                            self.pos += 1;
                            if self.peek().is_none() {
                                return self.err("unexpected end of input in a class");
                            }
                            hi = self.char()?;
                        }
                        ranges.push((lo, hi));
                    }
                    self.pos += 1;
                    items.push(Expr::Class { negated, ranges });
                }
                b'<' | b'!' => {
                    let negated = b == b'!';
                    if negated {
                        self.pos += 1;
                    }
                    let token = self.token()?;
                    items.push(Expr::Token { negated, token });
                }
                b'(' => {
                    self.pos += 1;
                    self.space(true);
                    let inner = self.alternates(true)?;
                    if self.peek() != Some(b')') {
                        return self.err("expecting ')'");
                    }
                    self.pos += 1;
                    items.push(inner);
                }
                b'.' => {
                    self.pos += 1;
                    items.push(Expr::Any);
                }
                b'*' | b'+' | b'?' | b'{' => {
                    let Some(last) = items.pop() else {
                        return self
                            .err(format!("'{}' has no item before it to repeat", b as char));
                    };
                    let (min, max) = self.repetition()?;
                    items.push(Expr::Repeat {
                        item: Box::new(last),
                        min,
                        max,
                    });
                    self.space(nested);
                    continue;
                }
                b if is_word(b) => items.push(Expr::Ref(self.name()?)),
                _ => break,
            }
            self.space(nested);
        }
        Ok(if items.len() == 1 {
            items.pop().expect("one")
        } else {
            Expr::Seq(items)
        })
    }

    /// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`, as llama.cpp bounds them.
    fn repetition(&mut self) -> Result<(u64, Option<u64>), GbnfError> {
        let b = self.peek().expect("caller peeked");
        self.pos += 1;
        let (min, max) = match b {
            b'*' => (0, None),
            b'+' => (1, None),
            b'?' => (0, Some(1)),
            _ => {
                self.space(true);
                let min = self.int()?;
                self.space(true);
                let max = match self.peek() {
                    Some(b'}') => Some(min),
                    Some(b',') => {
                        self.pos += 1;
                        self.space(true);
                        let max = match self.peek() {
                            Some(d) if d.is_ascii_digit() => Some(self.int()?),
                            _ => None,
                        };
                        self.space(true);
                        if self.peek() != Some(b'}') {
                            return self.err("expecting '}'");
                        }
                        max
                    }
                    _ => return self.err("expecting ',' or '}'"),
                };
                self.pos += 1;
                if min > MAX_REPETITION {
                    return self.err(format!(
                        "{min} repetitions exceed the limit of {MAX_REPETITION}"
                    ));
                }
                if let Some(m) = max {
                    if m < min {
                        return self.err(format!(
                            "repetition {{{min},{m}}}: the maximum is below the minimum"
                        ));
                    }
                }
                (min, max.filter(|&m| m <= MAX_REPETITION))
            }
        };
        Ok((min, max))
    }

    fn int(&mut self) -> Result<u64, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return self.err("expecting an integer");
        }
        match self.src[start..self.pos].parse() {
            Ok(n) => Ok(n),
            Err(_) => self.err("the integer is too large"),
        }
    }

    /// One character of a string or class: an escape or a UTF-8 character.
    fn char(&mut self) -> Result<u32, GbnfError> {
        let rest = &self.src[self.pos..];
        if let Some(esc) = rest.strip_prefix('\\') {
            let e = esc.as_bytes().first().copied();
            let hex = |n: usize| -> Option<u32> {
                let h = esc.get(1..1 + n)?;
                h.bytes()
                    .all(|b| b.is_ascii_hexdigit())
                    .then(|| u32::from_str_radix(h, 16).ok())?
            };
            let (c, len) = match e {
                Some(b'x') => (hex(2), 4),
                Some(b'u') => (hex(4), 6),
                Some(b'U') => (hex(8), 10),
                Some(b't') => (Some(9), 2),
                Some(b'r') => (Some(13), 2),
                Some(b'n') => (Some(10), 2),
                Some(b @ (b'\\' | b'"' | b'[' | b']' | b'-')) => (Some(b as u32), 2),
                _ => return self.err("unknown escape"),
            };
            let Some(c) = c else {
                return self.err(format!("expecting {} hex digits", len - 2));
            };
            self.pos += len;
            return Ok(c);
        }
        match rest.chars().next() {
            Some(c) => {
                self.pos += c.len_utf8();
                Ok(c as u32)
            }
            None => self.err("unexpected end of input"),
        }
    }

    /// `<[id]>` or `<text>`.
    fn token(&mut self) -> Result<TokenRef, GbnfError> {
        if self.peek() != Some(b'<') {
            return self.err("expecting '<'");
        }
        self.pos += 1;
        if self.peek() == Some(b'[') {
            self.pos += 1;
            let id = self.int()?;
            if self.peek() != Some(b']') || self.peek_at(1) != Some(b'>') {
                return self.err("expecting ']>'");
            }
            self.pos += 2;
            return match u32::try_from(id) {
                Ok(id) => Ok(TokenRef::Id(id)),
                Err(_) => self.err("the token id is too large"),
            };
        }
        let start = self.pos - 1;
        match self.src[self.pos..].find('>') {
            Some(end) => {
                self.pos += end + 1;
                Ok(TokenRef::Text(self.src[start..self.pos].to_string()))
            }
            None => self.err("expecting '>'"),
        }
    }
}

#[cfg(test)]
#[path = "gbnf_tests.rs"]
mod tests;
