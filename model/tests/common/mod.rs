//! Where the integration tests find their fixtures (`bash tests/fixtures.sh` fetches them),
//! and loading a model with a chosen numerics.

// Each test file compiles this module and uses part of it.
#![allow(dead_code)]

#[path = "../../../tests/common/fixtures.rs"]
mod fixtures;
#[allow(unused_imports)]
pub use fixtures::{cache_dir, fixture};
#[path = "../../../tests/common/report_text.rs"]
mod report_text;
#[allow(unused_imports)]
pub use report_text::figure;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pocket_model::{LoadOptions, Model, Numerics};

/// The model at `path`, its arithmetic `numerics`.
pub fn load_with_numerics(path: &Path, numerics: Numerics) -> Model {
    let options = LoadOptions {
        numerics,
        ..Default::default()
    };
    Model::load_with(path, options).unwrap()
}

/// llama.cpp's tool `name`, built by the provisioning script into the fixture cache.
pub fn llama_cpp_bin(name: &str) -> PathBuf {
    let bin = cache_dir().join("llama.cpp-build/bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `bash compare/provision-llama.sh`",
        bin.display()
    );
    bin
}

/// Runs `cmd` to its end; a failure fails the test with `what` and its stderr.
pub fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The files in `dir` whose names end in `.{ext}`, sorted.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

/// The short perplexity run the LoRA tests compare forms with: `tests/data/ppl_text.txt`,
/// `-c 128`, 2 threads, the first 3 chunks.
pub struct ShortPpl {
    text: String,
}

impl ShortPpl {
    pub fn new() -> ShortPpl {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/ppl_text.txt");
        ShortPpl {
            text: std::fs::read_to_string(path).unwrap(),
        }
    }

    /// `model`'s perplexity on the text's first 3 chunks of 128 tokens (its default
    /// adapters applied).
    pub fn of(&self, model: &Model) -> f64 {
        self.of_chunks(model, 3)
    }

    /// [`Self::of`] on `chunks` chunks (at most the text's 19): less rounding noise.
    pub fn of_chunks(&self, model: &Model, chunks: usize) -> f64 {
        let o = pocket_model::SessionOptions {
            n_ctx: 128,
            n_threads: 2,
            ..Default::default()
        };
        pocket_model::perplexity::perplexity_with(model, &self.text, o, Some(chunks), |_, _| {})
            .unwrap()
            .ppl
    }
}
