//! The GBNF parser, rule for rule llama.cpp's `llama-grammar.cpp`.

use super::{line_col, Expr, GbnfError, TokenRef, MAX_REPETITION};

/// llama.cpp's recursive-descent GBNF parser, over bytes of valid UTF-8.
pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) pos: usize,
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

    /// Whether more of a string or class comes before its `close` byte (not consumed); an
    /// error naming `what` at the end of the input.
    fn before(&self, close: u8, what: &str) -> Result<bool, GbnfError> {
        match self.peek() {
            None => self.err(format!("unexpected end of input in {what}")),
            Some(b) => Ok(b != close),
        }
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
    pub(super) fn grammar(mut self) -> Result<Vec<(String, Expr)>, GbnfError> {
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
                    while self.before(b'"', "a string")? {
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
                    while self.before(b']', "a class")? {
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
