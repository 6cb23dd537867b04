//! Where the integration tests find their fixtures (`bash tests/fixtures.sh` fetches them),
//! and loading a model with a chosen numerics.

// Each test file compiles this module and uses part of it.
#![allow(dead_code)]

#[path = "../../../tests/common/fixtures.rs"]
mod fixtures;
#[allow(unused_imports)]
pub use fixtures::{cache_dir, fixture};

use std::path::Path;

use pocket_model::{LoadOptions, Model, Numerics};

/// The model at `path`, its arithmetic `numerics`.
pub fn load_with_numerics(path: &Path, numerics: Numerics) -> Model {
    let options = LoadOptions {
        numerics,
        ..Default::default()
    };
    Model::load_with(path, options).unwrap()
}
