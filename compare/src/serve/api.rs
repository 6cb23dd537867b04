//! Request bodies of the generation endpoints (llama-server's and OpenAI's field names),
//! parsed strictly: malformed JSON or a field of the wrong type is a 400 naming it.

use pocket_model::chat::ChatMessage;
use pocket_model::grammar::GrammarSpec;
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

/// A prompt as llama-server takes it: text, token ids, an object with `prompt_string`, a
/// sequence mixing token ids and text (one prompt), or a list of prompts (one result each).
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    // Before Object: serde would also read a two-element array as a PromptObject.
    List(Vec<PromptItem>),
    Object(PromptObject),
}

/// llama-server's JSON prompt: text, and media for multimodal models.
#[derive(Deserialize, Debug)]
pub struct PromptObject {
    pub prompt_string: String,
    pub multimodal_data: Option<serde_json::Value>,
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum PromptItem {
    Token(u32),
    Text(String),
    Tokens(Vec<u32>),
    Object(PromptObject),
}

/// One prompt's tokens, and its text (what the native API echoes as `prompt`).
pub struct PromptTokens {
    pub tokens: Vec<u32>,
    pub text: String,
}

impl Prompt {
    /// The prompts of the request (text is tokenized with BOS and special tokens parsed,
    /// as llama-server does).
    pub fn prompts(&self, tok: &Tokenizer) -> Result<Vec<PromptTokens>, ApiError> {
        let text = |s: &str| PromptTokens {
            tokens: tok.encode(s, true, true),
            text: s.to_string(),
        };
        let ids = |t: &[u32]| -> Result<PromptTokens, ApiError> {
            check_ids(tok, t)?;
            let text = String::from_utf8_lossy(&tok.detokenize(t, false, true)).into_owned();
            Ok(PromptTokens {
                tokens: t.to_vec(),
                text,
            })
        };
        let object = |o: &PromptObject| match o.multimodal_data {
            Some(_) => Err(bad(
                "multimodal_data: this model has no multimodal projector (pocket serves text only)",
            )),
            None => Ok(text(&o.prompt_string)),
        };
        let mixed = self.is_one_mixed_sequence();
        match self {
            Prompt::Text(s) => Ok(vec![text(s)]),
            Prompt::Object(o) => Ok(vec![object(o)?]),
            Prompt::List(items) if items.is_empty() => Err(bad("the prompt list is empty")),
            Prompt::List(items) if mixed => {
                // One prompt: token ids as they are, text pieces tokenized (only the
                // first piece gets BOS, as llama-server's tokenize_mixed).
                let mut tokens = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        PromptItem::Token(t) => tokens.push(*t),
                        PromptItem::Text(s) => tokens.extend(tok.encode(s, i == 0, true)),
                        _ => unreachable!("is_one_mixed_sequence"),
                    }
                }
                Ok(vec![ids(&tokens)?])
            }
            Prompt::List(items) => items
                .iter()
                .map(|item| match item {
                    PromptItem::Text(s) => Ok(text(s)),
                    PromptItem::Tokens(t) => ids(t),
                    PromptItem::Object(o) => object(o),
                    PromptItem::Token(_) => unreachable!("is_one_mixed_sequence"),
                })
                .collect(),
        }
    }

    /// A list holding token ids (and maybe text) is one prompt; a list of texts, id lists
    /// or objects is many.
    fn is_one_mixed_sequence(&self) -> bool {
        match self {
            Prompt::List(items) => {
                items.iter().any(|i| matches!(i, PromptItem::Token(_)))
                    && items
                        .iter()
                        .all(|i| matches!(i, PromptItem::Token(_) | PromptItem::Text(_)))
            }
            _ => false,
        }
    }
}

/// Every id inside the vocabulary.
fn check_ids(tok: &Tokenizer, ids: &[u32]) -> Result<(), ApiError> {
    match ids.iter().find(|&&id| id as usize >= tok.n_vocab()) {
        Some(&id) => Err(bad(format!(
            "token id {id} is outside the vocabulary of {}",
            tok.n_vocab()
        ))),
        None => Ok(()),
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

/// The most choices (`n`) one request may ask for: each takes a slot or a queue place.
pub const MAX_CHOICES: u32 = 8;

/// The most alternatives per step `n_probs` / `top_logprobs` may ask for.
pub const MAX_PROBS: usize = 100;

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
    /// llama-server: the `n_probs` most likely tokens of each step, with log-probabilities.
    pub n_probs: Option<usize>,
    /// OpenAI chat: each token's log-probability, and the `top_logprobs` most likely.
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<usize>,
    #[serde(default)]
    pub post_sampling_probs: bool,
    /// Constrained sampling: a GBNF grammar, a JSON schema, or OpenAI's response format
    /// (see [`GenFields::grammar_spec`]).
    pub grammar: Option<serde_json::Value>,
    pub json_schema: Option<serde_json::Value>,
    pub response_format: Option<serde_json::Value>,
    /// The native API's final object lists the generated tokens only when asked.
    #[serde(default)]
    pub return_tokens: bool,
    pub n: Option<u32>,
    /// OpenAI's `{"token id": bias}` or llama-server's `[[token id, bias | false], ...]`.
    pub logit_bias: Option<serde_json::Value>,
    /// llama-server's per-request LoRA scales, `[{"id": 0, "scale": 0.5}]` (serve/lora.rs).
    pub lora: Option<serde_json::Value>,
    /// OpenAI-API answers carry the native result as `__verbose` (default: `--verbose`).
    pub verbose: Option<bool>,
    /// Streamed answers carry `prompt_progress` while the prompt is evaluated.
    #[serde(default)]
    pub return_progress: bool,
}

/// A request's `logit_bias` as (token, bias) pairs; `false` is llama-server's "never".
/// A token given as text (not a number) stands for every token of its tokenization, as
/// in llama-server.
fn logit_bias(tok: &Tokenizer, v: &serde_json::Value) -> Result<Vec<(u32, f32)>, ApiError> {
    use serde_json::Value;
    let bias_of = |b: &Value| match b {
        Value::Bool(false) => Ok(f32::NEG_INFINITY),
        Value::Number(n) => Ok(n.as_f64().unwrap_or(0.0) as f32),
        other => Err(bad(format!(
            "logit_bias: a bias must be a number or false, not {other}"
        ))),
    };
    let tokens_of = |t: &Value| -> Result<Vec<u32>, ApiError> {
        match t {
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(|id| vec![id])
                .ok_or_else(|| bad(format!("logit_bias: {n} is not a token id"))),
            Value::String(s) => Ok(match s.parse::<u32>() {
                Ok(id) => vec![id],
                Err(_) => tok.encode(s, false, false),
            }),
            other => Err(bad(format!("logit_bias: {other} is not a token"))),
        }
    };
    let mut out = Vec::new();
    let mut add = |t: &Value, b: &Value| -> Result<(), ApiError> {
        let bias = bias_of(b)?;
        out.extend(tokens_of(t)?.into_iter().map(|id| (id, bias)));
        Ok(())
    };
    match v {
        Value::Null => {}
        Value::Object(m) => {
            for (k, b) in m {
                add(&Value::String(k.clone()), b)?;
            }
        }
        Value::Array(items) => {
            for item in items {
                match item.as_array().map(Vec::as_slice) {
                    Some([t, b]) => add(t, b)?,
                    _ => return Err(bad("logit_bias: each entry must be [token, bias]")),
                }
            }
        }
        _ => return Err(bad("logit_bias must be an object or an array")),
    }
    Ok(out)
}

impl GenFields {
    /// The request's settings over the server's defaults.
    pub fn settings(&self, args: &ServeArgs, tok: &Tokenizer) -> Result<GenSettings, ApiError> {
        if self.n.is_some_and(|n| !(1..=MAX_CHOICES).contains(&n)) {
            return Err(bad(format!("n must be between 1 and {MAX_CHOICES}")));
        }
        let mut sampling = args.sampling.params();
        let s = &mut sampling;
        s.temp = self.temperature.unwrap_or(s.temp);
        crate::overlay!(s, self; top_k, top_p, min_p, repeat_penalty, repeat_last_n);
        crate::overlay!(s, self; presence_penalty, frequency_penalty);
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
        let probs = match (self.n_probs.filter(|&n| n > 0), self.logprobs) {
            (Some(n), _) => Some(n),
            (None, true) => Some(self.top_logprobs.unwrap_or(0)),
            (None, false) => None,
        };
        if probs.is_some_and(|n| n > MAX_PROBS) {
            return Err(bad(format!(
                "n_probs / top_logprobs must be at most {MAX_PROBS}"
            )));
        }
        Ok(GenSettings {
            probs,
            n_predict: usize::try_from(n_predict).ok(),
            stop: match &self.stop {
                None => Vec::new(),
                Some(Stop::One(s)) => vec![s.clone()],
                Some(Stop::Many(v)) => v.clone(),
            },
            sampling,
            ignore_eos: self.ignore_eos,
            logit_bias: match &self.logit_bias {
                Some(v) => logit_bias(tok, v)?,
                None => Vec::new(),
            },
            cache_prompt: self.cache_prompt.unwrap_or(true),
            id_slot,
            lora: Default::default(),
            grammar: None,
            post_sampling_probs: self.post_sampling_probs,
            // As llama-server: progress is reported to streams only.
            return_progress: self.return_progress && self.stream,
        })
    }

    /// The structure the request holds generation to, by llama-server's rules: `grammar`
    /// (GBNF) or `json_schema`, not both; `response_format` `{"type": "json_object"}`
    /// (any object, or its `schema`) or `{"type": "json_schema", "json_schema":
    /// {"schema": ...}}`; an empty schema is any object.
    pub fn grammar_spec(&self) -> Result<Option<GrammarSpec>, ApiError> {
        use serde_json::Value;
        let grammar = match &self.grammar {
            None | Some(Value::Null) => None,
            Some(Value::String(g)) if g.is_empty() => None,
            Some(Value::String(g)) => Some(g.clone()),
            Some(_) => return Err(bad("grammar must be a string (a GBNF grammar)")),
        };
        let mut schema = self.json_schema.clone().filter(|s| !s.is_null());
        if grammar.is_some() && schema.is_some() {
            return Err(bad("Cannot use both json_schema and grammar"));
        }
        if let Some(f) = &self.response_format {
            let kind = f.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "json_object" if f.get("schema").is_some() || schema.is_none() => {
                    schema = Some(f.get("schema").cloned().unwrap_or(Value::Null));
                }
                "json_schema" => {
                    let inner = f.get("json_schema").and_then(|w| w.get("schema"));
                    schema = Some(inner.cloned().unwrap_or(Value::Null));
                }
                "json_object" | "text" | "" => {}
                other => {
                    return Err(bad(format!(
                        "response_format type must be one of \"text\" or \"json_object\", but got: {other}"
                    )))
                }
            }
        }
        if let Some(g) = grammar {
            return Ok(Some(GrammarSpec::Gbnf(g)));
        }
        Ok(match schema {
            None => None,
            Some(Value::Null) => Some(GrammarSpec::JsonObject),
            Some(Value::Object(m)) if m.is_empty() => Some(GrammarSpec::JsonObject),
            Some(s @ (Value::Object(_) | Value::Bool(_))) => Some(GrammarSpec::JsonSchema(s)),
            Some(other) => {
                return Err(bad(format!(
                    "\"json_schema\": a schema is a JSON object, not {other}"
                )))
            }
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
    /// End the prompt with the assistant's opening (default true).
    pub add_generation_prompt: Option<bool>,
    /// Continue the final assistant message (vLLM / transformers' name for llama-server's
    /// assistant prefill).
    pub continue_final_message: Option<bool>,
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
