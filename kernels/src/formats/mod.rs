//! The GGUF block formats, scalar: one file per format with its `#[repr(C)]` block, a
//! bit-exact `dequantize_row`, llama.cpp's reference `quantize_row` where pocket needs
//! one, and the plain scalar `vec_dot` that SIMD kernels are tested against.
//!
//! Activation formats (what the other operand of a dot product is quantized to, as in
//! ggml's `type_traits_cpu`): Q4_0/Q5_0/Q8_0/IQ4_NL pair with [`q8_0`], Q4_1/Q5_1 with
//! [`q8_1`], the K-quants and IQ4_XS with [`q8_k`].
//!
//! This module's [`dequantize`] and [`quantize`] are the safe byte-level entry points the
//! model uses: they check sizes and never panic on bad input.

use std::fmt;

use bytemuck::Pod;

use crate::GgmlType;

pub mod f16;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod kquant;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;

#[cfg(test)]
mod llama_cpp_bounds;
#[cfg(test)]
mod splitmix;
#[cfg(test)]
pub(crate) mod test_util;

/// Why a byte-level conversion was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// pocket has no scalar conversion for this type in this direction.
    Unsupported { ty: GgmlType, op: &'static str },
    /// The input is not a whole number of blocks.
    PartialBlock {
        ty: GgmlType,
        len: usize,
        unit: usize,
        what: &'static str,
    },
    /// The output slice does not hold exactly the decoded elements.
    OutputLength {
        ty: GgmlType,
        expected: usize,
        got: usize,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Unsupported { ty, op } => write!(f, "{op} is not supported for {ty}"),
            FormatError::PartialBlock {
                ty,
                len,
                unit,
                what,
            } => write!(
                f,
                "{len} {what} is not a whole number of {ty} blocks ({unit} {what} each)"
            ),
            FormatError::OutputLength { ty, expected, got } => write!(
                f,
                "{ty} output holds {got} elements, the input decodes to {expected}"
            ),
        }
    }
}

impl std::error::Error for FormatError {}

/// Decodes `bytes` of type `ty` into `out`, which must hold exactly the decoded elements.
/// Bit-exact with llama.cpp's `to_float`. `bytes` may have any alignment.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    use GgmlType as T;
    let (unit, per) = (ty.type_size(), ty.block_size());
    // The supported types are the arms; the row functions run after the size checks.
    let decode: fn(&[u8], &mut [f32]) = match ty {
        T::F32 => |bytes, out| with_blocks(bytes, |x: &[f32]| out.copy_from_slice(x)),
        T::F16 => |bytes, out| with_blocks(bytes, |x| f16::f16_to_f32_row(x, out)),
        T::BF16 => |bytes, out| with_blocks(bytes, |x| f16::bf16_to_f32_row(x, out)),
        T::Q4_0 => |bytes, out| with_blocks(bytes, |b| q4_0::dequantize_row(b, out)),
        T::Q4_1 => |bytes, out| with_blocks(bytes, |b| q4_1::dequantize_row(b, out)),
        T::Q5_0 => |bytes, out| with_blocks(bytes, |b| q5_0::dequantize_row(b, out)),
        T::Q5_1 => |bytes, out| with_blocks(bytes, |b| q5_1::dequantize_row(b, out)),
        T::Q8_0 => |bytes, out| with_blocks(bytes, |b| q8_0::dequantize_row(b, out)),
        T::Q8_1 => |bytes, out| with_blocks(bytes, |b| q8_1::dequantize_row(b, out)),
        T::Q2_K => |bytes, out| with_blocks(bytes, |b| q2_k::dequantize_row(b, out)),
        T::Q3_K => |bytes, out| with_blocks(bytes, |b| q3_k::dequantize_row(b, out)),
        T::Q4_K => |bytes, out| with_blocks(bytes, |b| q4_k::dequantize_row(b, out)),
        T::Q5_K => |bytes, out| with_blocks(bytes, |b| q5_k::dequantize_row(b, out)),
        T::Q6_K => |bytes, out| with_blocks(bytes, |b| q6_k::dequantize_row(b, out)),
        T::Q8_K => |bytes, out| with_blocks(bytes, |b| q8_k::dequantize_row(b, out)),
        T::IQ4_NL => |bytes, out| with_blocks(bytes, |b| iq4_nl::dequantize_row(b, out)),
        T::IQ4_XS => |bytes, out| with_blocks(bytes, |b| iq4_xs::dequantize_row(b, out)),
        _ => {
            return Err(FormatError::Unsupported {
                ty,
                op: "dequantize",
            })
        }
    };
    if !bytes.len().is_multiple_of(unit) {
        return Err(FormatError::PartialBlock {
            ty,
            len: bytes.len(),
            unit,
            what: "bytes",
        });
    }
    let expected = bytes.len() / unit * per;
    if out.len() != expected {
        return Err(FormatError::OutputLength {
            ty,
            expected,
            got: out.len(),
        });
    }
    decode(bytes, out);
    Ok(())
}

/// Encodes `x` as type `ty` and appends the bytes to `out`. Uses llama.cpp's reference
/// quantizers (`quantize_row_*_ref`), so files written this way match llama.cpp's.
pub fn quantize(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) -> Result<(), FormatError> {
    use GgmlType as T;
    let per = ty.block_size();
    // The supported types are the arms; the quantizers run after the size check.
    macro_rules! blocks {
        ($($ty:ident => $quantize_row:path,)*) => {
            match ty {
                T::F32 => |x, _, out| out.extend_from_slice(bytemuck::cast_slice(x)),
                $(T::$ty => |x, per, out| append_blocks(x, per, out, $quantize_row),)*
                _ => return Err(FormatError::Unsupported { ty, op: "quantize" }),
            }
        };
    }
    let encode: fn(&[f32], usize, &mut Vec<u8>) = blocks! {
        F16 => f16::f32_to_f16_row,
        BF16 => f16::f32_to_bf16_row,
        Q4_0 => q4_0::quantize_row,
        Q4_1 => q4_1::quantize_row,
        Q5_0 => q5_0::quantize_row,
        Q5_1 => q5_1::quantize_row,
        Q8_0 => q8_0::quantize_row,
        Q8_1 => q8_1::quantize_row,
        Q4_K => q4_k::quantize_row,
        Q5_K => q5_k::quantize_row,
        Q6_K => q6_k::quantize_row,
        Q8_K => q8_k::quantize_row,
    };
    if !x.len().is_multiple_of(per) {
        return Err(FormatError::PartialBlock {
            ty,
            len: x.len(),
            unit: per,
            what: "elements",
        });
    }
    encode(x, per, out);
    Ok(())
}

/// The outer loop of every `dequantize_row`: `decode(block, y)` writes each block's `qk`
/// values `y`, in order (`out.len() == qk * blocks.len()`).
pub(crate) fn decode_blocks<B>(
    blocks: &[B],
    out: &mut [f32],
    qk: usize,
    mut decode: impl FnMut(&B, &mut [f32]),
) {
    assert_eq!(out.len(), blocks.len() * qk);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(qk)) {
        decode(b, y);
    }
}

/// The 32 values of a block of 16 nibble-pair bytes (Q4_0, Q4_1, IQ4_NL): element `j` is
/// `level` of the low nibble of `qs[j]`, element `j + 16` of its high nibble.
pub(crate) fn decode_nibbles(qs: &[u8; 16], y: &mut [f32], level: impl Fn(u8) -> f32) {
    for (j, &q) in qs.iter().enumerate() {
        y[j] = level(q & 0x0F);
        y[j + 16] = level(q >> 4);
    }
}

/// `Σ level(nibble)·a` over a block of 16 nibble-pair bytes (laid out as for
/// [`decode_nibbles`]) and its 32 activation codes: the exact int32 sum of the scalar
/// reference dots of Q4_0, Q4_1 and IQ4_NL.
pub(crate) fn dot_nibbles(qs: &[u8; 16], a: &[i8; 32], level: impl Fn(u8) -> i32) -> i32 {
    let mut sumi = 0i32;
    for (j, &q) in qs.iter().enumerate() {
        sumi += level(q & 0x0F) * a[j] as i32 + level(q >> 4) * a[j + 16] as i32;
    }
    sumi
}

/// `Σ w·a` of a block's weights `w` (as i32) and its activation codes, exact in int32.
pub(crate) fn dot_codes(w: impl IntoIterator<Item = i32>, a: &[i8]) -> i32 {
    w.into_iter().zip(a).map(|(w, &a)| w * a as i32).sum()
}

/// The outer loop of every scalar reference `vec_dot`: `block_dot` of each weight block
/// with its activation block, summed in f32 in block order, as ggml's `_generic` kernels.
pub(crate) fn sum_block_dots<W, A>(w: &[W], a: &[A], block_dot: impl Fn(&W, &A) -> f32) -> f32 {
    assert_eq!(w.len(), a.len());
    let mut sumf = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        sumf += block_dot(x, y);
    }
    sumf
}

/// Runs `f` on `bytes` viewed as blocks: in place when aligned (the usual case for a
/// mapped GGUF, whose tensor data is 32-byte aligned), from a copy otherwise.
/// The caller has checked that `bytes` is a whole number of blocks.
fn with_blocks<B: Pod>(bytes: &[u8], f: impl FnOnce(&[B])) {
    match bytemuck::try_cast_slice::<u8, B>(bytes) {
        Ok(blocks) => f(blocks),
        Err(_) => {
            let copied: Vec<B> = bytes
                .chunks_exact(std::mem::size_of::<B>())
                .map(bytemuck::pod_read_unaligned)
                .collect();
            f(&copied)
        }
    }
}

/// Quantizes `x` into fresh blocks of `per` elements with `quantize_row` and appends
/// their bytes. The caller has checked that `x` is a whole number of blocks.
fn append_blocks<B: Pod>(
    x: &[f32],
    per: usize,
    out: &mut Vec<u8>,
    quantize_row: fn(&[f32], &mut [B]),
) {
    let mut blocks = vec![B::zeroed(); x.len() / per];
    quantize_row(x, &mut blocks);
    out.extend_from_slice(bytemuck::cast_slice(&blocks));
}

#[cfg(test)]
mod tests {
    use super::test_util::Rng;
    use super::*;

    const QUANTIZABLE: [GgmlType; 13] = {
        use GgmlType::*;
        [
            F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q4_K, Q5_K, Q6_K, Q8_K,
        ]
    };

    #[test]
    fn every_quantizable_type_round_trips_through_bytes() {
        let x = Rng::new(30).vec(512, 1.0);
        for ty in QUANTIZABLE {
            let mut bytes = vec![0xAB]; // quantize appends: this byte must survive
            quantize(ty, &x, &mut bytes).unwrap();
            assert_eq!(bytes[0], 0xAB);
            assert_eq!(bytes.len() - 1, ty.row_bytes(512).unwrap() as usize, "{ty}");
            let mut y = vec![0.0; 512];
            // bytes[1..] is misaligned for every block type: exercises the copying path
            dequantize(ty, &bytes[1..], &mut y).unwrap();
            let err = x
                .iter()
                .zip(&y)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(err < 0.15, "{ty}: max error {err}");
        }
    }

    #[test]
    fn aligned_and_misaligned_inputs_decode_the_same() {
        let x = Rng::new(31).vec(256, 3.0);
        let mut bytes = Vec::new();
        quantize(GgmlType::Q4_K, &x, &mut bytes).unwrap();
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(&bytes);
        let (mut a, mut b) = (vec![0.0; 256], vec![0.0; 256]);
        dequantize(GgmlType::Q4_K, &bytes, &mut a).unwrap();
        dequantize(GgmlType::Q4_K, &shifted[1..], &mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let mut out = vec![0.0; 64];
        assert_eq!(
            dequantize(GgmlType::Q4_0, &[0; 35], &mut out),
            Err(FormatError::PartialBlock {
                ty: GgmlType::Q4_0,
                len: 35,
                unit: 18,
                what: "bytes"
            })
        );
        assert_eq!(
            dequantize(GgmlType::Q4_0, &[0; 18], &mut out),
            Err(FormatError::OutputLength {
                ty: GgmlType::Q4_0,
                expected: 32,
                got: 64
            })
        );
        assert!(matches!(
            dequantize(GgmlType::IQ2_XXS, &[0; 66], &mut out),
            Err(FormatError::Unsupported { .. })
        ));
        let mut bytes = Vec::new();
        assert!(matches!(
            quantize(GgmlType::Q4_K, &[0.0; 255], &mut bytes),
            Err(FormatError::PartialBlock { .. })
        ));
        assert!(matches!(
            quantize(GgmlType::IQ4_NL, &[0.0; 32], &mut bytes),
            Err(FormatError::Unsupported { .. })
        ));
        assert!(bytes.is_empty());
        let msg = dequantize(GgmlType::Q6_K, &[0; 211], &mut out)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "211 bytes is not a whole number of q6_K blocks (210 bytes each)"
        );
    }

    #[test]
    fn empty_input_is_fine() {
        dequantize(GgmlType::Q8_0, &[], &mut []).unwrap();
        let mut bytes = Vec::new();
        quantize(GgmlType::Q8_K, &[], &mut bytes).unwrap();
        assert!(bytes.is_empty());
    }

    #[test]
    fn non_finite_inputs_do_not_panic() {
        let mut x = vec![1.0f32; 256];
        x[3] = f32::NAN;
        x[100] = f32::INFINITY;
        x[200] = -f32::INFINITY;
        for ty in QUANTIZABLE {
            let mut bytes = Vec::new();
            quantize(ty, &x, &mut bytes).unwrap();
            let mut y = vec![0.0; 256];
            dequantize(ty, &bytes, &mut y).unwrap();
        }
    }

    proptest::proptest! {
        #[test]
        fn byte_level_entry_points_never_panic(
            ty_index in 0usize..crate::ggml_type::ALL_TYPES.len(),
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700),
            out_slack in 0usize..2,
        ) {
            let ty = crate::ggml_type::ALL_TYPES[ty_index];
            let n = bytes.len() / ty.type_size() * ty.block_size() + out_slack;
            let mut out = vec![0.0; n];
            let result = dequantize(ty, &bytes, &mut out);
            if out_slack == 1 || bytes.len() % ty.type_size() != 0 {
                proptest::prop_assert!(result.is_err());
            }
            let x: Vec<f32> = bytes.iter().map(|&b| b as f32 - 128.0).collect();
            let _ = quantize(ty, &x, &mut Vec::new());
        }
    }
}
