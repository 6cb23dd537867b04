//! The converter's own tests: what it writes for each construct and what it refuses.
//! That the Lark it writes accepts the strings GBNF accepts is tested with llguidance in
//! `grammar/tests.rs` and, on llama.cpp's grammars, in `model/tests/grammar_*.rs`.

use super::*;

fn no_tokens(_: &str) -> Option<u32> {
    None
}

fn lark(src: &str) -> String {
    gbnf_to_lark(src, &no_tokens).unwrap_or_else(|e| panic!("{src:?}: {e}"))
}

fn err(src: &str) -> GbnfError {
    gbnf_to_lark(src, &no_tokens).expect_err(src)
}

#[test]
fn literals_classes_and_repetitions() {
    assert_eq!(
        lark(&(r#"root ::= "a\"b\\" [a-z0-9_] [^\n"] . x*"#.to_owned() + "\nx ::= \"\\x41\\u00e9\\t\"")).as_str(),
        "start: g_root\n\
         g_root: \"a\\\"b\\\\\" /[\\x{61}-\\x{7A}\\x{30}-\\x{39}\\x{5F}]/ /[^\\x{A}\\x{22}]/ /[\\x{0}-\\x{10FFFF}]/ g_x*\n\
         g_x: \"Aé\\u0009\"\n"
    );
    assert_eq!(
        lark("root ::= (\"a\" | \"b\" \"c\")+ \"d\"? [x]{3} [y]{2,} [z]{0,4}"),
        "start: g_root\ng_root: (\"a\" | \"b\" \"c\")+ \"d\"? /[\\x{78}]/{3} /[\\x{79}]/{2,} /[\\x{7A}]/{0,4}\n"
    );
}

#[test]
fn repeated_repetitions_and_zero_counts() {
    assert_eq!(
        lark("root ::= \"a\"*+ \"b\"{0} \"c\"{0,0}"),
        "start: g_root\ng_root: (\"a\"*)+ \"\" \"\"\n"
    );
}

#[test]
fn empty_alternatives_make_the_group_optional() {
    assert_eq!(
        lark("root ::= ws\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}"),
        "start: g_root\ng_root: g_ws\ng_ws: (\" \" | \"\\u000a\" /[\\x{20}\\x{9}]/{0,20})?\n"
    );
    assert_eq!(lark("root ::= \"\""), "start: g_root\ng_root: \"\"\n");
}

#[test]
fn names_keep_apart_when_case_is_folded() {
    // GBNF names have no `_`, so `aB` and `a-b` and `ab` stay three rules.
    let out = lark("root ::= aB a-b ab\naB ::= \"1\"\na-b ::= \"2\"\nab ::= \"3\"");
    assert!(out.contains("g_root: g_a_b g_a-b g_ab\n"), "{out}");
    assert!(out.contains("g_a_b: \"1\"\n"), "{out}");
}

#[test]
fn rules_continue_over_newlines_only_inside_groups_and_after_bars() {
    let out = lark("root ::= (\n  \"a\"\n  \"b\"\n) |\n  \"c\" # comment\n");
    assert_eq!(out, "start: g_root\ng_root: \"a\" \"b\" | \"c\"\n");
    // Outside a group a newline ends the rule: the next line must be a rule.
    let e = err("root ::= \"a\"\n  \"b\"");
    assert_eq!((e.line, e.col), (2, 3), "{e}");
}

#[test]
fn surrogates_and_out_of_range_code_points_are_left_out_of_classes() {
    assert_eq!(
        lark(r"root ::= [\uD7FF-\uE000] [\U0010FFFF-\U00110005] [\uD800-\uDFFF]"),
        "start: g_root\ng_root: /[\\x{D7FF}\\x{E000}]/ /[\\x{10FFFF}]/ /[^\\x{0}-\\x{10FFFF}]/\n"
    );
}

#[test]
fn tokens_by_id_and_by_text() {
    let resolve = |t: &str| (t == "<|im_end|>").then_some(7);
    let out = gbnf_to_lark("root ::= <[12]> !<[3]> <|im_end|> !<|im_end|>", &resolve).unwrap();
    assert_eq!(out, "start: g_root\ng_root: <[12]> <[^3]> <[7]> <[^7]>\n");
    let e = gbnf_to_lark("root ::= <nope>", &resolve).unwrap_err();
    assert!(e.msg.contains("<nope> is not exactly one token"), "{e}");
}

#[test]
fn errors_name_the_problem_and_where() {
    let cases: &[(&str, &str, (usize, usize))] = &[
        ("root ::= \"abc", "end of input in a string", (1, 14)),
        ("root ::= [a-", "end of input in a class", (1, 13)),
        ("root := \"a\"", "expecting ::=", (1, 6)),
        ("root ::= \"\\q\"", "unknown escape", (1, 11)),
        ("root ::= \"\\x4\"", "expecting 2 hex digits", (1, 11)),
        ("root ::= (\"a\"", "expecting ')'", (1, 14)),
        ("root ::= * \"a\"", "no item before it", (1, 10)),
        ("root ::= \"a\"{2001}", "exceed the limit of 2000", (1, 19)),
        (
            "root ::= \"a\"{3,1}",
            "maximum is below the minimum",
            (1, 18),
        ),
        ("root ::= \"a\"{x}", "expecting an integer", (1, 14)),
        ("root ::= \"\\U00110000\"", "not a character", (1, 21)),
        ("root ::= x_y", "expecting a newline", (1, 11)),
    ];
    for &(src, want, at) in cases {
        let e = err(src);
        assert!(e.msg.contains(want), "{src:?}: {e}");
        assert_eq!((e.line, e.col), at, "{src:?}: {e}");
    }
    let e = err("root ::= item\nitem ::= missing");
    assert_eq!(e.msg, "rule 'item': undefined rule 'missing'");
    assert_eq!((e.line, e.col), (2, 1));
    assert!(err("item ::= \"a\"").msg.contains("no 'root' rule"));
}

#[test]
fn a_rule_defined_twice_keeps_the_last_definition() {
    assert_eq!(
        lark("root ::= \"a\"\nroot ::= \"b\""),
        "start: g_root\ng_root: \"b\"\n"
    );
}

#[test]
fn lark_is_told_from_gbnf() {
    assert!(is_lark("%llguidance {}\nstart: \"a\""));
    assert!(is_lark("start : x\nx: \"a\""));
    assert!(!is_lark("root ::= \"a\""));
    assert!(!is_lark("starting ::= \"a\"\nroot ::= starting"));
}
