//! Reading figures out of the text reports the tools print (pocket's and llama.cpp's
//! `perplexity` statistics). One file, included by each crate's test `common` module with
//! `#[path]`.

/// The first number after `key` on the first line that starts with `key`.
pub fn figure(report: &str, key: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no `{key}` in:\n{report}"));
    line[key.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
