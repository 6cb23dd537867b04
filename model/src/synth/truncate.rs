//! A layer-truncated copy of a real model: its first `keep` layers, its own embedding,
//! final norm and head, and all of its metadata (with the layer count changed). As a draft
//! for speculative decoding this is self-speculation by layer skipping: a cheap model of
//! the same vocabulary whose guesses are often the target's, where no real draft pair
//! exists.

use std::io::Write;

use crate::gguf::{GgufFile, GgufWriter, MetaValue};

#[derive(Debug, thiserror::Error)]
pub enum TruncateError {
    #[error("the model has {have} layers; keep 1 to {have}, not {keep}")]
    Layers { keep: usize, have: usize },
    #[error("the model has no `general.architecture` or `<arch>.block_count`")]
    NoLayerCount,
    #[error("writing the truncated model: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes `src` cut to its first `keep` layers to `out`.
pub fn truncate_layers(
    src: &GgufFile,
    keep: usize,
    out: &mut dyn Write,
) -> Result<(), TruncateError> {
    let arch = src
        .get("general.architecture")
        .and_then(|v| v.as_str().map(str::to_string))
        .ok_or(TruncateError::NoLayerCount)?;
    let count_key = format!("{arch}.block_count");
    let have = src
        .get(&count_key)
        .and_then(|v| v.as_u64())
        .ok_or(TruncateError::NoLayerCount)? as usize;
    if keep == 0 || keep > have {
        return Err(TruncateError::Layers { keep, have });
    }
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        let v = if key == count_key {
            MetaValue::U32(keep as u32)
        } else {
            MetaValue::from_value(&value)
        };
        w.kv(key, v);
    }
    for t in src.tensors() {
        if layer_of(&t.name).is_some_and(|l| l >= keep) {
            continue;
        }
        w.tensor(&t.name, t.ggml_type, &t.dims, src.tensor_data(t).to_vec())?;
    }
    w.write_to(out)?;
    Ok(())
}

/// The layer of a `blk.N.*` tensor.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::layer_of;

    #[test]
    fn layer_numbers_come_from_blk_names() {
        assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(layer_of("output_norm.weight"), None);
        assert_eq!(layer_of("blk.x.attn_q.weight"), None);
    }
}
