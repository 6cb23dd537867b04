//! llama.cpp's prompt and stop flags on `pocket run` (SmolLM2): `-f FILE` is `-p` with the
//! file's text (less one trailing newline), `-r STOP` cuts the greedy text before its first STOP, `--ignore-eos` keeps
//! generating where the model ends at once, `-s` is `--seed`, `--no-display-prompt` is
//! `--no-echo`; a missing file and `-p` with `-f` are errors.

mod common;

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pocket"))
        .args(["run", "-m"])
        .arg(common::smollm2())
        .args(["-t", "2"])
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    common::assert_success(out, "pocket run");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The "generation N tokens" count `pocket run` prints on stderr.
fn generated(out: &Output) -> usize {
    let err = String::from_utf8_lossy(&out.stderr);
    let (_, rest) = err.split_once("generation ").expect("no timings line");
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_prompt_file_is_the_prompt() {
    let prompt = "The three primary colors are";
    let path = std::env::temp_dir().join(format!("pocket-prompt-{}.txt", std::process::id()));
    // With the line end an editor leaves: `-f` drops one trailing newline, as llama.cpp's.
    std::fs::write(&path, format!("{prompt}\n")).unwrap();
    let from_file = stdout(&run(&["-f", path.to_str().unwrap(), "-n", "16"]));
    let _ = std::fs::remove_file(&path);
    let inline = stdout(&run(&["-p", prompt, "-n", "16"]));
    assert_eq!(from_file, inline);
    assert!(
        inline.starts_with(prompt) && inline.len() > prompt.len() + 10,
        "{inline:?}"
    );
}

#[test]
fn a_reverse_prompt_stops_the_text_before_it() {
    let prompt = "List the days of the week: Monday, Tuesday,";
    let full = stdout(&run(&["-p", prompt, "-n", "24", "--no-display-prompt"]));
    let stop = ",";
    let cut = full
        .find(stop)
        .expect("the greedy text has no comma to stop at");
    let stopped = stdout(&run(&["-p", prompt, "-n", "24", "--no-echo", "-r", stop]));
    assert_eq!(
        stopped.trim_end_matches('\n'),
        &full[..cut],
        "full text: {full:?}"
    );
    // Several stop strings: the first one reached wins.
    let two = stdout(&run(&[
        "-p",
        prompt,
        "-n",
        "24",
        "--no-echo",
        "-r",
        "zzz",
        "-r",
        stop,
    ]));
    assert_eq!(two, stopped);
}

#[test]
fn ignore_eos_generates_past_the_end_of_generation() {
    // SmolLM2-Instruct answers the quoting workload's bare text (no chat template) with an
    // end-of-generation token at once.
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/compare/workloads/quoting.txt");
    let plain = run(&["-f", file, "-n", "12", "--no-echo"]);
    assert_eq!(
        stdout(&plain).trim(),
        "",
        "the model no longer ends at once here"
    );
    let more = run(&["-f", file, "-n", "12", "--no-echo", "--ignore-eos"]);
    assert!(!stdout(&more).trim().is_empty());
    assert_eq!(
        generated(&more),
        11,
        "all 12 tokens (the first from the prompt's step)"
    );
}

#[test]
fn s_is_the_seed() {
    let args = [
        "-p",
        "Once upon a time",
        "-n",
        "16",
        "--temp",
        "1.0",
        "--no-echo",
    ];
    let short = stdout(&run(&[&args[..], &["-s", "7"]].concat()));
    let long = stdout(&run(&[&args[..], &["--seed", "7"]].concat()));
    let other = stdout(&run(&[&args[..], &["-s", "8"]].concat()));
    assert_eq!(short, long);
    assert_ne!(short, other, "seeds 7 and 8 sampled the same 16 tokens");
}

#[test]
fn bad_prompt_flags_are_errors() {
    let missing = run(&["-f", "/nonexistent/prompt.txt"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("cannot read the prompt file /nonexistent/prompt.txt"),
        "{err}"
    );
    let both = run(&["-f", "/etc/hostname", "-p", "hi"]);
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));
    let neither = run(&["-n", "4"]);
    assert!(!neither.status.success());
    assert!(String::from_utf8_lossy(&neither.stderr).contains("--prompt"));
}
