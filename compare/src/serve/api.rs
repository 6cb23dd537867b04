//! Request bodies of the generation endpoints (llama-server's and OpenAI's field names),
//! parsed strictly: malformed JSON or a field of the wrong type is a 400 naming it.

use pocket_model::chat::ChatMessage;
use pocket_model::tokenizer::Tokenizer;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::args::ServeArgs;
use super::error::{bad, ApiError};
use super::job::GenSettings;

/// Parses a JSON body into `T`, with the parser's message on failure.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("malformed JSON: {e}")))?;
    if !value.is_object() {
        return Err(bad("the request body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| bad(format!("invalid request: {e}")))
}

/// A prompt: text, token ids, or a one-element list of either.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    List(Vec<Prompt>),
}

impl Prompt {
    /// Its tokens (text is tokenized with BOS and special tokens parsed, as llama-server).
    pub fn tokens(&self, tok: &Tokenizer) -> Result<Vec<u32>, ApiError> {
        match self {
            Prompt::Text(s) => Ok(tok.encode(s, true, true)),
            Prompt::Tokens(t) => {
                if let Some(&bad_id) = t.iter().find(|&&id| id as usize >= tok.n_vocab()) {
                    return Err(bad(format!(
                        "token id {bad_id} is outside the vocabulary of {}",
                        tok.n_vocab()
                    )));
                }
                Ok(t.clone())
            }
            Prompt::List(l) if l.len() == 1 && !matches!(l[0], Prompt::List(_)) => l[0].tokens(tok),
            Prompt::List(_) => Err(bad("only one prompt per request is supported")),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Debug, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The generation fields every endpoint takes.
#[derive(Deserialize, Debug, Default)]
pub struct GenFields {
    pub n_predict: Option<i64>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_k: Option<i32>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<i32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub cache_prompt: Option<bool>,
    pub id_slot: Option<i64>,
    #[serde(default)]
    pub ignore_eos: bool,
    pub n: Option<u32>,
}

impl GenFields {
    /// The request's settings over the server's defaults.
    pub fn settings(&self, args: &ServeArgs) -> Result<GenSettings, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(bad("only n = 1 is supported"));
        }
        let mut sampling = args.sampling.params();
        let s = &mut sampling;
        s.temp = self.temperature.unwrap_or(s.temp);
        s.top_k = self.top_k.unwrap_or(s.top_k);
        s.top_p = self.top_p.unwrap_or(s.top_p);
        s.min_p = self.min_p.unwrap_or(s.min_p);
        s.repeat_penalty = self.repeat_penalty.unwrap_or(s.repeat_penalty);
        s.repeat_last_n = self.repeat_last_n.unwrap_or(s.repeat_last_n);
        s.presence_penalty = self.presence_penalty.unwrap_or(s.presence_penalty);
        s.frequency_penalty = self.frequency_penalty.unwrap_or(s.frequency_penalty);
        if let Some(seed) = self.seed {
            s.seed = u64::try_from(seed).ok();
        }
        let n_predict = self
            .n_predict
            .or(self.max_tokens)
            .or(self.max_completion_tokens)
            .unwrap_or(args.n_predict);
        let id_slot = match self.id_slot {
            None | Some(-1) => None,
            Some(i) if i >= 0 && (i as usize) < args.parallel => Some(i as usize),
            Some(i) => {
                return Err(bad(format!(
                    "id_slot {i} does not exist (the server has {} slots)",
                    args.parallel
                )))
            }
        };
        Ok(GenSettings {
            n_predict: usize::try_from(n_predict).ok(),
            stop: match &self.stop {
                None => Vec::new(),
                Some(Stop::One(s)) => vec![s.clone()],
                Some(Stop::Many(v)) => v.clone(),
            },
            sampling,
            ignore_eos: self.ignore_eos,
            cache_prompt: self.cache_prompt.unwrap_or(true),
            id_slot,
        })
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

#[derive(Deserialize, Debug)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub gen: GenFields,
}

/// A message's content: text, or OpenAI's list of parts (text parts are joined).
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Deserialize, Debug)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub gen: GenFields,
}

/// The messages as the chat template takes them.
pub fn chat_messages(messages: &[Message]) -> Result<Vec<ChatMessage>, ApiError> {
    if messages.is_empty() {
        return Err(bad("'messages' must not be empty"));
    }
    messages
        .iter()
        .map(|m| {
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(s)) => s.clone(),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match (p.kind.as_str(), &p.text) {
                            ("text", Some(t)) => text.push_str(t),
                            (kind, _) => {
                                return Err(bad(format!("unsupported content part type '{kind}'")))
                            }
                        }
                    }
                    text
                }
            };
            Ok(ChatMessage::new(m.role.clone(), content))
        })
        .collect()
}
