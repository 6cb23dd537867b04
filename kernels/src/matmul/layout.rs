//! What a [`PackedMatrix`](super::PackedMatrix) is: its [`Layout`] (one per block format),
//! its [`Kind`] (plain, stacked Q/K/V, SwiGLU gate/up pair), the packing options and why
//! packing can fail. The byte layout itself is documented in `packed.rs`.

use super::packed::packed_k;
use crate::GgmlType;
use std::fmt;

/// How a [`PackedMatrix`] is stored.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Q4_0,
    Q4_1,
    /// Q4_1 whose 64-groups share `(d, m)`: one scale pair per 64 elements.
    Q4_1x64,
    Q8_0,
    /// Q4_K: nibbles as Q4_0 per 32-element sub-block; 6-bit scales/mins decoded at pack
    /// time (see `packed_k.rs`).
    Q4_K,
    /// Q5_K: the Q5_0 record (nibbles + 5th-bit plane) per 32-element sub-block with the
    /// Q4_K scale group (see `packed_k.rs`).
    Q5_K,
    /// Q6_K: low nibbles as Q4_0 plus two 2-bit planes per 32-block; int8 sub-block scales.
    Q6_K,
    /// Q5_0: nibbles as Q4_0 plus one 32-byte plane of 5th bits per 32-block.
    Q5_0,
    /// F16 weights (f32 activations): per (panel, 32-column block) 32 columns of 8 fp16,
    /// one 16-byte column after the other. No scale stream.
    F16,
}

// `Layout::ALL` is in discriminant order (the matmul driver's const generic indexes it).
const _: () = {
    let mut i = 0;
    while i < Layout::ALL.len() {
        assert!(Layout::ALL[i] as usize == i);
        i += 1;
    }
};

impl Layout {
    /// Every layout, indexed by its discriminant (`Layout::ALL[l as usize] == l`).
    pub const ALL: [Layout; 9] = [
        Layout::Q4_0,
        Layout::Q4_1,
        Layout::Q4_1x64,
        Layout::Q8_0,
        Layout::Q4_K,
        Layout::Q5_K,
        Layout::Q6_K,
        Layout::Q5_0,
        Layout::F16,
    ];

    /// Bytes of quant codes per (panel, 32-block).
    pub const fn quant_bytes_per_block(self) -> usize {
        match self {
            Layout::Q4_0 | Layout::Q4_1 | Layout::Q4_1x64 => 128,
            Layout::Q8_0 => 256,
            Layout::Q4_K => 128,
            Layout::Q6_K => 192,
            Layout::Q5_0 | Layout::Q5_K => 160,
            Layout::F16 => 512,
        }
    }
    /// fp16 values (u16 units of the scale stream) per (panel, scale group).
    pub const fn scales_per_group(self) -> usize {
        match self {
            Layout::Q4_0 | Layout::Q8_0 | Layout::Q5_0 => 8,
            Layout::Q4_1 | Layout::Q4_1x64 => 16,
            Layout::Q4_K | Layout::Q5_K => packed_k::Q4K_SCALE_U16,
            Layout::Q6_K => packed_k::Q6K_SCALE_U16,
            Layout::F16 => 0,
        }
    }
    /// Whether this is one of the layouts of `packed_k.rs` (nibble records + bit planes,
    /// scales decoded at pack time).
    pub const fn is_k(self) -> bool {
        matches!(
            self,
            Layout::Q4_K | Layout::Q5_K | Layout::Q6_K | Layout::Q5_0
        )
    }
    /// 32-blocks sharing one scale group.
    pub const fn blocks_per_group(self) -> usize {
        match self {
            Layout::Q4_1x64 => 2,
            Layout::Q4_K | Layout::Q5_K | Layout::Q6_K => 8,
            _ => 1,
        }
    }
}

/// What the rows of a packed matrix are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One tensor, or several stacked along the output dimension (`parts` = their row
    /// counts, in order; a single tensor has one part).
    Plain { parts: Vec<usize> },
    /// A gate/up pair for `gemv_swiglu`: internal panel `2q` holds gate rows `8q..8q+8`,
    /// panel `2q+1` the same up rows. `rows` is the number of gate (= up = output) rows.
    SwiGlu,
}

/// Options for [`PackedMatrix::pack_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackOptions {
    /// Use [`Layout::Q4_1x64`] when every 64-group of a Q4_1 tensor shares `(d, m)`
    /// (bit-exact, so lossless). Default: true.
    pub merge_q4_1: bool,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions { merge_q4_1: true }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackError {
    UnsupportedType(GgmlType),
    /// `cols` is zero or not a multiple of the block size (32, or 256 for K-quants).
    BadCols(usize),
    /// The byte slice does not hold `rows x cols` elements of the type.
    BadLength {
        expected: usize,
        got: usize,
    },
    /// The tensors to fuse differ in type or column count, or the gate/up shapes differ.
    Mismatch(String),
    /// Zero rows, or the size overflows `usize`.
    BadRows(usize),
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::UnsupportedType(t) => write!(f, "no packed layout for {t:?}"),
            PackError::BadCols(c) => {
                write!(
                    f,
                    "{c} columns is not a positive multiple of the block size"
                )
            }
            PackError::BadLength { expected, got } => {
                write!(f, "expected {expected} bytes of weights, got {got}")
            }
            PackError::Mismatch(s) => write!(f, "tensors cannot be fused: {s}"),
            PackError::BadRows(r) => write!(f, "bad row count {r}"),
        }
    }
}

impl std::error::Error for PackError {}
