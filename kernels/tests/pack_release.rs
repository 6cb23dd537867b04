//! `PackedMatrix::pack_releasing`: the spans it hands back cover the source exactly once,
//! in order, each after its panels were written, and the packed result is `pack`'s.

use pocket_kernels::formats::q8_0;
use pocket_kernels::matmul::{PackOptions, PackedMatrix, PANEL, RELEASE_SPAN};
use pocket_kernels::GgmlType;
use std::cell::RefCell;

#[test]
fn release_spans_tile_the_source_and_do_not_change_the_packing() {
    // 3000 rows x 512 cols of Q8_0 (34 bytes per 32): ~1.6 MB, so more than one span, and a
    // row count that is not a multiple of the panel height.
    let (rows, cols) = (3000usize, 512usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let mut blocks = vec![<q8_0::BlockQ8_0 as bytemuck::Zeroable>::zeroed(); rows * cols / 32];
    q8_0::quantize_row(&x, &mut blocks);
    let bytes: &[u8] = bytemuck::cast_slice(&blocks);
    let base = bytes.as_ptr() as usize;

    let spans = RefCell::new(Vec::new());
    let packed = PackedMatrix::pack_releasing(
        GgmlType::Q8_0,
        bytes,
        rows,
        cols,
        PackOptions::default(),
        &|s| {
            spans
                .borrow_mut()
                .push((s.as_ptr() as usize - base, s.len()))
        },
    )
    .unwrap();
    let spans = spans.into_inner();
    assert!(spans.len() >= 2, "{spans:?}");
    let mut next = 0;
    let row_bytes = cols / 32 * 34;
    for &(off, len) in &spans {
        assert_eq!(off, next, "spans must be contiguous and in order");
        assert!(len >= RELEASE_SPAN || off + len == bytes.len());
        assert_eq!(len % row_bytes, 0, "a span ends on a row boundary");
        assert!((off + len) / row_bytes % PANEL == 0 || off + len == bytes.len());
        next = off + len;
    }
    assert_eq!(next, bytes.len());

    let plain = PackedMatrix::pack(GgmlType::Q8_0, bytes, rows, cols).unwrap();
    for r in [0, 7, 8, 1234, rows - 1] {
        assert_eq!(packed.dequant_row(r), plain.dequant_row(r), "row {r}");
    }
}
