//! GGUF metadata values, decoded on demand from the mapped bytes.
//!
//! The header parse only validates and records where each value lies; a [`Value`] is built
//! when someone asks for it. Arrays stay [`ArrayView`]s over the file: a 150K-entry
//! vocabulary costs nothing until it is iterated.

use std::borrow::Cow;
use std::fmt;

use super::cursor::Cursor;
use super::error::{GgufError, Result};

/// Deepest array nesting accepted. llama.cpp writes no nested arrays at all; the cap keeps
/// a hostile file from recursing the reader off its stack.
pub const MAX_ARRAY_DEPTH: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Size of a fixed-size value; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes one value of this type can take (used to bound counts).
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            t => t.fixed_size().unwrap_or(1),
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value, borrowing strings and arrays from the file.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Invalid UTF-8 is replaced with U+FFFD, as llama.cpp does.
    String(Cow<'a, str>),
    Array(ArrayView<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer type that fits in u64 (GGUF writers disagree on u32 vs i32 vs u64).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&ArrayView<'a>> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Value<'_> {
    /// Scalars as they are; strings quoted; arrays summarised past 8 entries.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Array(a) => {
                write!(f, "[{}; {}] [", a.elem_type().name(), a.len())?;
                for (i, v) in a.iter().take(8).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match &v {
                        // Nested arrays are only named: printing 8 of 8 of 8... would be
                        // exponential in the nesting depth.
                        Value::Array(inner) => write!(f, "[{}; {}]", inner.elem_type().name(), inner.len())?,
                        _ => write!(f, "{v}")?,
                    }
                }
                if a.len() > 8 {
                    write!(f, ", ... {} more", a.len() - 8)?;
                }
                f.write_str("]")
            }
        }
    }
}

/// A typed array in the file. Elements are decoded as they are iterated.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayView<'a> {
    elem: ValueType,
    len: u64,
    /// The element bytes, validated at parse time to hold exactly `len` elements.
    bytes: &'a [u8],
}

impl<'a> ArrayView<'a> {
    pub fn elem_type(&self) -> ValueType {
        self.elem
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            elem: self.elem,
            left: self.len,
            cur: Cursor::new(self.bytes),
        }
    }

    /// Element `i` of a fixed-size array in O(1); strings and arrays are walked.
    pub fn get(&self, i: u64) -> Option<Value<'a>> {
        if i >= self.len {
            return None;
        }
        match self.elem.fixed_size() {
            Some(sz) => {
                let start = (i * sz) as usize; // i < len and len * sz <= bytes.len()
                let mut c = Cursor::at(self.bytes, start);
                read_value(self.elem, &mut c, 0, "").ok()
            }
            None => self.iter().nth(i as usize),
        }
    }

    /// The strings of a string array, lossily decoded (None if it is not one).
    pub fn strings(&self) -> Option<impl Iterator<Item = Cow<'a, str>> + 'a> {
        (self.elem == ValueType::String).then(|| {
            self.iter().map(|v| match v {
                Value::String(s) => s,
                _ => Cow::Borrowed(""),
            })
        })
    }

    /// Numeric arrays as f32 (None for strings, arrays or bools).
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        self.iter().map(|v| v.as_f64().map(|x| x as f32)).collect()
    }

    /// Integer arrays as i64 (None if any element is not an integer that fits).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        self.iter().map(|v| v.as_i64()).collect()
    }
}

pub struct ArrayIter<'a> {
    elem: ValueType,
    left: u64,
    cur: Cursor<'a>,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The bytes were validated at parse time; an error here cannot happen, and ends
        // the iteration rather than panicking if it ever did.
        match read_value(self.elem, &mut self.cur, 0, "") {
            Ok(v) => Some(v),
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// Reads one value of type `ty` at the cursor, validating every length against the bytes
/// that remain. Arrays are not decoded: their extent is checked and a view returned.
pub(crate) fn read_value<'a>(
    ty: ValueType,
    c: &mut Cursor<'a>,
    depth: usize,
    key: &str,
) -> Result<Value<'a>> {
    let what = || format!("value of metadata key {key:?}");
    Ok(match ty {
        ValueType::U8 => Value::U8(c.u8(&what)?),
        ValueType::I8 => Value::I8(c.u8(&what)? as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(&what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(&what)?)),
        ValueType::U32 => Value::U32(c.u32(&what)?),
        ValueType::I32 => Value::I32(c.u32(&what)? as i32),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(&what)?)),
        // llama.cpp reads a bool as one byte and treats any non-zero byte as true.
        ValueType::Bool => Value::Bool(c.u8(&what)? != 0),
        ValueType::String => Value::String(String::from_utf8_lossy(c.string(&what)?)),
        ValueType::U64 => Value::U64(c.u64(&what)?),
        ValueType::I64 => Value::I64(c.u64(&what)? as i64),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(&what)?)),
        ValueType::Array => Value::Array(read_array(c, depth, key)?),
    })
}

fn read_array<'a>(c: &mut Cursor<'a>, depth: usize, key: &str) -> Result<ArrayView<'a>> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            key: key.to_string(),
            max: MAX_ARRAY_DEPTH,
        });
    }
    let what = || format!("array header of metadata key {key:?}");
    let type_id = c.u32(&what)?;
    let elem = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        type_id,
    })?;
    let len = c.u64(&what)?;
    let elems_what = || format!("elements of array {key:?}");
    c.check_count(len, elem.min_size(), &elems_what)?;
    let start = c.pos();
    match elem.fixed_size() {
        Some(sz) => {
            c.take(len * sz, &elems_what)?; // len * sz <= remaining (checked above)
        }
        None => {
            // Walk strings / nested arrays once, checking each length. No allocation.
            for _ in 0..len {
                match elem {
                    ValueType::String => {
                        c.string(&elems_what)?;
                    }
                    _ => {
                        read_array(c, depth + 1, key)?;
                    }
                }
            }
        }
    }
    let bytes = c.slice_from(start);
    Ok(ArrayView { elem, len, bytes })
}
