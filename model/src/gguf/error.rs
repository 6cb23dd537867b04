//! Errors of the GGUF reader. Every variant says what was wrong and where, in words a
//! user who only has the file can act on.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot open {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("not a GGUF file: magic is {found:02x?} (expected \"GGUF\")")]
    BadMagic { found: Vec<u8> },

    #[error("unsupported GGUF version {0} (pocket reads versions 2 and 3)")]
    UnsupportedVersion(u32),

    #[error("file is truncated: {what} at byte {offset} needs {needed} bytes, {available} remain")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("file is truncated or corrupt: {what} claims {count} entries at byte {offset}, more than the {remaining} remaining bytes can hold")]
    AbsurdCount {
        what: String,
        count: u64,
        offset: u64,
        remaining: u64,
    },

    #[error("metadata key {key:?}: unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },

    #[error("metadata key {key:?}: arrays nested deeper than {max}")]
    NestingTooDeep { key: String, max: usize },

    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),

    #[error("general.alignment must be a non-zero power of two u32, found {0}")]
    BadAlignment(String),

    #[error("tensor {name:?}: unknown ggml type id {type_id}")]
    UnknownTensorType { name: String, type_id: u32 },

    #[error("tensor {name:?}: {n_dims} dimensions (at most 4 are allowed)")]
    TooManyDims { name: String, n_dims: u32 },

    #[error("tensor {name:?}: bad shape {dims:?}: {why}")]
    BadShape {
        name: String,
        dims: Vec<u64>,
        why: String,
    },

    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),

    #[error(
        "tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        name: String,
        offset: u64,
        alignment: u64,
    },

    #[error("tensor {name:?}: data [{start}, {end}) lies outside the file's data section of {data_len} bytes")]
    TensorOutOfFile {
        name: String,
        start: u64,
        end: u64,
        data_len: u64,
    },

    #[error("tensor {name:?}: data offset {offset}, expected {expected} (tensors must follow one another in header order, each at the next aligned offset, as llama.cpp requires)")]
    UnexpectedOffset {
        name: String,
        offset: u64,
        expected: u64,
    },

    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    WrongValueType {
        key: String,
        expected: &'static str,
        found: String,
    },

    #[error("missing metadata key {0:?}")]
    MissingKey(String),

    #[error("missing tensor {0:?}")]
    MissingTensor(String),
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
