//! From tokens back to text: a token's piece (bytes, which may end inside a UTF-8
//! sequence), `llama_detokenize` with its space clean-up, and the [`StreamDecoder`] that
//! holds back unfinished UTF-8 sequences while streaming.

use super::{attr, unicode, Model, Tokenizer};

impl Tokenizer {
    /// The bytes of one token, rendering control tokens as their text
    /// (`llama_token_to_piece(.., special = true)`). May be part of a UTF-8 sequence.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        let mut v = Vec::new();
        self.piece_into(id, true, &mut v);
        v
    }

    /// `llama_token_to_piece`: with `special == false` control and unknown tokens give
    /// nothing. Unknown ids give nothing.
    pub fn piece_into(&self, id: u32, special: bool, out: &mut Vec<u8>) {
        if id as usize >= self.vocab.len() {
            return;
        }
        let a = self.vocab.attr(id);
        let text = self.vocab.text(id);
        if !special && a & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return;
        }
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            out.extend_from_slice(text.as_bytes());
        } else if a & attr::NORMAL != 0 {
            match self.model {
                Model::Bpe { .. } if !self.settings.escape_whitespaces => {
                    decode_byte_level(text, out)
                }
                _ => out.extend_from_slice(text.replace('▁', " ").as_bytes()),
            }
        } else if a & attr::BYTE != 0 {
            out.push(
                text.get(3..5)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .unwrap_or(0),
            );
        }
    }

    /// The text of `ids`: their pieces (control tokens included) joined, invalid UTF-8
    /// replaced by U+FFFD. No space clean-up: `decode(encode(s)) == s` for BPE models.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            self.piece_into(id, true, &mut bytes);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    /// `llama_detokenize` exactly: drops the leading space an SPM prefix added, optionally
    /// the added BOS/EOS (`remove_special`), renders control tokens if `unparse_special`,
    /// and applies the model's `clean_up_tokenization_spaces`.
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        let mut ids = ids;
        let mut remove_space = self.settings.add_space_prefix;
        if remove_special
            && self.settings.add_bos
            && !ids.is_empty()
            && Some(ids[0]) == self.ids.bos
        {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special
            && self.settings.add_eos
            && ids.last().is_some_and(|&l| Some(l) == self.ids.eos)
        {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        let mut piece = Vec::new();
        for &id in ids {
            piece.clear();
            self.piece_into(id, unparse_special, &mut piece);
            let skip = (remove_space && piece.first() == Some(&b' ')) as usize;
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if self.settings.clean_spaces {
            clean_spaces(&mut text);
        }
        text
    }
}

/// `llama_decode_text`: GPT-2 byte characters back to bytes.
fn decode_byte_level(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match unicode::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// The three clean-up passes of `llama_vocab::impl::detokenize`, byte for byte.
fn clean_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ,"
    let total1 = text.len();
    let mut total = usize::from(total1 > 0);
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // " ' " → "'"
    let total2 = text.len();
    let mut total = usize::from(total2 > 0);
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // " 's", " 'm", " 're", " 've" → without the space
    let total3 = text.len();
    let mut total = usize::from(total3 > 0);
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Turns a stream of token pieces into text, holding back bytes of an unfinished UTF-8
/// sequence until the next piece completes it.
#[derive(Default, Debug)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds token `id`'s piece; returns the text that is now complete (maybe empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32, special: bool) -> String {
        tok.piece_into(id, special, &mut self.pending);
        self.take_complete()
    }

    /// Adds raw bytes; returns the text that is now complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        self.take_complete()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let ok = start + e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[start..ok]).unwrap());
                    match e.error_len() {
                        // an unfinished sequence at the end: keep it
                        None => {
                            start = ok;
                            break;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            start = ok + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Flushes what is left (an unfinished sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_shareable() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
        check::<StreamDecoder>();
    }

    #[test]
    fn clean_up() {
        let mut v = b"Hello , world ! it 's a ' b ' c".to_vec();
        clean_spaces(&mut v);
        assert_eq!(std::str::from_utf8(&v).unwrap(), "Hello, world! it's a'b'c");
    }

    #[test]
    fn stream_decoder_holds_partial_utf8() {
        let mut d = StreamDecoder::new();
        let s = "é🦙".as_bytes();
        assert_eq!(d.push_bytes(&s[..1]), "");
        assert_eq!(d.push_bytes(&s[1..3]), "é");
        assert_eq!(d.push_bytes(&s[3..5]), "");
        assert_eq!(d.push_bytes(&s[5..]), "🦙");
        assert_eq!(d.push_bytes(&[0xFF, b'a']), "\u{FFFD}a");
        assert_eq!(d.push_bytes(&[0xE2]), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
