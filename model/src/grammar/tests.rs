//! Constraints on a toy vocabulary (the 256 bytes, a few multi-byte tokens and an EOS):
//! which strings each kind of grammar lets through, masks, the end, the errors.

use std::sync::Arc;

use super::*;

const EOS: u32 = 256;

fn toy_vocab() -> GrammarVocab {
    let mut bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    bytes.push(b"\xff<eos>".to_vec());
    for t in ["true", "false", "\"a", "ab", "positive", "neg"] {
        bytes.push(t.as_bytes().to_vec());
    }
    let special = Arc::new(|t: &str| (t == "<eos>").then_some(EOS));
    GrammarVocab::from_token_bytes(bytes, &[EOS], special).expect("toy vocabulary")
}

fn compile(spec: GrammarSpec) -> Grammar {
    toy_vocab()
        .compile(&spec)
        .unwrap_or_else(|e| panic!("{spec:?}: {e}"))
}

fn gbnf(src: &str) -> Grammar {
    compile(GrammarSpec::Gbnf(src.into()))
}

/// Feeds `text` byte by byte, each checked against the mask; then whether the grammar
/// may end there (EOS allowed).
fn accepts(g: &Grammar, text: &str) -> bool {
    let mut c = g.constraint();
    for &b in text.as_bytes() {
        match c.allowed() {
            Ok(m) if m.is_allowed(b as u32) => {}
            _ => return false,
        }
        if c.commit(b as u32).is_err() {
            return false;
        }
    }
    c.allowed().is_ok_and(|m| m.is_allowed(EOS))
}

#[test]
fn gbnf_grammars_accept_their_language_only() {
    let g = gbnf(r#"root ::= ("positive" | "negative" | "neutral")"#);
    for ok in ["positive", "negative", "neutral"] {
        assert!(accepts(&g, ok), "{ok}");
    }
    for bad in ["", "positiv", "positive ", "Positive", "neutralx"] {
        assert!(!accepts(&g, bad), "{bad:?}");
    }
    // Repetition bounds, classes, optional groups, `.` takes a newline.
    let g = gbnf("root ::= [a-c]{2,3} (\"-\" [0-9]+)? . ");
    for ok in ["ab\n", "abc-12x", "cc-0é"] {
        assert!(accepts(&g, ok), "{ok:?}");
    }
    for bad in ["a\n", "abcd\n", "ab-x", "ab"] {
        assert!(!accepts(&g, bad), "{bad:?}");
    }
}

#[test]
fn a_terminal_growing_into_what_follows_it_still_finishes() {
    // arithmetic.gbnf's shape: `ident` ends with `ws`, which takes "\n", and a "\n"
    // follows. Merged into one greedy lexeme this could never end; one to one it does.
    let g = gbnf("root ::= (ident \"\\n\")+\nident ::= [a-z]+ ws\nws ::= [ \\t\\n]*");
    assert!(accepts(&g, "x\n"));
    assert!(accepts(&g, "x \n\ny\n"));
    assert!(!accepts(&g, "x"));
}

#[test]
fn the_mask_allows_multi_byte_tokens_and_only_eos_at_the_end() {
    let g = gbnf(r#"root ::= "positive" | "neg" "ative""#);
    let mut c = g.constraint();
    let m = c.allowed().unwrap();
    let positive = 256 + 5;
    let neg = 256 + 6;
    assert!(m.is_allowed(positive) && m.is_allowed(neg) && m.is_allowed(b'p' as u32));
    assert!(!m.is_allowed(b'x' as u32) && !m.is_allowed(EOS));
    c.commit(positive).unwrap();
    let m = c.allowed().unwrap();
    assert!(m.is_allowed(EOS));
    assert_eq!(m.num_set(), 1, "only EOS after a complete sentence");
    c.commit(EOS).unwrap();
    assert!(c.is_finished());
}

#[test]
fn json_schemas_and_json_objects() {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "polarity": {"enum": ["positive", "negative"]},
            "n": {"type": "integer"}
        },
        "required": ["polarity", "n"],
        "additionalProperties": false
    });
    let g = compile(GrammarSpec::JsonSchema(schema));
    assert!(accepts(&g, r#"{"polarity":"positive","n":3}"#));
    assert!(accepts(&g, r#"{"polarity": "negative", "n": -12}"#));
    assert!(!accepts(&g, r#"{"polarity":"meh","n":3}"#));
    assert!(!accepts(&g, r#"{"polarity":"positive"}"#));
    assert!(!accepts(&g, r#"{"polarity":"positive","n":3,"x":1}"#));
    let g = compile(GrammarSpec::JsonObject);
    assert!(accepts(&g, r#"{"a":[1,{"b":null}]}"#));
    assert!(!accepts(&g, "[1]"));
}

#[test]
fn lark_is_taken_as_it_is() {
    let g = gbnf("start: \"a\" B\nB: /[0-9]+/");
    assert!(accepts(&g, "a12"));
    assert!(!accepts(&g, "a"));
    let g = compile(GrammarSpec::Lark("start: \"x\"+".into()));
    assert!(accepts(&g, "xxx"));
}

#[test]
fn bad_grammars_and_schemas_are_errors_naming_the_problem() {
    let v = toy_vocab();
    let e = v
        .compile(&GrammarSpec::Gbnf("root ::= \"a\" undefined-rule".into()))
        .unwrap_err();
    assert!(
        matches!(e, GrammarError::Gbnf(_))
            && e.to_string().contains("undefined rule 'undefined-rule'"),
        "{e}"
    );
    let e = v
        .compile(&GrammarSpec::Lark("start: nope".into()))
        .unwrap_err();
    assert!(
        matches!(e, GrammarError::Compile { .. }) && e.to_string().contains("nope"),
        "{e}"
    );
    let e = GrammarSpec::json_schema_text("{\"type\": ").unwrap_err();
    assert!(matches!(e, GrammarError::SchemaSyntax(_)), "{e}");
    let e = v
        .compile(&GrammarSpec::JsonSchema(
            serde_json::json!({"type": "no-such-type"}),
        ))
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("the JSON schema does not compile"),
        "{e}"
    );
}

#[test]
fn constraints_from_one_grammar_are_independent() {
    let g = gbnf(r#"root ::= "ab" | "ac""#);
    let mut a = g.constraint();
    a.commit(b'a' as u32).unwrap();
    a.commit(b'b' as u32).unwrap();
    assert!(a.is_accepting());
    let mut b = g.constraint();
    assert!(!b.is_accepting());
    assert!(b.allowed().unwrap().is_allowed(b'a' as u32));
}
