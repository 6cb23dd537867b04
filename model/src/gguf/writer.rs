//! A GGUF v3 writer, sharing the reader's types: metadata of all 13 value types (arrays
//! of any type, nested), tensor infos, and tensor data padded to the alignment. Used by
//! `pocket synth` and by tests that need a GGUF file with particular contents.

use std::io::{self, Write};

use pocket_kernels::GgmlType;

use super::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use super::value::{Value, ValueType};

/// An owned metadata value, as written.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Element type and elements (each of that type).
    Array(ValueType, Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    pub fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::String(_) => ValueType::String,
            MetaValue::Array(..) => ValueType::Array,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
        }
    }

    /// An owned copy of a value read from a file (to copy metadata into a new file).
    pub fn from_value(v: &Value<'_>) -> MetaValue {
        match v {
            Value::U8(x) => MetaValue::U8(*x),
            Value::I8(x) => MetaValue::I8(*x),
            Value::U16(x) => MetaValue::U16(*x),
            Value::I16(x) => MetaValue::I16(*x),
            Value::U32(x) => MetaValue::U32(*x),
            Value::I32(x) => MetaValue::I32(*x),
            Value::F32(x) => MetaValue::F32(*x),
            Value::Bool(x) => MetaValue::Bool(*x),
            Value::String(x) => MetaValue::String(x.to_string()),
            Value::Array(a) => MetaValue::Array(
                a.elem_type(),
                a.iter().map(|e| Self::from_value(&e)).collect(),
            ),
            Value::U64(x) => MetaValue::U64(*x),
            Value::I64(x) => MetaValue::I64(*x),
            Value::F64(x) => MetaValue::F64(*x),
        }
    }

    pub fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> MetaValue {
        MetaValue::Array(
            ValueType::String,
            items
                .into_iter()
                .map(|s| MetaValue::String(s.into()))
                .collect(),
        )
    }
    pub fn i32s(items: impl IntoIterator<Item = i32>) -> MetaValue {
        MetaValue::Array(
            ValueType::I32,
            items.into_iter().map(MetaValue::I32).collect(),
        )
    }
    pub fn f32s(items: impl IntoIterator<Item = f32>) -> MetaValue {
        MetaValue::Array(
            ValueType::F32,
            items.into_iter().map(MetaValue::F32).collect(),
        )
    }

    fn write_payload(&self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            MetaValue::U8(v) => out.push(*v),
            MetaValue::I8(v) => out.push(*v as u8),
            MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::Bool(v) => out.push(*v as u8),
            MetaValue::String(s) => write_str(out, s.as_bytes()),
            MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::Array(elem, items) => {
                out.extend_from_slice(&(*elem as u32).to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for it in items {
                    if it.value_type() != *elem {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!(
                                "array of {} holds a {}",
                                elem.name(),
                                it.value_type().name()
                            ),
                        ));
                    }
                    it.write_payload(out)?;
                }
            }
        }
        Ok(())
    }
}

fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

struct PendingTensor {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    /// Bytes the tensor occupies (before padding).
    len: u64,
    /// The bytes, or `None` for a tensor declared with [`GgufWriter::declare_tensor`]
    /// whose data the caller streams after [`GgufWriter::header_bytes`].
    data: Option<Vec<u8>>,
}

/// Collects metadata and tensors, then writes the file in one go.
pub struct GgufWriter {
    kvs: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter {
            kvs: Vec::new(),
            tensors: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a metadata entry. `general.alignment` also sets the alignment.
    pub fn kv(&mut self, key: impl Into<String>, value: MetaValue) -> &mut Self {
        let key = key.into();
        if key == "general.alignment" {
            if let MetaValue::U32(a) = value {
                if a.is_power_of_two() {
                    self.alignment = a as u64;
                }
            }
        }
        match self.kvs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.kvs.push((key, value)),
        }
        self
    }

    /// Adds a tensor; `data` must hold exactly the bytes its type and dims need.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        data: Vec<u8>,
    ) -> io::Result<&mut Self> {
        let name = name.into();
        let want = Self::tensor_len(&name, ty, dims)?;
        if want != data.len() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tensor {name}: {ty} {dims:?} needs {want} bytes, got {}",
                    data.len()
                ),
            ));
        }
        self.tensors.push(PendingTensor {
            name,
            ty,
            dims: dims.to_vec(),
            len: want,
            data: Some(data),
        });
        Ok(self)
    }

    /// Declares a tensor whose bytes the caller writes itself, after [`Self::header_bytes`],
    /// in declaration order, each followed by [`Self::padding`] zero bytes (large files
    /// need not be held in memory). Returns the tensor's byte length.
    pub fn declare_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
    ) -> io::Result<u64> {
        let name = name.into();
        let len = Self::tensor_len(&name, ty, dims)?;
        self.tensors.push(PendingTensor {
            name,
            ty,
            dims: dims.to_vec(),
            len,
            data: None,
        });
        Ok(len)
    }

    fn tensor_len(name: &str, ty: GgmlType, dims: &[u64]) -> io::Result<u64> {
        let n0 = dims.first().copied().unwrap_or(1);
        let rows: u64 = dims.iter().skip(1).product();
        ty.row_bytes(n0)
            .and_then(|r| r.checked_mul(rows))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("tensor {name}: {ty} cannot hold a row of {n0} elements"),
                )
            })
    }

    /// The data alignment (32 unless `general.alignment` says otherwise).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Zero bytes that follow `len` bytes of tensor data to reach the alignment.
    pub fn padding(&self, len: u64) -> u64 {
        len.div_ceil(self.alignment) * self.alignment - len
    }

    /// Everything before the first tensor's data: header, metadata, tensor infos and the
    /// padding up to the data section.
    pub fn header_bytes(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            write_str(&mut out, k.as_bytes());
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            v.write_payload(&mut out)?;
        }
        let align = self.alignment;
        let pad = |n: u64| n.div_ceil(align) * align;
        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(&mut out, t.name.as_bytes());
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = pad(offset + t.len);
        }
        out.resize(pad(out.len() as u64) as usize, 0);
        Ok(out)
    }

    /// Serialises the whole file (every tensor must have been added with its data).
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        let mut out = self.header_bytes()?;
        let align = self.alignment;
        let pad = |n: u64| n.div_ceil(align) * align;
        for t in &self.tensors {
            let data = t.data.as_ref().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("tensor {} was declared without data", t.name),
                )
            })?;
            out.extend_from_slice(data);
            out.resize(pad(out.len() as u64) as usize, 0);
        }
        Ok(out)
    }

    pub fn write_to(&self, w: &mut dyn Write) -> io::Result<()> {
        w.write_all(&self.to_bytes()?)
    }
}
