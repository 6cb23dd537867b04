//! A real GGUF (SmolLM2-135M), cut short and corrupted: every case ends in a typed error
//! (or, for cuts past the last tensor, in the same valid file), never in a panic.
//!
//! Cuts: every byte of the fixed header and first 4 KiB, every byte of the tensor-info
//! region, every byte within 16 of each metadata entry's start and of the first and last
//! elements of each array, 3000 seeded-random cuts over the metadata and 300 over the
//! tensor data. (Every byte of the 1.8 MB metadata would take an hour: the vocabulary
//! walk makes each parse O(length).)
//! Flips: each byte of the tensor and metadata counts, of every key length, value type,
//! string length and array header, and of every tensor info's n_dims, dims, type and
//! offset, XORed with 0xFF.

mod common;

use std::collections::BTreeSet;

use pocket_model::gguf::Gguf;

/// Positions of the header's fields, found by walking the file independently of the reader.
#[derive(Default)]
struct Layout {
    /// Start of each metadata entry.
    kv_starts: Vec<usize>,
    /// (position, length) of count-like fields: key lengths, value types, string lengths,
    /// array element types and counts.
    kv_fields: Vec<(usize, usize)>,
    /// Element boundaries near the start and end of each array.
    array_edges: Vec<usize>,
    tensor_info_start: usize,
    tensor_info_end: usize,
    /// (position, length) of n_dims, each dim, type and offset of every tensor.
    tensor_fields: Vec<(usize, usize)>,
}

fn u32_at(b: &[u8], p: usize) -> u32 {
    u32::from_le_bytes(b[p..p + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], p: usize) -> u64 {
    u64::from_le_bytes(b[p..p + 8].try_into().unwrap())
}

fn walk(b: &[u8]) -> Layout {
    let mut l = Layout::default();
    let n_tensors = u64_at(b, 8) as usize;
    let n_kv = u64_at(b, 16) as usize;
    let mut p = 24;
    for _ in 0..n_kv {
        l.kv_starts.push(p);
        l.kv_fields.push((p, 8));
        p += 8 + u64_at(b, p) as usize;
        l.kv_fields.push((p, 4));
        let ty = u32_at(b, p);
        p += 4;
        p = walk_value(b, p, ty, &mut l);
    }
    l.tensor_info_start = p;
    for _ in 0..n_tensors {
        p += 8 + u64_at(b, p) as usize;
        let n_dims = u32_at(b, p) as usize;
        l.tensor_fields.push((p, 4));
        p += 4;
        for _ in 0..n_dims {
            l.tensor_fields.push((p, 8));
            p += 8;
        }
        l.tensor_fields.push((p, 4));
        l.tensor_fields.push((p + 4, 8));
        p += 12;
    }
    l.tensor_info_end = p;
    l
}

fn fixed_size(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => panic!("type {ty} has no fixed size"),
    }
}

/// `record`: whether this value's length fields are flip targets (array elements only near
/// the array's ends, so a 49K-entry vocabulary adds 8 strings, not 49K).
fn walk_value(b: &[u8], p: usize, ty: u32, l: &mut Layout) -> usize {
    walk_value_rec(b, p, ty, l, true)
}

fn walk_value_rec(b: &[u8], mut p: usize, ty: u32, l: &mut Layout, record: bool) -> usize {
    match ty {
        8 => {
            if record {
                l.kv_fields.push((p, 8));
            }
            p + 8 + u64_at(b, p) as usize
        }
        9 => {
            let ety = u32_at(b, p);
            let n = u64_at(b, p + 4) as usize;
            l.kv_fields.push((p, 4));
            l.kv_fields.push((p + 4, 8));
            p += 12;
            for i in 0..n {
                let edge = i < 4 || i + 4 >= n;
                if edge {
                    l.array_edges.push(p);
                }
                p = if ety == 8 || ety == 9 {
                    walk_value_rec(b, p, ety, l, edge)
                } else {
                    p + fixed_size(ety)
                };
            }
            p
        }
        t => p + fixed_size(t),
    }
}

/// xorshift64*: a fixed sequence of cut points, the same on every run.
fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed >> 12;
    *seed ^= *seed << 25;
    *seed ^= *seed >> 27;
    seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn truncated_real_file_always_errors() {
    let bytes = std::fs::read(common::smollm2()).unwrap();
    let full = Gguf::parse(&bytes[..]).expect("the fixture parses");
    let data_end = full
        .tensors()
        .iter()
        .map(|t| full.data_start() + t.offset + t.size)
        .max()
        .unwrap() as usize;
    let l = walk(&bytes);
    assert_eq!(
        l.tensor_info_end as u64,
        full.data_start() - (full.data_start() - l.tensor_info_end as u64)
    );

    let mut cuts = BTreeSet::new();
    cuts.extend(0..4096);
    cuts.extend(l.tensor_info_start.saturating_sub(16)..full.data_start() as usize + 16);
    for &p in l.kv_starts.iter().chain(&l.array_edges) {
        cuts.extend(p.saturating_sub(16)..p + 16);
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..3000 {
        cuts.insert((rng(&mut seed) % l.tensor_info_start as u64) as usize);
    }
    for _ in 0..300 {
        cuts.insert(
            full.data_start() as usize
                + (rng(&mut seed) % (bytes.len() as u64 - full.data_start())) as usize,
        );
    }
    cuts.insert(data_end - 1);
    cuts.insert(data_end);

    let mut n_err = 0;
    for &cut in &cuts {
        let r = Gguf::parse(&bytes[..cut.min(bytes.len())]);
        if cut < data_end {
            assert!(r.is_err(), "cut at {cut} parsed");
            n_err += 1;
        } else {
            let g =
                r.unwrap_or_else(|e| panic!("cut at {cut} past the data ({data_end}) fails: {e}"));
            assert_eq!(g.tensors().len(), full.tensors().len());
        }
    }
    eprintln!(
        "{} cuts, {n_err} errors, file {} bytes, header+infos {} bytes",
        cuts.len(),
        bytes.len(),
        full.data_start()
    );
    assert!(cuts.len() > 20_000);
}

#[test]
fn corrupted_counts_and_offsets_always_error() {
    let bytes = std::fs::read(common::smollm2()).unwrap();
    let l = walk(&bytes);
    let mut fields: Vec<(usize, usize)> = vec![(8, 8), (16, 8)];
    fields.extend(&l.kv_fields);
    fields.extend(&l.tensor_fields);
    let mut buf = bytes.clone();
    let mut n = 0;
    for &(pos, len) in &fields {
        for i in pos..pos + len {
            buf[i] ^= 0xff;
            let r = Gguf::parse(&buf[..]);
            assert!(
                r.is_err(),
                "flipping byte {i} (field at {pos}, {len} bytes) still parses"
            );
            buf[i] ^= 0xff;
            n += 1;
        }
    }
    eprintln!("{n} flips over {} fields, all errors", fields.len());
    assert!(n > 3000);
}
