//! The limits that make rendering an untrusted template safe (see the module docs of
//! [`super`]): the longest tag's code, a big-stack thread for compiling and rendering, and
//! the capped output buffer.

use std::io;

use super::{ChatError, STACK_BYTES};

/// The code bytes of the longest tag (see [`MAX_TAG_CODE`]), by a lexical scan like
/// minijinja's: tags open with `{{`/`{%`, comments `{# #}` are skipped, quotes and
/// backslash escapes in string literals are honoured.
pub(super) fn longest_tag_code(src: &str) -> usize {
    let b = src.as_bytes();
    let (mut i, mut longest) = (0, 0);
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'{', b'#') => {
                i = src[i + 2..].find("#}").map_or(b.len(), |j| i + 2 + j + 2);
            }
            (b'{', open @ (b'{' | b'%')) => {
                let close = if open == b'{' { b'}' } else { b'%' };
                let (mut j, mut code, mut quote) = (i + 2, 0, None);
                while j < b.len() {
                    let c = b[j];
                    match quote {
                        Some(_) if c == b'\\' => j += 1,
                        Some(q) if c == q => quote = None,
                        Some(_) => {}
                        None if c == b'"' || c == b'\'' => quote = Some(c),
                        None if c == close && b.get(j + 1) == Some(&b'}') => break,
                        None if !c.is_ascii_whitespace() => code += 1,
                        None => {}
                    }
                    j += 1;
                }
                longest = longest.max(code);
                i = j + 2;
            }
            _ => i += 1,
        }
    }
    longest
}

/// Runs `f` on a thread with a [`STACK_BYTES`] stack; a panic in it becomes an error.
pub(super) fn on_big_stack<T: Send>(
    f: impl FnOnce() -> Result<T, ChatError> + Send,
) -> Result<T, ChatError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("chat-template".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(s, f)
            .map_err(ChatError::Thread)?
            .join()
            .unwrap_or(Err(ChatError::Panicked))
    })
}

/// The render's output buffer; fails the render once it would grow past `max`.
pub(super) struct CappedOutput {
    pub(super) buf: Vec<u8>,
    pub(super) max: usize,
    pub(super) full: bool,
}

impl io::Write for CappedOutput {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.buf.len() + b.len() > self.max {
            self.full = true;
            return Err(io::Error::other("chat template output too large"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
