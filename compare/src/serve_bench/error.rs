//! What can go wrong in a serving benchmark, each case saying which server and what.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ServeBenchError {
    #[error("cannot start {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{engine} {what}; its last stderr lines:\n{stderr_tail}")]
    Server {
        engine: &'static str,
        what: String,
        stderr_tail: String,
    },
    #[error("HTTP: {0}")]
    Http(String),
    #[error("{path} answered {status}: {body}")]
    Status {
        path: String,
        status: u16,
        body: String,
    },
    #[error("stream: {0}")]
    Stream(String),
    #[error("a request generated {got} tokens, not the {want} asked for (with ignore_eos)")]
    TokenCount { got: u64, want: u64 },
    #[error("{engine} at {streams} stream(s): {source}")]
    Run {
        engine: &'static str,
        streams: usize,
        source: Box<ServeBenchError>,
    },
    #[error(
        "-c {ctx_size} split over {slots} slots leaves {per_slot} tokens per slot, fewer than \
         the prompt ({n_prompt}) plus -n ({n_predict}): raise -c"
    )]
    ContextTooSmall {
        ctx_size: usize,
        slots: usize,
        per_slot: usize,
        n_prompt: usize,
        n_predict: usize,
    },
    #[error("the tokenizer gave no tokens for the prompt text")]
    EmptyPrompt,
    #[error("the prose workload has {tokens} tokens, fewer than -p {n_prompt}: lower -p")]
    ProseTooShort { tokens: usize, n_prompt: usize },
    #[error("reading the model: {0}")]
    Model(String),
    #[error(
        "{engine} reported {accepted} accepted drafts in a request of {predicted} tokens: \
         more than the {predicted} - 1 tokens after the first"
    )]
    DraftCount {
        engine: &'static str,
        accepted: u64,
        predicted: u64,
    },
    #[error("interrupted (Ctrl-C); the servers were stopped")]
    Interrupted,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
