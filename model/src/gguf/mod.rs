//! The zero-copy GGUF reader (versions 2 and 3, little-endian).
//!
//! `GgufFile::open(path)` maps the file and validates the whole header; metadata values
//! and tensor bytes are then borrowed from the map. `Gguf::parse(bytes)` does the same for
//! bytes already in memory (tests, fuzzing). `GgufWriter` writes v3 files (synthetic models).

mod cursor;
mod error;
mod file;
mod reader;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use file::{GgufFile, TensorBytes};
pub use reader::{Gguf, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
pub use value::{ArrayIter, ArrayView, Value, ValueType, MAX_ARRAY_DEPTH};
pub use writer::{GgufWriter, MetaValue};
