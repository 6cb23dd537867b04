//! Hand-made hostile GGUF files: each must end in the right typed error, never a panic,
//! hang or huge allocation. Valid files are made with `GgufWriter`, then patched.

use pocket_kernels::GgmlType;
use pocket_model::gguf::{Gguf, GgufError, GgufWriter, MetaValue, Value, ValueType};

fn parse(bytes: Vec<u8>) -> Result<Gguf<Vec<u8>>, GgufError> {
    Gguf::parse(bytes)
}

fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b
}

fn push_str(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s);
}

fn one_tensor_file(ty: GgmlType, dims: &[u64]) -> Vec<u8> {
    let n0 = dims[0];
    let rows: u64 = dims[1..].iter().product();
    let bytes = ty.row_bytes(n0).unwrap() * rows;
    let mut w = GgufWriter::new();
    w.kv("general.architecture", MetaValue::String("llama".into()));
    w.tensor("t", ty, dims, vec![7u8; bytes as usize]).unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn writer_output_round_trips_every_value_type() {
    let mut w = GgufWriter::new();
    w.kv("u8", MetaValue::U8(200))
        .kv("i8", MetaValue::I8(-5))
        .kv("u16", MetaValue::U16(60000))
        .kv("i16", MetaValue::I16(-3000))
        .kv("u32", MetaValue::U32(4_000_000_000))
        .kv("i32", MetaValue::I32(-2_000_000_000))
        .kv("f32", MetaValue::F32(1.5))
        .kv("bool", MetaValue::Bool(true))
        .kv("str", MetaValue::String("héllo".into()))
        .kv("u64", MetaValue::U64(u64::MAX))
        .kv("i64", MetaValue::I64(i64::MIN))
        .kv("f64", MetaValue::F64(-0.25))
        .kv("strs", MetaValue::strings(["a", "", "ccc"]))
        .kv(
            "nested",
            MetaValue::Array(
                ValueType::Array,
                vec![
                    MetaValue::i32s([1, 2]),
                    MetaValue::i32s([]),
                    MetaValue::i32s([3]),
                ],
            ),
        );
    w.tensor("w", GgmlType::Q8_0, &[64, 3], vec![1u8; 34 * 2 * 3])
        .unwrap();
    w.tensor("n", GgmlType::F32, &[5], vec![0u8; 20]).unwrap();
    let g = parse(w.to_bytes().unwrap()).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.get("u8"), Some(Value::U8(200)));
    assert_eq!(g.get("i8"), Some(Value::I8(-5)));
    assert_eq!(g.get("u16"), Some(Value::U16(60000)));
    assert_eq!(g.get("i16"), Some(Value::I16(-3000)));
    assert_eq!(g.get_u64("u32").unwrap(), 4_000_000_000);
    assert_eq!(g.get("i32"), Some(Value::I32(-2_000_000_000)));
    assert_eq!(g.get_f64("f32").unwrap(), 1.5);
    assert_eq!(g.get("bool"), Some(Value::Bool(true)));
    assert_eq!(g.get_str("str").unwrap(), "héllo");
    assert_eq!(g.get_u64("u64").unwrap(), u64::MAX);
    assert_eq!(g.get("i64"), Some(Value::I64(i64::MIN)));
    assert_eq!(g.get("f64"), Some(Value::F64(-0.25)));
    let strs: Vec<String> = g
        .get("strs")
        .unwrap()
        .as_array()
        .unwrap()
        .strings()
        .unwrap()
        .map(|s| s.into_owned())
        .collect();
    assert_eq!(strs, ["a", "", "ccc"]);
    let nested = g.get("nested").unwrap();
    let inner: Vec<Vec<i64>> = nested
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_array().unwrap().to_i64_vec().unwrap())
        .collect();
    assert_eq!(inner, vec![vec![1, 2], vec![], vec![3]]);
    let (info, data) = g.tensor("w").unwrap();
    assert_eq!(
        (info.ggml_type, info.dims.as_slice(), data.len()),
        (GgmlType::Q8_0, &[64u64, 3][..], 204)
    );
    assert!(data.iter().all(|&b| b == 1));
    assert_eq!(g.tensor_data(g.tensor_info("n").unwrap()).len(), 20);
    assert_eq!(
        (g.data_start() + g.tensor_info("n").unwrap().offset) % 32,
        0
    );
    assert!(matches!(
        g.tensor("missing"),
        Err(GgufError::MissingTensor(_))
    ));
    assert!(matches!(
        g.get_str("u8"),
        Err(GgufError::WrongValueType { .. })
    ));
}

#[test]
fn bad_magic_and_versions() {
    assert!(matches!(
        parse(b"GGU".to_vec()),
        Err(GgufError::BadMagic { .. })
    ));
    assert!(matches!(
        parse(b"GGML\x03\0\0\0".to_vec()),
        Err(GgufError::BadMagic { .. })
    ));
    assert!(matches!(parse(vec![]), Err(GgufError::BadMagic { .. })));
    for v in [0u32, 1, 4, u32::MAX] {
        assert!(matches!(parse(header(v, 0, 0)), Err(GgufError::UnsupportedVersion(x)) if x == v));
    }
    // v2 has the same layout as v3.
    assert!(parse(header(2, 0, 0)).is_ok());
}

#[test]
fn absurd_counts_fail_before_allocating() {
    assert!(matches!(
        parse(header(3, 0, u64::MAX)),
        Err(GgufError::AbsurdCount { .. })
    ));
    assert!(matches!(
        parse(header(3, u64::MAX, 0)),
        Err(GgufError::AbsurdCount { .. })
    ));
    assert!(matches!(
        parse(header(3, 1 << 40, 0)),
        Err(GgufError::AbsurdCount { .. })
    ));
    // An array claiming 2^60 u32 elements.
    let mut b = header(3, 0, 1);
    push_str(&mut b, b"arr");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::AbsurdCount { .. })));
    // A string claiming u64::MAX bytes.
    let mut b = header(3, 0, 1);
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(&[0u8; 16]);
    assert!(matches!(parse(b), Err(GgufError::Truncated { .. })));
}

#[test]
fn deep_nesting_and_unknown_value_types() {
    let mut b = header(3, 0, 1);
    push_str(&mut b, b"deep");
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..200 {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    b.extend_from_slice(&[0u8; 64]);
    assert!(matches!(parse(b), Err(GgufError::NestingTooDeep { .. })));

    let mut b = header(3, 0, 1);
    push_str(&mut b, b"k");
    b.extend_from_slice(&13u32.to_le_bytes());
    let e = parse(b).err().unwrap();
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 13, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("\"k\""));
}

#[test]
fn invalid_utf8_is_read_lossily() {
    let mut b = header(3, 0, 1);
    push_str(&mut b, b"name\xff");
    b.extend_from_slice(&8u32.to_le_bytes());
    push_str(&mut b, b"ab\xc3\x28cd");
    let g = parse(b).unwrap();
    assert_eq!(g.keys().next(), Some("name\u{fffd}"));
    assert_eq!(g.get_str("name\u{fffd}").unwrap(), "ab\u{fffd}(cd");
}

#[test]
fn duplicate_keys_and_tensors() {
    let mut b = header(3, 0, 2);
    for _ in 0..2 {
        push_str(&mut b, b"dup");
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
    }
    assert!(matches!(parse(b), Err(GgufError::DuplicateKey(k)) if k == "dup"));

    let mut b = header(3, 2, 0);
    for i in 0..2u64 {
        push_str(&mut b, b"t");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(i * 32).to_le_bytes());
    }
    b.resize(256, 0);
    assert!(matches!(parse(b), Err(GgufError::DuplicateTensor(n)) if n == "t"));
}

#[test]
fn alignment_must_be_a_power_of_two_u32() {
    for bad in [
        MetaValue::U32(0),
        MetaValue::U32(48),
        MetaValue::U64(32),
        MetaValue::String("32".into()),
    ] {
        let mut b = header(3, 0, 1);
        push_str(&mut b, b"general.alignment");
        b.extend_from_slice(&(bad.value_type() as u32).to_le_bytes());
        match &bad {
            MetaValue::U32(v) => b.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U64(v) => b.extend_from_slice(&v.to_le_bytes()),
            MetaValue::String(s) => push_str(&mut b, s.as_bytes()),
            _ => unreachable!(),
        }
        assert!(
            matches!(parse(b), Err(GgufError::BadAlignment(_))),
            "{bad:?}"
        );
    }
    let mut w = GgufWriter::new();
    w.kv("general.alignment", MetaValue::U32(64));
    w.tensor("a", GgmlType::F32, &[3], vec![0; 12]).unwrap();
    w.tensor("b", GgmlType::F32, &[3], vec![0; 12]).unwrap();
    let g = parse(w.to_bytes().unwrap()).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.tensor_info("b").unwrap().offset, 64);
    assert_eq!(g.data_start() % 64, 0);
}

/// Byte position of the first tensor info field after the name "t" in `one_tensor_file`.
fn tensor_info_at(file: &[u8]) -> usize {
    let pat = [1u8, 0, 0, 0, 0, 0, 0, 0, b't'];
    file.windows(9).position(|w| w == pat).unwrap() + 9
}

#[test]
fn tensor_info_errors_name_the_tensor() {
    let base = one_tensor_file(GgmlType::Q4_0, &[64, 2]);
    let at = tensor_info_at(&base);

    let mut b = base.clone(); // n_dims = 5
    b[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
    assert!(matches!(
        parse(b),
        Err(GgufError::TooManyDims { n_dims: 5, .. })
    ));

    let mut b = base.clone(); // type id 4 was removed from ggml
    let ty_at = at + 4 + 16;
    b[ty_at..ty_at + 4].copy_from_slice(&4u32.to_le_bytes());
    let e = parse(b).err().unwrap();
    assert!(
        matches!(e, GgufError::UnknownTensorType { type_id: 4, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("\"t\"") && e.to_string().contains('4'),
        "{e}"
    );

    let mut b = base.clone(); // first dim 33 is not whole q4_0 blocks
    b[at + 4..at + 12].copy_from_slice(&33u64.to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::BadShape { .. })));

    let mut b = base.clone(); // element count overflows
    b[at + 12..at + 20].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::BadShape { .. })));

    // Zero first dimension, overflowing other dimensions (a fuzzer find: the element count
    // is 0, but the row count still overflows).
    let mut b = one_tensor_file(GgmlType::F32, &[1, 1, 1]);
    let at3 = tensor_info_at(&b);
    b[at3..at3 + 4].copy_from_slice(&3u32.to_le_bytes());
    b[at3 + 4..at3 + 12].copy_from_slice(&0u64.to_le_bytes());
    b[at3 + 12..at3 + 20].copy_from_slice(&(1u64 << 40).to_le_bytes());
    b[at3 + 20..at3 + 28].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::BadShape { .. })));

    let off_at = at + 4 + 16 + 4;
    let mut b = base.clone(); // misaligned
    b[off_at..off_at + 8].copy_from_slice(&1u64.to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::MisalignedTensor { .. })));

    let mut b = base.clone(); // beyond the end
    b[off_at..off_at + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::TensorOutOfFile { .. })));

    let mut b = base.clone(); // offset + size overflows
    b[off_at..off_at + 8].copy_from_slice(&(u64::MAX - 31).to_le_bytes());
    assert!(matches!(parse(b), Err(GgufError::TensorOutOfFile { .. })));

    let mut b = base; // truncated data: 72 bytes of q4_0 padded to 96; cut into the 72
    b.truncate(b.len() - 25);
    assert!(matches!(parse(b), Err(GgufError::TensorOutOfFile { .. })));
}

#[test]
fn overlapping_or_out_of_order_tensors_are_rejected() {
    let mut w = GgufWriter::new();
    w.tensor("a", GgmlType::F32, &[16], vec![0; 64]).unwrap();
    w.tensor("b", GgmlType::F32, &[16], vec![0; 64]).unwrap();
    let mut b = w.to_bytes().unwrap();
    // Point b's offset (64) at 32: it now overlaps a.
    let pat = [1u8, 0, 0, 0, 0, 0, 0, 0, b'b'];
    let at = b.windows(9).position(|x| x == pat).unwrap() + 9 + 4 + 8 + 4;
    assert_eq!(u64::from_le_bytes(b[at..at + 8].try_into().unwrap()), 64);
    b[at..at + 8].copy_from_slice(&32u64.to_le_bytes());
    assert!(matches!(
        parse(b.clone()),
        Err(GgufError::UnexpectedOffset { .. })
    ));
    // A gap (b moved from 64 to 96, still inside the file) is refused as llama.cpp does.
    b[at..at + 8].copy_from_slice(&96u64.to_le_bytes());
    b.extend_from_slice(&[0u8; 64]);
    assert!(matches!(
        parse(b),
        Err(GgufError::UnexpectedOffset {
            offset: 96,
            expected: 64,
            ..
        })
    ));
}
