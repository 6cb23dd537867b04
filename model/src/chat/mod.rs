//! Chat templates: turning a conversation into the prompt text a chat model was trained on,
//! the way llama.cpp's jinja path does it (b11434, `common/chat.cpp`).
//!
//! The template comes from the GGUF's `tokenizer.chat_template` or from an override
//! (`--chat-template chatml|gemma|llama3|<jinja text>`); a model without one gets ChatML, as
//! in llama.cpp (`CHATML_TEMPLATE_SRC`). It is rendered with minijinja configured like
//! Hugging Face / llama.cpp: `trim_blocks` and `lstrip_blocks` on, Python string and dict
//! methods (`.strip()`, `.startswith()`, `.items()`, ...) from minijinja-contrib's pycompat,
//! `raise_exception(msg)`, `strftime_now(fmt)`, and a `tojson` that prints like Python's
//! `json.dumps` (`", "`/`": "` separators, no HTML escaping).
//!
//! Variables: `messages` (list of `{role, content}`), `add_generation_prompt`, and
//! `bos_token`/`eos_token` — the text of the vocabulary's BOS/EOS tokens (empty when the
//! vocabulary has none). Like llama.cpp, a leading `bos_token` is cut from the result when
//! the tokenizer adds BOS itself, and a trailing `eos_token` when it adds EOS.
//!
//! llama.cpp's message workarounds that apply to plain text chats are reproduced: a
//! `developer` role becomes `system` (except for gpt-oss `<|channel|>` templates), and for
//! templates that ignore or reject a system message (probed once, like llama.cpp's
//! `supports_system_role` capability) the system message is prepended to the next message
//! with a `"\n"`.
//!
//! The template is untrusted input (it comes from the GGUF file), so compiling and rendering
//! run with limits: a size cap on the source, a fuel budget per render (minijinja charges one
//! fuel per instruction and per 64 bytes of data the template creates, so the budget bounds
//! both time and memory), the VM's recursion limit, and a cap on the output. A hostile
//! template ends in a [`ChatError`], never a hang or an out-of-memory.

mod filters;
mod limits;

use std::borrow::Cow;
use std::io;

use filters::*;
use limits::*;

pub use filters::civil_from_days;

use minijinja::value::{Kwargs, StringInput, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use crate::gguf::{Gguf, GgufError};
use crate::tokenizer::Tokenizer;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("chat template: {0:#}")]
    Template(#[from] Error),
    #[error("reading tokenizer.chat_template: {0}")]
    Gguf(#[from] GgufError),
    #[error("chat template is {len} bytes, the limit is {max}")]
    TemplateTooLarge { len: usize, max: usize },
    #[error("chat template exceeds the fuel limit of {fuel} (a loop that does not end?)")]
    OutOfFuel { fuel: u64 },
    #[error("chat template output exceeds {max} bytes (a loop that does not end?)")]
    OutputTooLarge { max: usize },
    #[error("chat template has a tag of {len} bytes of code, the limit is {max}")]
    TagTooLong { len: usize, max: usize },
    #[error("starting the chat template thread: {0}")]
    Thread(io::Error),
    #[error("chat template: minijinja panicked")]
    Panicked,
}

/// Real templates are 1-18 KiB (the largest of llama.cpp's models/templates is 18 KiB);
/// compiling megabytes of hostile source would only cost time and memory.
pub const MAX_TEMPLATE_BYTES: usize = 256 << 10;

/// The fuel of one render (minijinja charges one fuel per instruction and per 64 bytes of
/// data created, so fuel bounds both time and memory): a fixed part for the template's own
/// work, plus per message some instructions and a walk over the whole conversation text,
/// since real templates rebuild their output with `~` once per message (Reka-Edge:
/// quadratic). Capped so that a huge conversation cannot buy a hostile template more than
/// 64 MiB of data, or values nested deeper than [`STACK_BYTES`] holds.
///
/// Measured on llama.cpp's 72 models/templates: at most ~1.3k fuel on the six-message test
/// conversation; on 400 messages of 1 KiB (~100k tokens) 20k-110k, gemma-4 0.8M, Reka-Edge
/// 3.9M (so Reka-Edge stops at ~200 such messages, ~50k tokens). A render runs ~10-50 ns a
/// fuel: the base is ~10 ms, the cap ~50 ms.
const FUEL_BASE: u64 = 200_000;
const FUEL_PER_MESSAGE: u64 = 2_000;
/// Fuel per message per byte of conversation text: four re-reads (a fuel pays 64 bytes).
const FUEL_TEXT_DIVISOR: u64 = 16;
const FUEL_MAX: u64 = 1_000_000;

/// The most code (bytes outside string literals, spaces not counted) in one `{{ }}` or
/// `{% %}` tag; llama.cpp's templates have at most 210. minijinja nests an expression as deep
/// as its operator chain is long (`1~1~...`, `- - - x`, `x|f|f|f`), and compiling that takes
/// time quadratic in the depth (constant folding is retried at every level).
const MAX_TAG_CODE: usize = 4096;

/// minijinja recurses on the native stack over the syntax tree (its parser bounds only part
/// of the nesting: operator, attribute and filter chains, and `elif` chains nest as deep as
/// they are long) and over nested values (dropping, printing, comparing them), which a loop
/// can nest one level per ~8 fuel. Both overflow an 8 MiB stack (an abort, not an error), so
/// compiling and rendering run on a thread whose stack fits the worst case: ~350 bytes a
/// level, for [`FUEL_MAX`]/8 levels of values or the ~16k `elif`s that fit in
/// [`MAX_TEMPLATE_BYTES`], is < 50 MiB. The stack is reserved, not used until touched.
const STACK_BYTES: usize = 256 << 20;

/// The output cap: the messages plus what a template adds around them (role headers, a
/// default system prompt, dates), with plenty of headroom.
const OUTPUT_BASE: usize = 1 << 20;
const OUTPUT_PER_MESSAGE: usize = 4 << 10;

/// minijinja's default; it is also the most it allows without the `stacker` feature. Real
/// templates nest a few levels (a recursive macro for JSON schemas maybe ten).
const RECURSION_LIMIT: usize = 500;

/// How deep `tojson` descends (it recurses on the native stack); tool schemas nest < 20.
const MAX_JSON_DEPTH: usize = 128;

/// llama.cpp's `CHATML_TEMPLATE_SRC` (common/chat.cpp), its fallback for models without a
/// template.
pub const CHATML_TEMPLATE: &str = "{%- for message in messages -%}\n  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n  {{- '<|im_start|>assistant\n' -}}\n{%- endif -%}";

/// Gemma (2/3) turns: no system role, so a system message is prepended to the first user
/// turn with a blank line; `assistant` is `model`; contents trimmed. Renders what
/// llama.cpp's built-in `gemma` template (src/llama-chat.cpp) produces.
pub const GEMMA_TEMPLATE: &str = "{{- bos_token -}}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] | trim + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = '' -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') -}}
    {{- message['content'] | trim -}}
    {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<start_of_turn>model\n' -}}
{%- endif -%}";

/// Llama 3 headers; renders what llama.cpp's built-in `llama3` template produces.
pub const LLAMA3_TEMPLATE: &str = "{{- bos_token -}}
{%- for message in messages -%}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}";

/// Cohere's Command-R turns; renders what llama.cpp's built-in `command-r` template
/// produces (every role's content trimmed, other roles dropped).
pub const COMMAND_R_TEMPLATE: &str = "{%- set tags = {'system': 'SYSTEM', 'user': 'USER', 'assistant': 'CHATBOT'} -%}
{%- for message in messages -%}
    {%- if message['role'] in tags -%}
        {{- '<|START_OF_TURN_TOKEN|><|' + tags[message['role']] + '_TOKEN|>' + message['content'] | trim + '<|END_OF_TURN_TOKEN|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}
{%- endif -%}";

/// The built-in template called `name` (`chatml`, `gemma`, `llama3`, `command-r`).
pub fn builtin_template(name: &str) -> Option<&'static str> {
    match name {
        "chatml" => Some(CHATML_TEMPLATE),
        "gemma" => Some(GEMMA_TEMPLATE),
        "llama3" => Some(LLAMA3_TEMPLATE),
        "command-r" => Some(COMMAND_R_TEMPLATE),
        _ => None,
    }
}

/// Names accepted by [`builtin_template`].
pub const BUILTIN_TEMPLATES: &[&str] = &["chatml", "gemma", "llama3", "command-r"];

const TEMPLATE_NAME: &str = "chat";

/// A compiled chat template with its BOS/EOS texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    strip_bos: bool,
    strip_eos: bool,
    supports_system_role: bool,
    map_developer: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("supports_system_role", &self.supports_system_role)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` (jinja text, or a built-in name) with the given token texts. Nothing
    /// is stripped from the output (see [`ChatTemplate::with_strip`]).
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let source = builtin_template(source).unwrap_or(source);
        if source.len() > MAX_TEMPLATE_BYTES {
            return Err(ChatError::TemplateTooLarge {
                len: source.len(),
                max: MAX_TEMPLATE_BYTES,
            });
        }
        let tag = longest_tag_code(source);
        if tag > MAX_TAG_CODE {
            return Err(ChatError::TagTooLong {
                len: tag,
                max: MAX_TAG_CODE,
            });
        }
        on_big_stack(|| Self::compile(source, bos_token, eos_token))
    }

    fn compile(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let source = source.to_string();
        let mut env = Environment::new();
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        // Pretty-printing nested values takes time cubic in their depth, unpaid by fuel (and
        // no chat template uses it).
        env.remove_filter("pprint");
        env.add_filter("join", join);
        env.add_template_owned(TEMPLATE_NAME, source.clone())?;
        let mut t = ChatTemplate {
            env,
            map_developer: !source.contains("<|channel|>"),
            source,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            strip_bos: false,
            strip_eos: false,
            supports_system_role: true,
        };
        t.supports_system_role = t.probe_system_role();
        Ok(t)
    }

    /// Cut a leading `bos_token` / trailing `eos_token` from renders, as llama.cpp does when
    /// the tokenizer adds those tokens itself.
    pub fn with_strip(mut self, strip_bos: bool, strip_eos: bool) -> Self {
        self.strip_bos = strip_bos;
        self.strip_eos = strip_eos;
        self
    }

    /// The template a run uses: `override_` (a built-in name or jinja text) if given, else
    /// the GGUF's `tokenizer.chat_template`, else ChatML. BOS/EOS texts and stripping come
    /// from the tokenizer, as in llama.cpp's `common_chat_templates_init`.
    pub fn from_gguf<B: AsRef<[u8]>>(
        g: &Gguf<B>,
        tok: &Tokenizer,
        override_: Option<&str>,
    ) -> Result<Self, ChatError> {
        let source: Cow<'_, str> = match override_ {
            Some(s) if !s.is_empty() => Cow::Borrowed(s),
            _ => match g.get_str("tokenizer.chat_template") {
                Ok(s) => s,
                Err(GgufError::MissingKey(_)) => Cow::Borrowed(CHATML_TEMPLATE),
                Err(e) => return Err(e.into()),
            },
        };
        let text = |id: Option<u32>| {
            id.map(|id| {
                let mut v = Vec::new();
                tok.piece_into(id, true, &mut v);
                String::from_utf8_lossy(&v).into_owned()
            })
            .unwrap_or_default()
        };
        Ok(
            ChatTemplate::new(&source, &text(tok.bos()), &text(tok.eos()))?
                .with_strip(tok.add_bos(), tok.add_eos()),
        )
    }

    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
    /// Whether the template renders a system message (else it is merged into the next).
    pub fn supports_system_role(&self) -> bool {
        self.supports_system_role
    }

    /// Renders the conversation; `add_generation_prompt` appends the opening of the
    /// assistant's turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let mut msgs: Vec<(String, String)> = messages
            .iter()
            .map(|m| {
                let role = if self.map_developer && m.role == "developer" {
                    "system".to_string()
                } else {
                    m.role.clone()
                };
                (role, m.content.clone())
            })
            .collect();
        if !self.supports_system_role && msgs.first().is_some_and(|m| m.0 == "system") {
            // llama.cpp's workaround::system_message_not_supported
            let (_, sys) = msgs.remove(0);
            if let Some(next) = msgs.first_mut() {
                next.1 = format!("{sys}\n{}", next.1);
            }
        }
        let mut out = on_big_stack(|| self.render_raw(&msgs, add_generation_prompt))?;
        if self.strip_bos && !self.bos_token.is_empty() && out.starts_with(&self.bos_token) {
            out.drain(..self.bos_token.len());
        }
        if self.strip_eos && !self.eos_token.is_empty() && out.ends_with(&self.eos_token) {
            out.truncate(out.len() - self.eos_token.len());
        }
        Ok(out)
    }

    /// Renders with this conversation's fuel budget and output cap.
    fn render_raw(
        &self,
        msgs: &[(String, String)],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let text: usize = msgs.iter().map(|(r, c)| r.len() + c.len()).sum();
        let n = msgs.len() as u64;
        let per_message = FUEL_PER_MESSAGE + text as u64 / FUEL_TEXT_DIVISOR;
        let fuel = FUEL_MAX.min(FUEL_BASE.saturating_add(n.saturating_mul(per_message)));
        let max_out = OUTPUT_BASE + OUTPUT_PER_MESSAGE * msgs.len() + 2 * text;
        let messages: Vec<Value> = msgs
            .iter()
            .map(|(role, content)| {
                dict([
                    ("role", Value::from(role.as_str())),
                    ("content", Value::from(content.as_str())),
                ])
            })
            .collect();
        let ctx = dict([
            ("messages", Value::from(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
        ]);
        self.render_ctx(ctx, fuel, max_out)
    }

    /// Renders with the fields of `ctx` (an object; its keys keep their order) as the
    /// template's variables, and nothing else: no `messages`, no BOS/EOS texts, nothing
    /// stripped (llama-server's decision prompts, `decision.rs`). The fuel and output cap
    /// are a one-message conversation's with the serialized `ctx` as its text.
    pub fn render_value<S: serde::Serialize + ?Sized>(&self, ctx: &S) -> Result<String, ChatError> {
        let text = serde_json::to_string(ctx).map_or(0, |s| s.len());
        let fuel = FUEL_MAX.min(FUEL_BASE + FUEL_PER_MESSAGE + text as u64 / FUEL_TEXT_DIVISOR);
        let max_out = OUTPUT_BASE + OUTPUT_PER_MESSAGE + 2 * text;
        let ctx = Value::from(minijinja::value::Serde(ctx));
        on_big_stack(|| self.render_ctx(ctx, fuel, max_out))
    }

    /// One render of `ctx` with this fuel budget and output cap.
    fn render_ctx(&self, ctx: Value, fuel: u64, max_out: usize) -> Result<String, ChatError> {
        // The fuel is per render, so each render gets a copy of the environment (cheap: the
        // compiled template is shared).
        let mut env = self.env.clone();
        env.set_fuel(Some(fuel));
        let mut out = CappedOutput {
            buf: Vec::new(),
            max: max_out,
            full: false,
        };
        let tmpl = env.get_template(TEMPLATE_NAME)?;
        let r = tmpl.render_captured_to(ctx, &mut out);
        match r {
            // minijinja writes whole `str`s, so this is never lossy.
            Ok(_) => Ok(String::from_utf8(out.buf)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
            Err(_) if out.full => Err(ChatError::OutputTooLarge { max: out.max }),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(ChatError::OutOfFuel { fuel }),
            Err(e) => Err(e.into()),
        }
    }

    /// llama.cpp's capability probe: a system message whose content does not reach the
    /// output (or that makes the template raise) means no system role.
    fn probe_system_role(&self) -> bool {
        const MARK: &str = "POCKET_SYSTEM_PROBE";
        let msgs = [
            ("system".to_string(), MARK.to_string()),
            ("user".to_string(), "User message".to_string()),
        ];
        matches!(self.render_raw(&msgs, false), Ok(s) if s.contains(MARK))
    }
}
