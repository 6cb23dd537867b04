//! The speculative-decoding workload set: real requests whose answers copy their input
//! (extraction, quoting, code edit), where n-gram drafts should be kept, and an open-ended
//! story, where they mostly fail. The texts are `compare/workloads/*.txt`; each becomes the
//! user message of the model's chat template, or for a model without one (a base model,
//! such as the gemma3-270m fixture) a completion prompt ending in "Answer:".

use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::client;
use super::ServeBenchError;

/// One request of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SpecWorkload {
    /// Attributes and opinions from a product review, each quoting its sentence.
    Extraction,
    /// Repeat a passage word for word.
    Quoting,
    /// Rename a variable in a function and rewrite the function whole.
    Code,
    /// An open-ended story (prose: little to copy).
    Story,
}

impl SpecWorkload {
    pub const ALL: [SpecWorkload; 4] = [
        SpecWorkload::Extraction,
        SpecWorkload::Quoting,
        SpecWorkload::Code,
        SpecWorkload::Story,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SpecWorkload::Extraction => "extraction",
            SpecWorkload::Quoting => "quoting",
            SpecWorkload::Code => "code",
            SpecWorkload::Story => "story",
        }
    }

    /// Whether the answer copies the prompt (the issue's ≥ 1.8× target) or is prose (the
    /// no-slowdown target).
    pub fn copies(self) -> bool {
        self != SpecWorkload::Story
    }

    /// The request's text (the user message).
    pub fn text(self) -> &'static str {
        match self {
            SpecWorkload::Extraction => include_str!("../../workloads/extraction.txt"),
            SpecWorkload::Quoting => include_str!("../../workloads/quoting.txt"),
            SpecWorkload::Code => include_str!("../../workloads/code.txt"),
            SpecWorkload::Story => include_str!("../../workloads/story.txt"),
        }
    }
}

/// How a workload's text becomes the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptFormat {
    /// The user message of the model's own chat template (the server's `/apply-template`).
    Chat,
    /// The text, a blank line and "Answer:" (for a model without a chat template, where
    /// both servers would fall back to ChatML, which a base model does not follow).
    Completion,
}

impl PromptFormat {
    /// Chat when the GGUF has `tokenizer.chat_template`, else completion.
    pub fn of_model(model: &Path) -> Result<PromptFormat, ServeBenchError> {
        let g = pocket_model::gguf::GgufFile::open(model)
            .map_err(|e| ServeBenchError::Model(format!("{}: {e}", model.display())))?;
        Ok(match g.get_str("tokenizer.chat_template") {
            Ok(_) => PromptFormat::Chat,
            Err(pocket_model::gguf::GgufError::MissingKey(_)) => PromptFormat::Completion,
            Err(e) => {
                return Err(ServeBenchError::Model(format!("{}: {e}", model.display())));
            }
        })
    }
}

/// The completion form of a text.
pub fn completion_prompt(text: &str) -> String {
    format!("{}\n\nAnswer:\n", text.trim_end())
}

/// The prompt's token ids as the server at `addr` renders and tokenizes it (special tokens
/// in the rendered template are parsed; BOS added only for the completion form: a chat
/// template writes its own).
pub async fn prompt_ids(
    addr: SocketAddr,
    workload: SpecWorkload,
    format: PromptFormat,
) -> Result<Vec<u32>, ServeBenchError> {
    let (text, add_special) = match format {
        PromptFormat::Chat => {
            let messages = json!({"messages": [{"role": "user", "content": workload.text()}]});
            let v = client::post_json(addr, "/apply-template", &messages).await?;
            let prompt = v["prompt"].as_str().ok_or_else(|| {
                ServeBenchError::Http(format!("/apply-template gave no \"prompt\": {v}"))
            })?;
            (prompt.to_string(), false)
        }
        PromptFormat::Completion => (completion_prompt(workload.text()), true),
    };
    client::tokenize(addr, &text, add_special).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_has_its_text() {
        for w in SpecWorkload::ALL {
            assert!(w.text().split_whitespace().count() > 40, "{}", w.name());
        }
        // What the copy workloads ask for is in the text the model is given.
        assert!(SpecWorkload::Quoting.text().contains("word for word"));
        assert!(SpecWorkload::Code.text().contains("def summarize_orders"));
        assert!(!SpecWorkload::Story.copies());
    }

    #[test]
    fn completion_prompts_end_in_answer() {
        assert_eq!(completion_prompt("Say x.\n"), "Say x.\n\nAnswer:\n");
    }

    #[test]
    fn the_fixtures_formats_follow_their_templates() {
        let models = dirs_models();
        let smol = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        let gemma = models.join("gemma-3-270m-q4_k_m.gguf");
        if !smol.is_file() || !gemma.is_file() {
            eprintln!("skipped: fixture models not in {}", models.display());
            return;
        }
        assert_eq!(PromptFormat::of_model(&smol).unwrap(), PromptFormat::Chat);
        // The gemma3-270m fixture is the base model: no chat template.
        assert_eq!(
            PromptFormat::of_model(&gemma).unwrap(),
            PromptFormat::Completion
        );
        assert!(PromptFormat::of_model(Path::new("/nonexistent.gguf")).is_err());
    }

    fn dirs_models() -> std::path::PathBuf {
        crate::llama_bench::cache_dir().join("models")
    }
}
