//! Where the tests of every crate find their fixtures (`bash tests/fixtures.sh` fetches
//! them). One file, included by each crate's test `common` module with `#[path]`.

use std::path::PathBuf;

/// The fixture cache: `$POCKET_CACHE` when set and not empty, else `~/.cache/pocket`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("POCKET_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache/pocket")
        }
    }
}

/// `rel` in the fixture cache; a missing fixture fails the test with how to fetch it.
pub fn fixture(rel: &str) -> PathBuf {
    let p = cache_dir().join(rel);
    assert!(
        p.exists(),
        "missing fixture {}: run `bash tests/fixtures.sh` first",
        p.display()
    );
    p
}
