//! Hostile chat templates (the template is untrusted input from the GGUF file): each must end
//! in the right `ChatError` quickly and with bounded memory, never hang, panic or exhaust
//! memory. No fixtures needed.

use std::time::{Duration, Instant};

use pocket_model::chat::{ChatError, ChatMessage, ChatTemplate, MAX_TEMPLATE_BYTES};
use pocket_model::gguf::Gguf;
use pocket_model::tokenizer::Tokenizer;

/// Generous for a 2-core CI machine; a limit hit takes milliseconds.
const TIME_BOUND: Duration = Duration::from_secs(5);

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "You are a helpful assistant"),
        ChatMessage::new("user", "Hello"),
    ]
}

/// Compiles and renders `src`, returning the error and asserting the time bound.
fn render_err(src: &str) -> ChatError {
    let t0 = Instant::now();
    let r = ChatTemplate::new(src, "<s>", "</s>").and_then(|t| t.render(&conversation(), true));
    let dt = t0.elapsed();
    let short: String = src.chars().take(80).collect();
    assert!(dt < TIME_BOUND, "{short:?} took {dt:?}");
    match r {
        Ok(s) => panic!("{short:?} rendered {} bytes instead of failing", s.len()),
        Err(e) => {
            eprintln!("{dt:>12.3?}  {short:?}\n              -> {e}");
            e
        }
    }
}

fn assert_out_of_fuel(src: &str) {
    let e = render_err(src);
    assert!(matches!(e, ChatError::OutOfFuel { .. }), "{src:?}: {e}");
    assert!(e.to_string().contains("fuel limit"), "{e}");
}

/// A minijinja error (syntax, recursion, `raise_exception`, ...) whose text contains `what`.
fn assert_template_error(src: &str, what: &str) {
    let e = render_err(src);
    assert!(matches!(e, ChatError::Template(_)), "{src:?}: {e}");
    assert!(e.to_string().contains(what), "{src:?}: {e}");
}

#[test]
fn endless_loops_run_out_of_fuel() {
    for src in [
        // 10^10 iterations of nothing.
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        // Loops over the conversation, nested deeply.
        "{% for a in range(100000) %}{% for m in messages %}{% for b in range(100000) %}{{ m.role[:0] }}{% endfor %}{% endfor %}{% endfor %}",
        // Wide recursion: 2^40 macro calls, each within the recursion limit.
        "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
        // Sorting and joining huge lists.
        "{% for i in range(100000) %}{{ range(100000) | sort | join('') | length }}{% endfor %}",
    ] {
        assert_out_of_fuel(src);
    }
}

#[test]
fn huge_range_is_refused() {
    // minijinja refuses ranges of more than 100k items outright.
    assert_template_error(
        "{% for i in range(10**9) %}x{% endfor %}",
        "range has too many elements",
    );
}

#[test]
fn huge_strings_and_lists_run_out_of_fuel() {
    for src in [
        "{{ 'x' * 10**9 }}",
        "{{ 'x' * 10**18 }}",
        "{% set s = 'x' * 10**9 %}",
        // Doubling a string: 2^64 bytes.
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
        // Not covered: doubling a list the same way (`ns.l = ns.l + ns.l`) is lazy until the
        // concatenation is 32 deep, then minijinja 3.1 materializes it without charging fuel
        // (ops::add → materialize_seq_concat): 2^33 items, unbounded memory.
        // Captured output ({% set %} blocks, macros) is charged too.
        "{% set s %}{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}{% endset %}",
        "{% macro m() %}{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}{% endmacro %}{% set s = m() %}",
        // Filters and Python methods that can blow up a small input.
        "{{ 'a\nb' | indent(10**9) }}",
        // Not covered: `'{}{}...'.format(*args)` takes time quadratic in the number of
        // arguments, unpaid by fuel (100k arguments: ~80 s).
        "{{ ('x' * 10000).split('x') | join('y' * 100000) }}",
        "{{ ('x' * 10000).replace('', 'y' * 10000) }}",
        "{{ range(100000) | join('x' * 100000) }}",
        "{{ ([('x' * 100000)] * 100000) | join('') }}",
        "{{ ('x' * 1000000) | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower | upper | lower }}",
        // pocket's own tojson: huge indent, or a huge value.
        "{{ [[1]] | tojson(indent=10**9) }}",
        "{{ {'a': [[[[1]]]]} | tojson(indent=10**15) }}",
        "{{ ([('x' * 100000)] * 100000) | tojson }}",
        "{{ strftime_now('%B' * 10**9) }}",
    ] {
        assert_out_of_fuel(src);
    }
}

#[test]
fn huge_sequence_repetition_is_refused() {
    for src in ["{{ [1, 2, 3] * 10**9 }}", "{{ messages * 10**9 }}"] {
        let e = render_err(src);
        assert!(
            matches!(e, ChatError::OutOfFuel { .. })
                || e.to_string().contains("repeated sequence is too large"),
            "{e}"
        );
    }
}

#[test]
fn huge_output_is_refused() {
    // Cheap per byte (one instruction writes 100 KB), so the output cap is hit before the
    // fuel runs out.
    let src = "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}";
    let e = render_err(src);
    assert!(
        matches!(
            e,
            ChatError::OutputTooLarge { .. } | ChatError::OutOfFuel { .. }
        ),
        "{e}"
    );
    let e = render_err("{% set s = 'x' * 100000 %}{% for i in range(100000) %}{{ s }}{% endfor %}");
    assert!(matches!(e, ChatError::OutputTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("output exceeds"), "{e}");
}

#[test]
fn deep_recursion_hits_the_recursion_limit() {
    for src in [
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% macro f(n) %}{% for x in [1] %}{% if true %}{{ f(n + 1) }}{% endif %}{% endfor %}{% endmacro %}{{ f(0) }}",
        "{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}",
    ] {
        assert_template_error(src, "recursion limit");
    }
}

/// The render of `src` with `msgs`: Ok or a minijinja or fuel error, within the time bound.
fn render_quickly(src: &str, msgs: &[ChatMessage]) -> Result<String, ChatError> {
    let t0 = Instant::now();
    let r = ChatTemplate::new(src, "", "").and_then(|t| t.render(msgs, true));
    let dt = t0.elapsed();
    let short: String = src.chars().take(60).collect();
    eprintln!(
        "{dt:>12.3?}  {short:?} ({} bytes)\n              -> {}",
        src.len(),
        match &r {
            Ok(s) => format!("rendered {} bytes", s.len()),
            Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
        }
    );
    assert!(dt < TIME_BOUND, "{short:?} took {dt:?}");
    assert!(
        !matches!(
            r,
            Err(ChatError::Panicked | ChatError::Thread(_) | ChatError::TemplateTooLarge { .. })
        ),
        "{short:?}: {r:?}"
    );
    r
}

/// Source nested as deep as the size cap allows. minijinja's parser bounds some nesting
/// (brackets, blocks) with a syntax error; the rest (unary and binary operator chains,
/// attribute and filter chains, `elif`) it compiles by recursing once per level, in time
/// quadratic in the depth: pocket refuses tags with more than 4 KiB of code, and a deep `elif`
/// chain must not overflow the stack.
#[test]
fn deep_nesting_in_the_source_ends_cleanly() {
    let fill = |unit: &str, pre: &str, post: &str| {
        unit.repeat((MAX_TEMPLATE_BYTES - pre.len() - post.len()) / unit.len())
    };
    let nested = |open: &str, mid: &str, close: &str| {
        let n = (MAX_TEMPLATE_BYTES - 10 - mid.len()) / (open.len() + close.len());
        format!("{{{{ {}{mid}{} }}}}", open.repeat(n), close.repeat(n))
    };
    let guarded = [
        nested("(", "1", ")"),
        nested("[", "1", "]"),
        nested("{'a': ", "1", "}"),
        nested("f(", "1", ")"),
        nested("{% if true %}", "x", "{% endif %}")
            .replace("{{ ", "")
            .replace(" }}", ""),
        nested("{% for m in messages %}", "x", "{% endfor %}")
            .replace("{{ ", "")
            .replace(" }}", ""),
    ];
    for src in &guarded {
        let e = render_quickly(src, &conversation()).unwrap_err();
        assert!(
            matches!(e, ChatError::TagTooLong { .. }) || e.to_string().contains("recursion"),
            "{e}"
        );
    }
    let unguarded = [
        ("-", "{{ ", "1 }}"),
        ("not ", "{{ ", "1 }}"),
        ("+1", "{{ 1", " }}"),
        ("~1", "{{ 1", " }}"),
        (" or 1", "{{ 1", " }}"),
        ("<1", "{{ 1", " }}"),
        ("**2", "{{ 2", " }}"),
        ("|trim", "{{ 'x'", " }}"),
        (" is defined", "{{ x", " }}"),
        (".a", "{{ messages", " }}"),
        ("[0]", "{{ messages", " }}"),
        ("()", "{{ range", " }}"),
        (" if 1 else 1", "{{ 1", " }}"),
    ];
    for (unit, pre, post) in unguarded {
        let src = format!("{pre}{}{post}", fill(unit, pre, post));
        let e = render_quickly(&src, &conversation()).unwrap_err();
        assert!(matches!(e, ChatError::TagTooLong { .. }), "{e}");
        // Just under the tag limit it compiles quickly (and renders or fails in the VM).
        let src = format!("{pre}{}{post}", unit.repeat(4000 / unit.trim().len()));
        let r = render_quickly(&src, &conversation());
        assert!(!matches!(r, Err(ChatError::TagTooLong { .. })), "{r:?}");
    }
    let pre = "{% if false %}";
    let src = format!(
        "{pre}{}{{% endif %}}",
        fill("{% elif false %}", pre, "{% endif %}")
    );
    render_quickly(&src, &conversation()).unwrap();
}

/// Values nested as deep as the fuel allows (a loop nests one level per ~8 fuel), then
/// dropped, printed, compared, serialized: no stack overflow, within the time bound. A long
/// conversation buys the most fuel (~120k levels).
///
/// Not covered: comparing two such values (`==`, `sort`, `in`) is quadratic in the depth and
/// unpaid by fuel: ~0.4 s at the 23k levels of a short conversation, but ~7 s at 100k levels.
#[test]
fn deeply_nested_values_end_cleanly() {
    let long: Vec<ChatMessage> = (0..200)
        .map(|i| {
            ChatMessage::new(
                if i % 2 == 0 { "user" } else { "assistant" },
                "x".repeat(10_000),
            )
        })
        .collect();
    let build = "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% for j in range(100) %}{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}";
    let build_map = "{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% for j in range(100) %}{% set ns.x = {'a': ns.x} %}{% endfor %}{% endfor %}";
    for msgs in [&conversation()[..], &long[..]] {
        for src in [
            build.to_string(),
            build_map.to_string(),
            build.replace("{% endfor %}{% endfor %}", "{% if i == 1000 %}{{ ns.x }}{% endif %}{% endfor %}{% endfor %}"),
            build.replace("{% endfor %}{% endfor %}", "{% if i == 1000 %}{{ ns.x | string | length }}{% endif %}{% endfor %}{% endfor %}"),
            build.replace("{% endfor %}{% endfor %}", "{% if i == 200 %}{{ ns.x == [ns.x] }}{% endif %}{% endfor %}{% endfor %}"),
            build.replace("{% endfor %}{% endfor %}", "{% if i == 200 %}{{ [ns.x, [ns.x]] | sort | length }}{% endif %}{% endfor %}{% endfor %}"),
            build.replace("{% endfor %}{% endfor %}", "{% if i == 100 %}{{ ns.x | tojson }}{% endif %}{% endfor %}{% endfor %}"),
        ] {
            let _ = render_quickly(&src, msgs);
        }
    }
    // tojson refuses depth it would not print sensibly anyway.
    let e = render_quickly(
        "{% set ns = namespace(x=[]) %}{% for i in range(3000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}",
        &conversation(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("nested deeper"), "{e}");
    // pprint is removed: its time grows with the cube of the depth, unpaid by fuel.
    let e = render_quickly("{{ messages | pprint }}", &conversation()).unwrap_err();
    assert!(e.to_string().contains("unknown filter"), "{e}");
}

#[test]
fn invalid_templates_are_syntax_errors() {
    for (src, what) in [
        ("{% for %}", "syntax error"),
        ("{{ messages", "syntax error"),
        ("{% if true %}x", "syntax error"),
        ("{% endfor %}", "syntax error"),
        ("{{ 1 + }}", "syntax error"),
        ("{% macro %}", "syntax error"),
        ("{{ 'unterminated }}", "syntax error"),
        ("{% raw %}", "syntax error"),
        ("{{ x | no_such_filter }}", "unknown filter"),
        ("{{ no_such_function() }}", "unknown function"),
        ("{{ 1 / 0 }}", "invalid operation"),
    ] {
        assert_template_error(src, what);
    }
}

#[test]
fn raise_exception_is_an_error_with_its_message() {
    assert_template_error(
        "{{ raise_exception('System role not supported') }}",
        "System role not supported",
    );
    // Raising inside a loop over a huge range still ends at once.
    assert_template_error(
        "{% for i in range(100000) %}{% if i == 5 %}{{ raise_exception('stop ' ~ i) }}{% endif %}{% endfor %}",
        "stop 5",
    );
}

#[test]
fn oversized_source_is_refused_before_compiling() {
    let src = "x".repeat(MAX_TEMPLATE_BYTES + 1);
    let e = render_err(&src);
    assert!(
        matches!(e, ChatError::TemplateTooLarge { len, max } if len == MAX_TEMPLATE_BYTES + 1 && max == MAX_TEMPLATE_BYTES),
        "{e}"
    );
    assert!(e.to_string().contains("the limit is"), "{e}");
    let e = render_err(&"{{ 1 }}".repeat(10 << 20));
    assert!(matches!(e, ChatError::TemplateTooLarge { .. }), "{e}");
    // At the limit it compiles.
    let t = ChatTemplate::new(&"x".repeat(MAX_TEMPLATE_BYTES), "", "").unwrap();
    assert_eq!(
        t.render(&conversation(), true).unwrap().len(),
        MAX_TEMPLATE_BYTES
    );
}

/// The built-in templates (and a template that walks the conversation a few times) render
/// a long conversation, far over anything a CPU engine runs, within the limits.
#[test]
fn long_conversations_render_within_the_limits() {
    let mut msgs = vec![ChatMessage::new("system", "You are a helpful assistant")];
    for i in 0..1000 {
        msgs.push(ChatMessage::new(
            "user",
            format!("question {i} ") + &"a".repeat(1000),
        ));
        msgs.push(ChatMessage::new(
            "assistant",
            format!("answer {i} ") + &"b".repeat(1000),
        ));
    }
    let text: usize = msgs.iter().map(|m| m.content.len()).sum();
    let walk = "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('role') }}{% endif %}{% endfor %}\
                {% for m in messages | reverse %}{% set c = m.content | trim %}{% if '</think>' in c %}{{ c.split('</think>')[-1] }}{% endif %}{% endfor %}\
                {% for m in messages %}{{ '<|' ~ m.role ~ '|>\n' ~ m.content.strip() ~ '\n' }}{% endfor %}";
    for src in ["chatml", "gemma", "llama3", walk] {
        let t0 = Instant::now();
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        // gemma merges the system message into the first user turn.
        let msgs = if src == "gemma" {
            &msgs[1..]
        } else {
            &msgs[..]
        };
        let out = t.render(msgs, true).unwrap();
        assert!(out.len() >= text - msgs.len(), "{src}: {} bytes", out.len());
        assert!(t0.elapsed() < TIME_BOUND, "{src}: {:?}", t0.elapsed());
    }
}

// --- templates read from the GGUF -----------------------------------------------------

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s);
}

/// A metadata-only GGUF v3 with a three-token SPM vocabulary and `tokenizer.chat_template`
/// set to the raw bytes `template` (type string, or `u32` when `None`).
fn gguf_with_template(template: Option<&[u8]>) -> Gguf<Vec<u8>> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&5u64.to_le_bytes());
    put_str(&mut b, b"tokenizer.ggml.model");
    b.extend_from_slice(&8u32.to_le_bytes());
    put_str(&mut b, b"llama");
    let tokens: [&[u8]; 3] = [b"<unk>", b"<s>", b"</s>"];
    put_str(&mut b, b"tokenizer.ggml.tokens");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&3u64.to_le_bytes());
    for t in tokens {
        put_str(&mut b, t);
    }
    put_str(&mut b, b"tokenizer.ggml.scores");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&6u32.to_le_bytes());
    b.extend_from_slice(&3u64.to_le_bytes());
    for _ in 0..3 {
        b.extend_from_slice(&0f32.to_le_bytes());
    }
    put_str(&mut b, b"tokenizer.ggml.token_type");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&5u32.to_le_bytes());
    b.extend_from_slice(&3u64.to_le_bytes());
    for ty in [2i32, 3, 3] {
        b.extend_from_slice(&ty.to_le_bytes());
    }
    put_str(&mut b, b"tokenizer.chat_template");
    match template {
        Some(t) => {
            b.extend_from_slice(&8u32.to_le_bytes());
            put_str(&mut b, t);
        }
        None => {
            b.extend_from_slice(&4u32.to_le_bytes());
            b.extend_from_slice(&7u32.to_le_bytes());
        }
    }
    Gguf::parse(b).expect("valid GGUF")
}

fn from_gguf(template: Option<&[u8]>) -> Result<ChatTemplate, ChatError> {
    let g = gguf_with_template(template);
    let tok = Tokenizer::from_gguf(&g).expect("tokenizer");
    let t0 = Instant::now();
    let r = ChatTemplate::from_gguf(&g, &tok, None);
    assert!(t0.elapsed() < TIME_BOUND, "{:?}", t0.elapsed());
    r
}

#[test]
fn gguf_templates_are_checked_too() {
    // A valid one, for reference.
    let t = from_gguf(Some(b"{% for m in messages %}{{ m.content }}{% endfor %}")).unwrap();
    assert_eq!(
        t.render(&conversation(), true).unwrap(),
        "You are a helpful assistantHello"
    );

    // Non-UTF-8 bytes are read lossily (U+FFFD), as all GGUF strings: no panic.
    let t = from_gguf(Some(b"\xff\xfe{{ messages | length }}\xc3")).unwrap();
    // (The system message is merged into the user's: the template does not show it.)
    assert_eq!(
        t.render(&conversation(), true).unwrap(),
        "\u{fffd}\u{fffd}1\u{fffd}"
    );
    let e = from_gguf(Some(b"{{ \xff }}")).unwrap_err();
    assert!(matches!(e, ChatError::Template(_)), "{e}");

    // Absurdly large.
    let e = from_gguf(Some("{{ 1 }}".repeat(1 << 20).as_bytes())).unwrap_err();
    assert!(matches!(e, ChatError::TemplateTooLarge { .. }), "{e}");

    // Of the wrong type.
    let e = from_gguf(None).unwrap_err();
    assert!(matches!(e, ChatError::Gguf(_)), "{e}");

    // Hostile: the error comes at render time (the system-role probe just fails).
    let t = from_gguf(Some(
        b"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    ))
    .unwrap();
    let t0 = Instant::now();
    let e = t.render(&conversation(), true).unwrap_err();
    assert!(matches!(e, ChatError::OutOfFuel { .. }), "{e}");
    assert!(t0.elapsed() < TIME_BOUND);
}
