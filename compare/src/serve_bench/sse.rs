//! The streamed body of a native `/completion` request (llama-server's shape, which
//! `pocket serve` shares): Server-Sent Events whose `data:` payloads are JSON objects, one
//! per generated token with `"stop": false`, then a final one with `"stop": true`,
//! `tokens_predicted` and `timings`.

use serde_json::Value;

use super::ServeBenchError;

/// Splits an SSE byte stream into events as bytes arrive (events may straddle reads).
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// Adds bytes; returns the `data` field of every event they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some((end, sep)) = event_end(&self.buf) {
            let block: Vec<u8> = self.buf.drain(..end + sep).take(end).collect();
            if let Some(data) = event_data(&String::from_utf8_lossy(&block)) {
                out.push(data);
            }
        }
        out
    }
}

/// Where the first complete event ends, and the length of its blank-line separator.
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = find(buf, b"\n\n").map(|i| (i, 2));
    let crlf = find(buf, b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The `data` of one event block (its `data:` lines joined by newlines), if it has any.
fn event_data(block: &str) -> Option<String> {
    let lines: Vec<&str> = block
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// One event of a `/completion` stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Chunk {
    /// A generated piece (possibly empty text: a token inside a multi-byte character).
    Token(String),
    /// The last event: what the server says it generated and evaluated.
    Final(FinalStats),
}

/// The final event's counts and the server's own timings.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalStats {
    pub tokens_predicted: u64,
    pub tokens_evaluated: u64,
    /// `timings.prompt_n`: prompt tokens evaluated (not taken from the cache).
    pub prompt_n: Option<u64>,
    /// `timings.prompt_ms` / `predicted_ms`, when the server sends them.
    pub prompt_ms: Option<f64>,
    pub predicted_ms: Option<f64>,
    /// `timings.draft_n` / `draft_n_accepted`: speculative tokens drafted and kept (both
    /// servers send them only when something was drafted).
    pub draft_n: Option<u64>,
    pub draft_n_accepted: Option<u64>,
}

/// Reads one `data` payload of a native completion stream.
pub fn parse_chunk(data: &str) -> Result<Chunk, ServeBenchError> {
    let bad = |why: &str| ServeBenchError::Stream(format!("{why}: {}", shorten(data)));
    let v: Value = serde_json::from_str(data).map_err(|_| bad("not JSON"))?;
    if let Some(e) = v.get("error") {
        return Err(ServeBenchError::Stream(format!(
            "the server sent an error: {e}"
        )));
    }
    match v.get("stop").and_then(Value::as_bool) {
        Some(false) => Ok(Chunk::Token(
            v.get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        )),
        Some(true) => {
            let count = |k: &str| v.get(k).and_then(Value::as_u64);
            let timing = |k: &str| {
                v.get("timings")
                    .and_then(|t| t.get(k))
                    .and_then(Value::as_f64)
            };
            Ok(Chunk::Final(FinalStats {
                tokens_predicted: count("tokens_predicted")
                    .ok_or_else(|| bad("final event without tokens_predicted"))?,
                tokens_evaluated: count("tokens_evaluated").unwrap_or(0),
                prompt_n: timing("prompt_n").map(|n| n as u64),
                prompt_ms: timing("prompt_ms"),
                predicted_ms: timing("predicted_ms"),
                draft_n: timing("draft_n").map(|n| n as u64),
                draft_n_accepted: timing("draft_n_accepted").map(|n| n as u64),
            }))
        }
        None => Err(bad("event without a boolean \"stop\"")),
    }
}

fn shorten(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from llama-server b11434 (`/completion`, token-id prompt, `n_predict` 3,
    /// `stream`, `ignore_eos`, `cache_prompt: false`, SmolLM2-135M-Instruct Q4_1) with curl,
    /// byte for byte.
    const LLAMA_SERVER_STREAM: &str = include_str!("llama_server_stream.txt");

    #[test]
    fn reads_llama_servers_stream() {
        let mut p = SseParser::default();
        // Fed in awkward pieces, as a socket may deliver it.
        let bytes = LLAMA_SERVER_STREAM.as_bytes();
        let mut events = Vec::new();
        for piece in bytes.chunks(7) {
            events.extend(p.push(piece));
        }
        let chunks: Vec<Chunk> = events.iter().map(|d| parse_chunk(d).unwrap()).collect();
        let (last, tokens) = chunks.split_last().unwrap();
        let text = [" and", " traders", " from"].map(|t| Chunk::Token(t.into()));
        assert_eq!(tokens, &text);
        let Chunk::Final(f) = last else {
            panic!("no final event: {last:?}")
        };
        assert_eq!(f.tokens_predicted, 3);
        assert_eq!(f.tokens_evaluated, 16);
        assert!(f.prompt_ms.unwrap() > 0.0 && f.predicted_ms.unwrap() > 0.0);
        // Nothing drafted: llama-server leaves the draft counts out.
        assert_eq!((f.draft_n, f.draft_n_accepted), (None, None));
    }

    /// Captured from llama-server b11434 started with `--spec-type ngram-simple
    /// --spec-draft-n-max 8` (SmolLM2-135M-Instruct Q4_1, `-np 1`): the quoting workload's
    /// chat prompt as token ids, `n_predict` 24, greedy, streamed, with curl.
    const LLAMA_SERVER_SPEC_STREAM: &str = include_str!("llama_server_spec_stream.txt");

    #[test]
    fn reads_llama_servers_draft_counts_and_text() {
        let mut p = SseParser::default();
        let events = p.push(LLAMA_SERVER_SPEC_STREAM.as_bytes());
        let chunks: Vec<Chunk> = events.iter().map(|d| parse_chunk(d).unwrap()).collect();
        let (last, tokens) = chunks.split_last().unwrap();
        let text: String = tokens
            .iter()
            .map(|c| match c {
                Chunk::Token(t) => t.as_str(),
                Chunk::Final(_) => panic!("a final event before the last"),
            })
            .collect();
        // The passage the prompt asks to repeat, copied.
        assert!(text.starts_with("The old railway station stood at the edge of the town"));
        assert_eq!(tokens.len(), 24);
        let Chunk::Final(f) = last else {
            panic!("no final event: {last:?}")
        };
        assert_eq!(f.tokens_predicted, 24);
        assert_eq!((f.draft_n, f.draft_n_accepted), (Some(11), Some(4)));
    }

    #[test]
    fn events_split_on_crlf_and_multi_line_data() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: {\"stop\"").is_empty());
        let ev = p.push(b": false}\r\n\r\nevent: x\ndata: a\ndata: b\n\n: comment\n\n");
        assert_eq!(
            ev,
            vec!["{\"stop\": false}".to_string(), "a\nb".to_string()]
        );
    }

    #[test]
    fn bad_events_are_errors() {
        assert!(parse_chunk("nope").is_err());
        assert!(parse_chunk("{\"content\": \"x\"}").is_err());
        assert!(parse_chunk("{\"stop\": true}").is_err());
        let e = parse_chunk(r#"{"error": {"code": 500, "message": "boom"}}"#).unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
    }
}
