//! A slot's text as it is generated: UTF-8-safe pieces (a token may end inside a
//! character), stop strings (text that may begin one is held back; the output is cut
//! before it). The same policy as `pocket_model::generate`'s loop, kept per slot because
//! the server steps many generations at once instead of looping over one.

use pocket_model::generate::{find_stop, stop_hold};
use pocket_model::tokenizer::{StreamDecoder, Tokenizer};

pub struct Output {
    stop: Vec<String>,
    dec: StreamDecoder,
    /// Everything kept so far.
    pub text: String,
    /// Bytes of `text` already handed to the client.
    sent: usize,
    /// Tokens whose text is not handed on yet.
    pending_tokens: Vec<u32>,
}

/// What one token changed.
pub struct Step {
    /// Text that is now final, and the tokens since the last piece.
    pub piece: Option<(String, Vec<u32>)>,
    /// The stop string the text reached.
    pub stopped: Option<String>,
}

impl Output {
    pub fn new(stop: Vec<String>) -> Output {
        Output {
            stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
            dec: StreamDecoder::new(),
            text: String::new(),
            sent: 0,
            pending_tokens: Vec::new(),
        }
    }

    /// Adds a generated token.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Step {
        self.pending_tokens.push(id);
        let piece = self.dec.push(tok, id, false);
        self.add(&piece)
    }

    /// The end of generation: what is still held back is final.
    pub fn finish(&mut self) -> Option<(String, Vec<u32>)> {
        let tail = self.dec.finish();
        let stopped = self.add(&tail);
        if stopped.stopped.is_some() {
            return stopped.piece;
        }
        let mut piece = stopped.piece;
        if self.text.len() > self.sent {
            let rest = self.text[self.sent..].to_string();
            self.sent = self.text.len();
            let toks = std::mem::take(&mut self.pending_tokens);
            piece = Some(match piece {
                Some((t, mut ids)) => (t + &rest, {
                    ids.extend(toks);
                    ids
                }),
                None => (rest, toks),
            });
        }
        piece
    }

    fn add(&mut self, piece: &str) -> Step {
        let from = self.sent;
        self.text.push_str(piece);
        if let Some((at, s)) = find_stop(&self.text[from..], &self.stop) {
            let stopped = Some(s.clone());
            self.text.truncate(from + at);
            return Step {
                piece: self.take(self.text.len()),
                stopped,
            };
        }
        let hold = stop_hold(&self.text[self.sent..], &self.stop);
        Step {
            piece: self.take(self.text.len() - hold),
            stopped: None,
        }
    }

    fn take(&mut self, end: usize) -> Option<(String, Vec<u32>)> {
        if end <= self.sent {
            return None;
        }
        let s = self.text[self.sent..end].to_string();
        self.sent = end;
        Some((s, std::mem::take(&mut self.pending_tokens)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds text pieces (as if each were a token's) and collects what is handed on.
    fn feed(stop: &[&str], pieces: &[&str]) -> (String, String, Option<String>) {
        let mut o = Output::new(stop.iter().map(|s| s.to_string()).collect());
        let mut got = String::new();
        for p in pieces {
            let st = o.add(p);
            if let Some((t, _)) = st.piece {
                got.push_str(&t);
            }
            if st.stopped.is_some() {
                return (got, o.text.clone(), st.stopped);
            }
        }
        if let Some((t, _)) = o.finish() {
            got.push_str(&t);
        }
        (got, o.text.clone(), None)
    }

    #[test]
    fn stop_strings_cut_and_partial_matches_are_held_then_released() {
        let (got, text, stop) = feed(&["</s>"], &["Hello", " wor", "ld<", "/", "s>", "x"]);
        assert_eq!(
            (got.as_str(), text.as_str()),
            ("Hello world", "Hello world")
        );
        assert_eq!(stop.as_deref(), Some("</s>"));
        let (got, _, stop) = feed(&["</s>"], &["a<", "b"]);
        assert_eq!((got.as_str(), stop), ("a<b", None));
        let (got, _, stop) = feed(&["\n\n", "User:"], &["é ok\nUs", "er: hi"]);
        assert_eq!((got.as_str(), stop.as_deref()), ("é ok\n", Some("User:")));
        let (got, _, _) = feed(&["STOP"], &["ST"]);
        assert_eq!(got, "ST", "a held-back prefix is released at the end");
    }
}
