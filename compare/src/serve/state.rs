//! State shared by the HTTP handlers and the engine thread.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};

use pocket_model::chat::ChatTemplate;
use pocket_model::decision::DecisionModel;
use pocket_model::grammar::{GrammarError, GrammarVocab};
use pocket_model::Model;

use super::args::ServeArgs;
use super::job::Job;
use super::metrics::{Metrics, SlotView};

/// What the engine thread writes and the handlers read.
#[derive(Default)]
pub struct Shared {
    pub metrics: Mutex<Metrics>,
    pub slots: Mutex<Vec<SlotView>>,
    /// Jobs sent to the engine and not yet on a slot (the bounded queue).
    pub queued: AtomicUsize,
}

/// The model, once loaded, and the way to the engine.
pub struct Loaded {
    pub model: Arc<Model>,
    pub template: ChatTemplate,
    pub jobs: Sender<Job>,
    /// Tokens each slot holds.
    pub n_ctx_slot: usize,
    /// The LoRA adapters and their global scales (serve/lora.rs).
    pub lora: Arc<super::lora::LoraRegistry>,
    /// The GGUF's native decision model, if it declares one (`/v1/systemone`).
    pub decision: Option<DecisionModel>,
}

pub struct App {
    pub args: ServeArgs,
    pub shared: Arc<Shared>,
    pub loaded: OnceLock<Loaded>,
    /// The name reported for the model (`--alias`, else the file name).
    pub model_name: String,
    /// When the server started, in Unix seconds (llama-server's `Process-Start-Time-Unix`).
    pub started_unix: u64,
    /// The model's vocabulary for grammars, built by the first request with one.
    pub grammar_vocab: OnceLock<Result<GrammarVocab, GrammarError>>,
    next_id: AtomicU64,
}

/// A comma-separated flag's items, sorted and without repeats (as llama-server's sets).
pub fn list(flag: Option<&str>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = flag
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    set.into_iter().collect()
}

pub fn aliases(args: &ServeArgs) -> Vec<String> {
    list(args.alias.as_deref())
}

impl App {
    pub fn new(args: ServeArgs) -> App {
        let model_name = aliases(&args).into_iter().next().unwrap_or_else(|| {
            args.model
                .as_deref()
                .and_then(|m| m.file_name())
                .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
        });
        App {
            args,
            shared: Arc::default(),
            loaded: OnceLock::new(),
            model_name,
            started_unix: super::shapes::now_secs(),
            grammar_vocab: OnceLock::new(),
            next_id: AtomicU64::new(0),
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}
