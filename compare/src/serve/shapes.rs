//! Response bodies in llama-server's shapes: native `/completion`, OpenAI
//! `text_completion` and `chat.completion` (whole, and as stream chunks).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::job::{Done, GenSettings, Progress};
use super::probs::{probs_json, TokenProbs};

/// Which API a generation answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Native,
    Completions,
    Chat,
}

/// The fixed facts of one response.
pub struct Shape {
    pub api: Api,
    pub id: String,
    pub model: String,
    pub created: u64,
    pub include_usage: bool,
    /// For the native API's final object.
    pub settings: GenSettings,
    pub n_ctx: usize,
    pub prompt_text: String,
    /// The native final object's `tokens` (else `[]`, as llama-server).
    pub return_tokens: bool,
    /// `--verbose`: whole OpenAI answers carry the native result as `__verbose`.
    pub verbose: bool,
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn usage(d: &Done) -> Value {
    let n = d.tokens.len();
    json!({
        "completion_tokens": n,
        "prompt_tokens": d.n_prompt,
        "total_tokens": n + d.n_prompt,
        "prompt_tokens_details": {"cached_tokens": d.timings.cache_n},
    })
}

impl Shape {
    fn object(&self, stream: bool) -> &'static str {
        match (self.api, stream) {
            (Api::Chat, true) => "chat.completion.chunk",
            (Api::Chat, false) => "chat.completion",
            _ => "text_completion",
        }
    }

    fn envelope(&self, stream: bool, choices: Value) -> Value {
        json!({
            "choices": choices,
            "created": self.created,
            "model": self.model,
            // llama-server's is "b<build>-<commit>"; clients and its test suite check the "b".
            "system_fingerprint": concat!("b", env!("CARGO_PKG_VERSION"), "-pocket"),
            "object": self.object(stream),
            "id": self.id,
        })
    }

    /// The whole answer of a request that did not stream, with one choice per generation
    /// (OpenAI's `n`); usage counts the prompt once and every choice's tokens.
    pub fn full_all(&self, done: &[Done]) -> Value {
        let mut v = self.full(&done[0]);
        if done.len() > 1 {
            let choices: Vec<Value> = done
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut whole = self.full(d);
                    let mut c = whole["choices"][0].take();
                    c["index"] = json!(i);
                    c
                })
                .collect();
            let completion: usize = done.iter().map(|d| d.tokens.len()).sum();
            v["choices"] = json!(choices);
            v["usage"]["completion_tokens"] = json!(completion);
            v["usage"]["total_tokens"] = json!(completion + done[0].n_prompt);
        }
        v
    }

    fn full(&self, d: &Done) -> Value {
        let mut v = match self.api {
            Api::Native => return self.native_final(d, &d.content),
            Api::Completions => self.envelope(
                false,
                json!([{"text": d.content, "index": 0, "logprobs": null, "finish_reason": d.finish.reason()}]),
            ),
            Api::Chat => self.envelope(
                false,
                json!([{"index": 0, "finish_reason": d.finish.reason(),
                        "message": {"role": "assistant", "content": d.content}}]),
            ),
        };
        self.add_probs(&mut v, &d.probs);
        if self.verbose {
            v["__verbose"] = self.native_final(d, &d.content);
        }
        v["usage"] = usage(d);
        v["timings"] = d.timings.to_json();
        v
    }

    /// The native final object of a generation from another prompt of the same request.
    pub fn native_final_for(&self, d: &Done, prompt_text: &str) -> Value {
        let mut v = self.native_final(d, &d.content);
        v["prompt"] = json!(prompt_text);
        v
    }

    fn native_final(&self, d: &Done, content: &str) -> Value {
        let mut v = json!({
            "index": 0,
            "content": content,
            "tokens": if self.return_tokens && !content.is_empty() { d.tokens.clone() } else { Vec::new() },
            "id_slot": d.id_slot,
            "stop": true,
            "model": self.model,
            "tokens_predicted": d.tokens.len(),
            "tokens_evaluated": d.n_prompt,
            "generation_settings": self.settings.to_json(self.n_ctx),
            "prompt": self.prompt_text,
            "has_new_line": d.content.contains('\n'),
            "truncated": false,
            "stop_type": d.finish.stop_type(),
            "stopping_word": d.finish.word(),
            "tokens_cached": d.n_prompt + d.tokens.len().saturating_sub(1),
            "timings": d.timings.to_json(),
        });
        // A stream sent them with its pieces; a whole answer carries them all.
        if !content.is_empty() {
            self.add_probs(&mut v, &d.probs);
        }
        v
    }

    /// The chunks that open a stream (OpenAI chat: the assistant's role).
    pub fn opening(&self) -> Vec<Value> {
        match self.api {
            Api::Chat => vec![self.envelope(
                true,
                json!([{"finish_reason": null, "index": 0, "delta": {"role": "assistant", "content": null}}]),
            )],
            _ => Vec::new(),
        }
    }

    /// A chunk of streamed text.
    pub fn piece(
        &self,
        text: &str,
        tokens: &[u32],
        probs: &[TokenProbs],
        id_slot: usize,
        n_decoded: usize,
    ) -> Value {
        let mut v = match self.api {
            Api::Native => json!({
                "index": 0, "content": text, "tokens": tokens, "stop": false,
                "id_slot": id_slot, "tokens_predicted": n_decoded,
            }),
            Api::Completions => self.envelope(
                true,
                json!([{"text": text, "index": 0, "logprobs": null, "finish_reason": null}]),
            ),
            Api::Chat => self.envelope(
                true,
                json!([{"finish_reason": null, "index": 0, "delta": {"content": text}}]),
            ),
        };
        self.add_probs(&mut v, probs);
        v
    }

    /// A chunk with the prompt's progress (`return_progress`), as llama-server sends it:
    /// no text (chat: the assistant's role again), `prompt_progress` and the timings so far.
    pub fn progress(&self, p: &Progress) -> Value {
        let mut v = match self.api {
            Api::Native => json!({
                "index": 0, "content": "", "tokens": [], "stop": false,
                "tokens_predicted": 0, "tokens_evaluated": p.total,
            }),
            Api::Completions => self.envelope(
                true,
                json!([{"text": "", "index": 0, "logprobs": null, "finish_reason": null}]),
            ),
            Api::Chat => self.envelope(
                true,
                json!([{"finish_reason": null, "index": 0, "delta": {"role": "assistant", "content": null}}]),
            ),
        };
        v["timings"] = p.timings.to_json();
        v["prompt_progress"] = p.to_json();
        v
    }

    /// The tokens' probabilities where the API puts them, when the request asked.
    fn add_probs(&self, v: &mut Value, probs: &[TokenProbs]) {
        if self.settings.probs.is_none() {
            return;
        }
        match self.api {
            Api::Native => v["completion_probabilities"] = probs_json(probs),
            Api::Chat => v["choices"][0]["logprobs"] = json!({"content": probs_json(probs)}),
            // OpenAI's legacy completions logprobs have another shape, not built here.
            Api::Completions => {}
        }
    }

    /// The chunks that close a stream (the native API: the final object, with empty content).
    pub fn closing(&self, d: &Done) -> Vec<Value> {
        let mut out = match self.api {
            Api::Native => return vec![self.native_final(d, "")],
            Api::Completions => vec![self.envelope(
                true,
                json!([{"text": "", "index": 0, "logprobs": null, "finish_reason": d.finish.reason()}]),
            )],
            Api::Chat => vec![self.envelope(
                true,
                json!([{"finish_reason": d.finish.reason(), "index": 0, "delta": {}}]),
            )],
        };
        if self.include_usage {
            let mut u = self.envelope(true, json!([]));
            u["usage"] = usage(d);
            out.push(u);
        }
        if let Some(last) = out.last_mut() {
            last["timings"] = d.timings.to_json();
        }
        out
    }

    /// OpenAI streams end with `data: [DONE]`; llama-server's native one does not.
    pub fn ends_with_done(&self) -> bool {
        self.api != Api::Native
    }
}
