//! The GGUF header parser: magic, version, metadata, tensor infos, data section.
//!
//! Parsing validates everything up front (counts, lengths, shapes, offsets, overlaps) with
//! checked arithmetic against the bytes that remain, and records positions only. Values,
//! arrays and tensor data are then borrowed from the bytes on demand: nothing is copied.

use std::collections::HashMap;
use std::ops::Range;

use pocket_kernels::GgmlType;

use super::cursor::Cursor;
use super::error::{GgufError, Result};
use super::value::{read_value, Value, ValueType};

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;

/// One metadata entry: its key and where its value lies.
#[derive(Clone, Debug)]
struct KvEntry {
    key: String,
    ty: ValueType,
    /// Byte offset of the value (after the type id).
    value_at: usize,
}

/// A tensor's description from the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions, innermost (contiguous) first, as ggml's `ne`.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file over any byte container (`Vec<u8>`, a memory map, a slice).
pub struct Gguf<B: AsRef<[u8]>> {
    bytes: B,
    version: u32,
    alignment: u64,
    kvs: Vec<KvEntry>,
    kv_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_start: u64,
}

impl<B: AsRef<[u8]>> Gguf<B> {
    /// Parses and validates the header. Never panics, whatever the bytes.
    pub fn parse(bytes: B) -> Result<Self> {
        let buf = bytes.as_ref();
        let mut c = Cursor::new(buf);

        let magic = c
            .take(4, &|| "magic".into())
            .map_err(|_| GgufError::BadMagic {
                found: buf[..buf.len().min(4)].to_vec(),
            })?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let version = c.u32(&|| "version".into())?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = c.u64(&|| "tensor count".into())?;
        let n_kv = c.u64(&|| "metadata count".into())?;

        // Metadata. The smallest entry is an empty key (8), a type (4) and a u8 (1).
        c.check_count(n_kv, 13, &|| "metadata count".into())?;
        let mut kvs = Vec::with_capacity(n_kv as usize);
        let mut kv_index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key_bytes = c.string(&|| format!("key of metadata entry {i}"))?;
            let key = String::from_utf8_lossy(key_bytes).into_owned();
            let type_id = c.u32(&|| format!("value type of metadata key {key:?}"))?;
            let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                key: key.clone(),
                type_id,
            })?;
            let value_at = c.pos();
            read_value(ty, &mut c, 0, &key)?; // validates the extent; decoded again on demand
            if kv_index.insert(key.clone(), kvs.len()).is_some() {
                return Err(GgufError::DuplicateKey(key));
            }
            kvs.push(KvEntry { key, ty, value_at });
        }

        let alignment = read_alignment(buf, &kvs, &kv_index)?;

        // Tensor infos. The smallest is an empty name (8), n_dims (4), type (4), offset (8).
        c.check_count(n_tensors, 24, &|| "tensor count".into())?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let info = read_tensor_info(&mut c, i)?;
            if tensor_index
                .insert(info.name.clone(), tensors.len())
                .is_some()
            {
                return Err(GgufError::DuplicateTensor(info.name));
            }
            tensors.push(info);
        }

        // The data section starts at the next multiple of the alignment.
        let end_of_infos = c.pos() as u64;
        let data_start = end_of_infos.div_ceil(alignment) * alignment;
        let data_len = (buf.len() as u64).saturating_sub(data_start);
        check_tensor_placement(&tensors, alignment, data_len)?;

        Ok(Gguf {
            bytes,
            version,
            alignment,
            kvs,
            kv_index,
            tensors,
            tensor_index,
            data_start,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Absolute file offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }
    /// The container the file was parsed from (e.g. the memory map).
    pub fn backing(&self) -> &B {
        &self.bytes
    }
    pub fn file_len(&self) -> u64 {
        self.bytes.as_ref().len() as u64
    }

    /// Metadata keys in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.kvs.iter().map(|kv| kv.key.as_str())
    }
    pub fn n_kv(&self) -> usize {
        self.kvs.len()
    }

    /// Metadata entries in file order, decoded on the fly.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, Value<'_>)> {
        self.kvs
            .iter()
            .filter_map(move |kv| Some((kv.key.as_str(), self.decode(kv)?)))
    }

    fn decode(&self, kv: &KvEntry) -> Option<Value<'_>> {
        decode_at(self.bytes.as_ref(), kv)
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<Value<'_>> {
        self.kv_index
            .get(key)
            .and_then(|&i| self.decode(&self.kvs[i]))
    }

    pub fn get_str(&self, key: &str) -> Result<std::borrow::Cow<'_, str>> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(wrong(key, "string", &v)),
            None => Err(GgufError::MissingKey(key.to_string())),
        }
    }

    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self
            .get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
        v.as_u64().ok_or_else(|| wrong(key, "unsigned integer", &v))
    }

    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self
            .get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_string()))?;
        v.as_f64().ok_or_else(|| wrong(key, "number", &v))
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor's bytes, borrowed from the file (validated to lie inside it).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_start + info.offset) as usize;
        let end = start + info.size as usize;
        self.bytes.as_ref().get(start..end).unwrap_or(&[])
    }

    /// Looks a tensor up by name: its info and its bytes.
    pub fn tensor(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::MissingTensor(name.to_string()))?;
        Ok((info, self.tensor_data(info)))
    }

    /// Absolute byte range of a tensor in the file.
    pub fn tensor_range(&self, info: &TensorInfo) -> Range<u64> {
        let start = self.data_start + info.offset;
        start..start + info.size
    }
}

fn decode_at<'a>(buf: &'a [u8], kv: &KvEntry) -> Option<Value<'a>> {
    let mut c = Cursor::at(buf, kv.value_at);
    read_value(kv.ty, &mut c, 0, &kv.key).ok() // validated at parse time
}

/// `general.alignment`: a non-zero power-of-two u32, 32 when absent.
fn read_alignment(buf: &[u8], kvs: &[KvEntry], index: &HashMap<String, usize>) -> Result<u64> {
    match index
        .get("general.alignment")
        .and_then(|&i| decode_at(buf, &kvs[i]))
    {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(a)) if a != 0 && a.is_power_of_two() => Ok(a as u64),
        Some(v) => Err(GgufError::BadAlignment(format!(
            "{v} ({})",
            v.value_type().name()
        ))),
    }
}

fn wrong(key: &str, expected: &'static str, v: &Value<'_>) -> GgufError {
    GgufError::WrongValueType {
        key: key.to_string(),
        expected,
        found: v.value_type().name().to_string(),
    }
}

fn read_tensor_info(c: &mut Cursor<'_>, i: u64) -> Result<TensorInfo> {
    let name = String::from_utf8_lossy(c.string(&|| format!("name of tensor {i}"))?).into_owned();
    let what = || format!("info of tensor {name:?}");
    let n_dims = c.u32(&what)?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims { name, n_dims });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(c.u64(&what)?);
    }
    let type_id = c.u32(&what)?;
    let offset = c.u64(&what)?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
        name: name.clone(),
        type_id,
    })?;

    let bad = |why: String| GgufError::BadShape {
        name: name.clone(),
        dims: dims.clone(),
        why,
    };
    // ggml keeps element counts in int64: the product must fit.
    let mut n: u64 = 1;
    for &d in &dims {
        n = n
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad("element count overflows".into()))?;
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    let row = ggml_type.row_bytes(ne0).ok_or_else(|| {
        bad(format!(
            "first dimension {ne0} is not a multiple of the {ggml_type} block size {}",
            ggml_type.block_size()
        ))
    })?;
    // Not `product()`: with a zero first dimension the element count above is 0 whatever
    // the other dimensions are, so their product can still overflow (found by fuzzing).
    let rows = dims
        .iter()
        .skip(1)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let size = rows
        .and_then(|r| row.checked_mul(r))
        .ok_or_else(|| bad("byte size overflows".into()))?;
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        size,
    })
}

/// Every tensor aligned and inside the data section, stored in header order with each one
/// at the aligned end of the one before. The GGUF spec leaves room for gaps, but llama.cpp
/// (gguf.cpp) rejects any other placement, and so do we: it also rules out overlaps, and a
/// corrupted dimension that shrinks a tensor cannot go unnoticed.
fn check_tensor_placement(tensors: &[TensorInfo], alignment: u64, data_len: u64) -> Result<()> {
    let mut expected = 0u64;
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                name: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = t.offset.checked_add(t.size);
        match end {
            Some(end) if end <= data_len => {}
            _ => {
                return Err(GgufError::TensorOutOfFile {
                    name: t.name.clone(),
                    start: t.offset,
                    end: end.unwrap_or(u64::MAX),
                    data_len,
                })
            }
        }
        if t.offset != expected {
            return Err(GgufError::UnexpectedOffset {
                name: t.name.clone(),
                offset: t.offset,
                expected,
            });
        }
        // end <= data_len <= u64::MAX - alignment after the checks above, so this fits.
        expected = (t.offset + t.size).div_ceil(alignment) * alignment;
    }
    Ok(())
}
