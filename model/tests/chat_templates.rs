//! Chat templates of the fixture models against llama.cpp's expectations
//! (tests/test-chat-template.cpp of b11434, the conversation of `main_automated_tests`).
//!
//! Fixtures come from `bash tests/fixtures.sh` (cache dir `$POCKET_CACHE`, default
//! `~/.cache/pocket`); a missing one fails the test with that instruction.

use pocket_model::chat::{ChatMessage, ChatTemplate, CHATML_TEMPLATE};
use pocket_model::gguf::GgufFile;
use pocket_model::tokenizer::Tokenizer;

mod common;
use common::{files_with_ext, fixture};

fn template(model: &str, override_: Option<&str>) -> ChatTemplate {
    let g = GgufFile::open(fixture(model)).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    ChatTemplate::from_gguf(&g, &tok, override_).unwrap()
}

fn conversation() -> Vec<ChatMessage> {
    [
        ("system", "You are a helpful assistant"),
        ("user", "Hello"),
        ("assistant", "Hi there"),
        ("user", "Who are you"),
        ("assistant", "   I am an assistant   "),
        ("user", "Another question"),
    ]
    .into_iter()
    .map(|(r, c)| ChatMessage::new(r, c))
    .collect()
}

/// test-chat-template.cpp, "teknium/OpenHermes-2.5-Mistral-7B" (ChatML) expected_output.
const CHATML_EXPECTED: &str = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n";

/// test-chat-template.cpp, "google/gemma-7b-it" expected_output (llama.cpp's gemma format).
const GEMMA_EXPECTED: &str = "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n";

fn assert_incremental(t: &ChatTemplate, msgs: &[ChatMessage]) {
    for n in 1..msgs.len() {
        let prev = t.render(&msgs[..n], false).unwrap();
        for gen in [false, true] {
            let next = t.render(&msgs[..n + 1], gen).unwrap();
            assert!(
                next.starts_with(&prev),
                "n={n} gen={gen}:\n{prev:?}\nis not a prefix of\n{next:?}"
            );
        }
    }
}

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA3: &str = "models/gemma-3-270m-q4_k_m.gguf";

#[test]
fn smollm2_metadata_template() {
    let t = template(SMOLLM2, None);
    // The GGUF's own template (ChatML plus SmolLM's default system prompt), not the fallback.
    assert_ne!(t.source(), CHATML_TEMPLATE);
    assert!(t.source().contains("named SmolLM"));
    assert_eq!(t.render(&conversation(), true).unwrap(), CHATML_EXPECTED);
    assert_incremental(&t, &conversation());
    // Without a system message the template supplies its own.
    let s = t.render(&conversation()[1..2], true).unwrap();
    assert_eq!(
        s,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_incremental(&t, &conversation()[1..]);
}

#[test]
fn gemma3_270m_has_no_template_and_falls_back_to_chatml() {
    // gemma-3-270m (the base model) carries no tokenizer.chat_template: llama.cpp then
    // uses CHATML_TEMPLATE_SRC, and so does pocket.
    let t = template(GEMMA3, None);
    assert_eq!(t.source(), CHATML_TEMPLATE);
    assert_eq!(t.render(&conversation(), true).unwrap(), CHATML_EXPECTED);
    assert_incremental(&t, &conversation());
}

#[test]
fn gemma3_270m_with_gemma_override() {
    let t = template(GEMMA3, Some("gemma"));
    assert_eq!(t.bos_token(), "<bos>");
    // The tokenizer adds BOS itself, so the template's leading <bos> is cut (llama.cpp).
    assert_eq!(t.render(&conversation(), true).unwrap(), GEMMA_EXPECTED);
    assert_incremental(&t, &conversation());
}

#[test]
fn override_with_jinja_text() {
    let t = template(
        SMOLLM2,
        Some("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"),
    );
    let s = t.render(&conversation()[1..3], false).unwrap();
    assert_eq!(
        s,
        format!("{}[user]Hello[assistant]Hi there", t.bos_token())
    );
}

/// A conversation of `turns` user/assistant pairs after a system message, each message
/// about `len` bytes.
fn long_conversation(turns: usize, len: usize) -> Vec<ChatMessage> {
    let text =
        |i: usize| format!("message {i}: ") + &"lorem ipsum dolor sit amet ".repeat(len / 27);
    let mut msgs = vec![ChatMessage::new("system", "You are a helpful assistant")];
    for i in 0..turns {
        msgs.push(ChatMessage::new("user", text(2 * i)));
        msgs.push(ChatMessage::new("assistant", text(2 * i + 1)));
    }
    msgs.push(ChatMessage::new("user", "Another question"));
    msgs
}

/// Every template llama.cpp ships (models/templates) renders the test conversation and a
/// long one within the render limits (fuel, output cap): the limits stop hostile templates,
/// not real ones. A template may still fail for other reasons (syntax minijinja lacks, a
/// `raise_exception` about roles or tools); those are not limit errors.
#[test]
fn llama_cpp_templates_render_within_limits() {
    use pocket_model::chat::ChatError;
    let dir = fixture("llama.cpp/models/templates");
    let paths = files_with_ext(&dir, "jinja");
    // 161 messages, ~40k tokens (Reka-Edge, quadratic, would stop at ~200).
    let long = long_conversation(80, 1000);
    let mut rendered = 0;
    for p in &paths {
        let src = std::fs::read_to_string(p).unwrap();
        let Ok(t) = ChatTemplate::new(&src, "<s>", "</s>") else {
            eprintln!("{}: does not compile", p.display());
            continue;
        };
        for msgs in [&conversation()[..], &long[..]] {
            match t.render(msgs, true) {
                Ok(_) => rendered += 1,
                Err(e @ (ChatError::OutOfFuel { .. } | ChatError::OutputTooLarge { .. })) => {
                    panic!("{}: {e}", p.display())
                }
                Err(_) => {}
            }
        }
    }
    assert!(
        rendered > paths.len(),
        "only {rendered} renders of {} templates",
        paths.len()
    );
}

// The built-in templates and the Jinja dialect, against test-chat-template.cpp.

/// tests/test-chat-template.cpp, "google/gemma-7b-it" `template_str` and
/// `expected_output_jinja` (no system role: llama.cpp merges it with "\n").
const GEMMA7B_TEMPLATE: &str = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";
const GEMMA7B_EXPECTED_JINJA: &str = "<start_of_turn>user\nYou are a helpful assistant\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n";

/// tests/test-chat-template.cpp, "Llama-3" `expected_output`.
const LLAMA3_EXPECTED: &str = "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";

/// Built-in template `name` that strips a leading BOS text from what it renders, as llama.cpp's
/// expected outputs are written.
fn leading_bos_stripped(name: &str, bos: &str, eos: &str) -> ChatTemplate {
    ChatTemplate::new(name, bos, eos)
        .unwrap()
        .with_strip(true, false)
}

/// Built-in template `name` (with these BOS and EOS texts) has a system role, renders
/// llama.cpp's `expected` output for the test conversation, and renders it incrementally too.
fn assert_builtin_renders_with_system(name: &str, bos: &str, eos: &str, expected: &str) {
    let t = ChatTemplate::new(name, bos, eos).unwrap();
    assert_eq!(t.render(&conversation(), true).unwrap(), expected);
    assert!(t.supports_system_role());
    assert_incremental(&t, &conversation());
}

#[test]
fn chatml_builtin_matches_llama_cpp() {
    assert_builtin_renders_with_system("chatml", "", "", CHATML_EXPECTED);
}

#[test]
fn gemma_builtin_matches_llama_cpp() {
    let t = leading_bos_stripped("gemma", "<bos>", "<eos>");
    assert_eq!(t.render(&conversation(), true).unwrap(), GEMMA_EXPECTED);
    // Without stripping, the BOS text leads.
    let t = ChatTemplate::new("gemma", "<bos>", "<eos>").unwrap();
    let s = t.render(&conversation(), true).unwrap();
    assert_eq!(s, format!("<bos>{GEMMA_EXPECTED}"));
    assert_incremental(&t, &conversation());
}

#[test]
fn llama3_builtin_matches_llama_cpp() {
    let t = leading_bos_stripped("llama3", "<|begin_of_text|>", "<|eot_id|>");
    assert_eq!(t.render(&conversation(), true).unwrap(), LLAMA3_EXPECTED);
    assert_incremental(&t, &conversation());
}

/// test-chat-template.cpp, "CohereForAI/c4ai-command-r-plus" expected_output (llama.cpp's
/// built-in command-r format).
const COMMAND_R_EXPECTED: &str = "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";

#[test]
fn command_r_builtin_matches_llama_cpp() {
    assert_builtin_renders_with_system(
        "command-r",
        "<BOS_TOKEN>",
        "<|END_OF_TURN_TOKEN|>",
        COMMAND_R_EXPECTED,
    );
}

#[test]
fn template_without_system_role_gets_it_merged() {
    let t = ChatTemplate::new(GEMMA7B_TEMPLATE, "", "").unwrap();
    assert!(!t.supports_system_role());
    assert_eq!(
        t.render(&conversation(), true).unwrap(),
        GEMMA7B_EXPECTED_JINJA
    );
}

#[test]
fn raise_exception_is_an_error() {
    let t = ChatTemplate::new(GEMMA7B_TEMPLATE, "", "").unwrap();
    let msgs = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    let e = t.render(&msgs, true).unwrap_err().to_string();
    assert!(
        e.contains("Conversation roles must alternate"),
        "unexpected error: {e}"
    );
}

#[test]
fn python_methods_and_tojson() {
    let src = "{% for m in messages %}{{ m.content.strip() }}|{{ m.role.startswith('us') }}|{{ m.content.split(',') | length }}|{{ m.role.upper() }}{% endfor %}\n\
               {{ {'a': 1, 'b': [true, none, 'x<y'], 'c': 1.5} | tojson }}\n\
               {{ {'a': {'b': 2}} | tojson(indent=2) }}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    let s = t
        .render(&[ChatMessage::new("user", "  a,b  ")], false)
        .unwrap();
    assert_eq!(
        s,
        // Python prints True; trim_blocks eats the newline after {% endfor %}.
        "a,b|True|2|USER{\"a\": 1, \"b\": [true, null, \"x<y\"], \"c\": 1.5}\n{\n  \"a\": {\n    \"b\": 2\n  }\n}"
    );
}

#[test]
fn trim_and_lstrip_blocks_like_hf() {
    let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\nU:{{ m.content }}\n    {% endif %}\n{% endfor %}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    let s = t.render(&[ChatMessage::new("user", "hi")], false).unwrap();
    assert_eq!(s, "U:hi\n");
}

#[test]
fn developer_role_maps_to_system() {
    let t = ChatTemplate::new("chatml", "", "").unwrap();
    let s = t
        .render(&[ChatMessage::new("developer", "be brief")], false)
        .unwrap();
    assert_eq!(s, "<|im_start|>system\nbe brief<|im_end|>\n");
}
