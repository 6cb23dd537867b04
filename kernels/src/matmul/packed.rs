//! The packed (repacked-at-load) weight layout the matmul kernels read.
//!
//! Rows are grouped in **panels of 8**; a panel's 32-blocks are stored one after the other,
//! each as the 8 rows interleaved in 4-byte groups so that one 256-bit load holds the same
//! 4 (Q8_0) or 2x4 (Q4) columns of all 8 rows, one row per 32-bit lane:
//!
//! * Q4_0 / Q4_1: 128 bytes per (panel, block) = 4 vectors `v = 0..4`; in vector `v`,
//!   lane `i` (row `8p+i`) holds the source bytes `qs[4v..4v+4]` of that row's block. The
//!   low nibbles are elements `4v..4v+4`, the high nibbles elements `16+4v..16+4v+4`
//!   (the GGUF byte is copied unchanged; nibbles stay unsigned 0..=15).
//! * Q8_0: 256 bytes per (panel, block) = 8 vectors `g = 0..8`; lane `i` of vector `g`
//!   holds elements `4g..4g+4` of row `8p+i`.
//!
//! Scales live in a second, parallel stream of raw fp16 bits (converted in the kernel with
//! one F16C instruction per 8 rows): per (panel, block) `[d; 8]` (Q4_0, Q8_0) or
//! `[d; 8] ++ [m; 8]` (Q4_1). [`Layout::Q4_1x64`] is the merged Q4_1 layout for files in
//! which both 32-blocks of every 64-group share `(d, m)` (MNN-Pocket's export): one
//! `[d; 8] ++ [m; 8]` per (panel, 64-group), i.e. 4.5 instead of 5.0 bits per weight.
//!
//! Q4_K, Q5_K, Q6_K and Q5_0 ([`Layout::Q4_K`], [`Layout::Q5_K`], [`Layout::Q6_K`],
//! [`Layout::Q5_0`]) reuse the
//! Q4 nibble records plus bit planes, with sub-block scales decoded at pack time: see
//! `packed_k.rs`.
//!
//! F16 ([`Layout::F16`], for f32 activations): per (panel, 32-block) 512 bytes, element
//! `e` of the block = 16 bytes holding the fp16 bits of rows 0..8 (one `vcvtph2ps` /
//! `fcvtl`+`fcvtl2` gives the 8 rows' weights for one column, multiplied by the broadcast
//! activation value). 16 bits per weight, as in the file.
//!
//! The last panel is padded with zero rows (zero scales, zero codes): their outputs are 0
//! and are never written. The quant stream starts 64-byte aligned and every (panel, block)
//! record is a multiple of 32 bytes, so vector loads never split a cache line.

use crate::GgmlType;
use std::fmt;

// The K-quant and Q5_0 layouts: a child module so it fills the private fields directly.
#[path = "packed_k.rs"]
pub(super) mod packed_k;

/// Rows per panel.
pub const PANEL: usize = 8;
/// Elements per quantization block.
pub const QK: usize = 32;

pub use super::layout::{Kind, Layout, PackError, PackOptions};

/// A 64-byte aligned, immutable byte buffer (safe: an over-allocated `Vec` and an offset).
#[derive(Clone)]
struct AlignedBytes {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBytes {
    fn zeroed(len: usize) -> Self {
        let buf = vec![0u8; len + 64];
        let off = buf.as_ptr().align_offset(64).min(64);
        AlignedBytes { buf, off, len }
    }
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// A weight matrix (`rows` outputs x `cols` inputs) repacked for the matmul kernels.
#[derive(Clone)]
pub struct PackedMatrix {
    pub ty: GgmlType,
    pub layout: Layout,
    /// Output rows (for [`Kind::SwiGlu`]: gate rows = up rows = outputs).
    pub rows: usize,
    pub cols: usize,
    pub kind: Kind,
    /// 32-blocks per row.
    nb: usize,
    /// Internal panels (twice the output panels for [`Kind::SwiGlu`]).
    panels: usize,
    qs: AlignedBytes,
    scales: Vec<u16>,
}

impl fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("ty", &self.ty)
            .field("layout", &self.layout)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("kind", &self.kind)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// Where the fp16 scale(s), the nibbles / int8 codes sit inside one source block.
fn src_geometry(ty: GgmlType) -> Result<(usize, usize), PackError> {
    // (block bytes, offset of the codes)
    match ty {
        GgmlType::Q4_0 => Ok((18, 2)),
        GgmlType::Q4_1 => Ok((20, 4)),
        GgmlType::Q8_0 => Ok((34, 2)),
        GgmlType::Q5_0 => Ok((22, 6)),
        GgmlType::Q4_K => Ok((144, 16)),
        GgmlType::Q5_K => Ok((176, 48)),
        GgmlType::Q6_K => Ok((210, 0)),
        // One element per ggml "block"; rows are still cut into 32-column blocks.
        GgmlType::F16 => Ok((2, 0)),
        t => Err(PackError::UnsupportedType(t)),
    }
}

fn check_shape(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<(), PackError> {
    let (bb, _) = src_geometry(ty)?;
    let bs = ty.block_size();
    if cols == 0 || !cols.is_multiple_of(bs.max(QK)) {
        return Err(PackError::BadCols(cols));
    }
    if rows == 0 {
        return Err(PackError::BadRows(rows));
    }
    let expected = (cols / bs)
        .checked_mul(bb)
        .and_then(|r| r.checked_mul(rows))
        .ok_or(PackError::BadRows(rows))?;
    if bytes.len() != expected {
        return Err(PackError::BadLength {
            expected,
            got: bytes.len(),
        });
    }
    Ok(())
}

fn f16_bits(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Source bytes handed to `pack_releasing`'s callback at a time.
pub const RELEASE_SPAN: usize = 1 << 20;

/// Whether every 64-group of this Q4_1 tensor has two 32-blocks with equal `(d, m)` bits.
fn q4_1_pairs_share_scales(bytes: &[u8], rows: usize, cols: usize) -> bool {
    let nb = cols / QK;
    if !nb.is_multiple_of(2) {
        return false;
    }
    let rb = nb * 20;
    (0..rows).all(|r| {
        let row = &bytes[r * rb..(r + 1) * rb];
        row.chunks_exact(40).all(|pair| pair[0..4] == pair[20..24])
    })
}

fn layout_for(ty: GgmlType, merged: bool) -> Layout {
    match ty {
        GgmlType::Q4_0 => Layout::Q4_0,
        GgmlType::Q4_1 if merged => Layout::Q4_1x64,
        GgmlType::Q4_1 => Layout::Q4_1,
        GgmlType::Q5_0 => Layout::Q5_0,
        GgmlType::Q4_K => Layout::Q4_K,
        GgmlType::Q5_K => Layout::Q5_K,
        GgmlType::Q6_K => Layout::Q6_K,
        GgmlType::F16 => Layout::F16,
        _ => Layout::Q8_0,
    }
}

impl PackedMatrix {
    /// Packs one row-major GGUF tensor (`rows` rows of `cols` elements, raw block bytes).
    pub fn pack(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<Self, PackError> {
        Self::pack_with(ty, bytes, rows, cols, PackOptions::default())
    }

    pub fn pack_with(
        ty: GgmlType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        opts: PackOptions,
    ) -> Result<Self, PackError> {
        Self::pack_releasing(ty, bytes, rows, cols, opts, &|_| {})
    }

    /// [`Self::pack_with`], calling `release` with each consumed span of `bytes` (about
    /// [`RELEASE_SPAN`] at a time, in order, together covering all of `bytes`) once its
    /// panels are written. Why: a loader packing from a memory map drops those pages from
    /// its resident set as it goes, so packing a 180 MB output head does not briefly hold
    /// both the mapped and the packed copy.
    pub fn pack_releasing(
        ty: GgmlType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        opts: PackOptions,
        release: &dyn Fn(&[u8]),
    ) -> Result<Self, PackError> {
        check_shape(ty, bytes, rows, cols)?;
        let merged =
            ty == GgmlType::Q4_1 && opts.merge_q4_1 && q4_1_pairs_share_scales(bytes, rows, cols);
        let layout = layout_for(ty, merged);
        let panels = rows.div_ceil(PANEL);
        let mut m = Self::empty(
            ty,
            layout,
            rows,
            cols,
            panels,
            Kind::Plain { parts: vec![rows] },
        );
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        let mut released = 0;
        for p in 0..panels {
            let srcs: Vec<Option<&[u8]>> = (0..PANEL)
                .map(|i| {
                    let r = p * PANEL + i;
                    (r < rows).then(|| &bytes[r * rb..(r + 1) * rb])
                })
                .collect();
            m.fill_panel(p, &srcs);
            let done = ((p + 1) * PANEL).min(rows) * rb;
            if done - released >= RELEASE_SPAN || p + 1 == panels {
                release(&bytes[released..done]);
                released = done;
            }
        }
        Ok(m)
    }

    /// Packs several tensors of the same type and width stacked along the output dimension
    /// (fused Q/K/V): the outputs are the parts' outputs concatenated, in order.
    pub fn pack_stacked(
        ty: GgmlType,
        parts: &[(&[u8], usize)],
        cols: usize,
    ) -> Result<Self, PackError> {
        if parts.is_empty() {
            return Err(PackError::Mismatch("no tensors".into()));
        }
        let mut all = Vec::new();
        for &(b, r) in parts {
            check_shape(ty, b, r, cols)?;
            all.extend_from_slice(b);
        }
        let rows = parts.iter().map(|p| p.1).sum();
        let mut m = Self::pack(ty, &all, rows, cols)?;
        m.kind = Kind::Plain {
            parts: parts.iter().map(|p| p.1).collect(),
        };
        Ok(m)
    }

    /// Packs a gate/up pair (both `rows x cols`, same type) for `gemv_swiglu` / `gemm_swiglu`,
    /// whose single pass writes `silu(gate·x) * (up·x)`.
    pub fn pack_swiglu(
        ty: GgmlType,
        gate: &[u8],
        up: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, PackError> {
        check_shape(ty, gate, rows, cols)?;
        check_shape(ty, up, rows, cols)?;
        let merged = ty == GgmlType::Q4_1
            && q4_1_pairs_share_scales(gate, rows, cols)
            && q4_1_pairs_share_scales(up, rows, cols);
        let layout = layout_for(ty, merged);
        let out_panels = rows.div_ceil(PANEL);
        let mut m = Self::empty(ty, layout, rows, cols, 2 * out_panels, Kind::SwiGlu);
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        for q in 0..out_panels {
            for (half, src) in [gate, up].into_iter().enumerate() {
                let srcs: Vec<Option<&[u8]>> = (0..PANEL)
                    .map(|i| {
                        let r = q * PANEL + i;
                        (r < rows).then(|| &src[r * rb..(r + 1) * rb])
                    })
                    .collect();
                m.fill_panel(2 * q + half, &srcs);
            }
        }
        Ok(m)
    }

    fn empty(
        ty: GgmlType,
        layout: Layout,
        rows: usize,
        cols: usize,
        panels: usize,
        kind: Kind,
    ) -> Self {
        let nb = cols / QK;
        let ng = nb / layout.blocks_per_group();
        PackedMatrix {
            ty,
            layout,
            rows,
            cols,
            kind,
            nb,
            panels,
            qs: AlignedBytes::zeroed(panels * nb * layout.quant_bytes_per_block()),
            scales: vec![0u16; panels * ng * layout.scales_per_group()],
        }
    }

    /// Writes internal panel `p` from up to 8 source rows (`None` = zero padding).
    fn fill_panel(&mut self, p: usize, srcs: &[Option<&[u8]>]) {
        if self.layout == Layout::F16 {
            let n = self.nb * 512;
            let panel = &mut self.qs.as_mut_slice()[p * n..(p + 1) * n];
            for (i, src) in srcs.iter().enumerate() {
                let Some(src) = src else { continue };
                for (c, h) in src.chunks_exact(2).enumerate() {
                    let at = (c / QK) * 512 + (c % QK) * 16 + 2 * i;
                    panel[at..at + 2].copy_from_slice(h);
                }
            }
            return;
        }
        if self.layout.is_k() {
            return self.fill_panel_k(p, srcs);
        }
        let (bb, qoff) = src_geometry(self.ty).unwrap();
        let nb = self.nb;
        let qb = self.layout.quant_bytes_per_block();
        let spg = self.layout.scales_per_group();
        let bpg = self.layout.blocks_per_group();
        let ng = nb / bpg;
        let has_min = spg == 16;
        let groups = qb / 32; // 4-byte groups per row per block: 4 (Q4) or 8 (Q8)
        let qs = self.qs.as_mut_slice();
        let panel = &mut qs[p * nb * qb..(p + 1) * nb * qb];
        for (i, src) in srcs.iter().enumerate() {
            let Some(src) = src else { continue };
            for (dst, blk) in panel.chunks_exact_mut(qb).zip(src.chunks_exact(bb)) {
                let codes = &blk[qoff..qoff + 4 * groups];
                for (g, c) in codes.chunks_exact(4).enumerate() {
                    dst[g * 32 + i * 4..g * 32 + i * 4 + 4].copy_from_slice(c);
                }
            }
        }
        for g in 0..ng {
            let sc = &mut self.scales[(p * ng + g) * spg..(p * ng + g + 1) * spg];
            for (i, src) in srcs.iter().enumerate() {
                let Some(src) = src else { continue };
                let blk = &src[g * bpg * bb..];
                sc[i] = f16_bits(blk, 0);
                if has_min {
                    sc[8 + i] = f16_bits(blk, 2);
                }
            }
        }
    }

    /// 32-blocks per row.
    pub fn blocks(&self) -> usize {
        self.nb
    }

    /// Output panels (8 output rows each) — the unit the caller's thread pool splits.
    pub fn panels(&self) -> usize {
        match self.kind {
            Kind::SwiGlu => self.panels / 2,
            Kind::Plain { .. } => self.panels,
        }
    }

    /// Internal panels of 8 packed rows (for [`Kind::SwiGlu`], twice [`Self::panels`]).
    pub fn internal_panels(&self) -> usize {
        self.panels
    }

    /// `n` contiguous output-panel ranges of near-equal size covering every panel (some
    /// empty when `n > panels()`): the natural split of a gemv across `n` threads.
    pub fn split_panels(&self, n: usize) -> Vec<std::ops::Range<usize>> {
        let np = self.panels();
        let n = n.max(1);
        (0..n).map(|i| np * i / n..np * (i + 1) / n).collect()
    }

    /// Splits a gemv output (`out.len() >= rows`) into the disjoint slices that
    /// `gemv(.., panels[i], ..)` writes, for panel ranges that follow each other from 0.
    pub fn split_out<'a>(
        &self,
        mut out: &'a mut [f32],
        panels: &[std::ops::Range<usize>],
    ) -> Vec<&'a mut [f32]> {
        let mut v = Vec::with_capacity(panels.len());
        let mut next = 0;
        for r in panels {
            assert_eq!(r.start, next, "panel ranges must be contiguous from 0");
            next = r.end;
            let (a, b) = std::mem::take(&mut out).split_at_mut(self.rows_in(r.clone()));
            v.push(a);
            out = b;
        }
        v
    }

    /// Output rows covered by a range of output panels.
    pub fn rows_in(&self, panels: std::ops::Range<usize>) -> usize {
        (panels.end * PANEL).min(self.rows) - (panels.start * PANEL).min(self.rows)
    }

    /// Bytes of weights the kernels read for a full pass (codes + scales).
    pub fn bytes(&self) -> usize {
        self.qs.len + self.scales.len() * 2
    }

    /// The row counts of the stacked parts (one entry for a single tensor).
    pub fn parts(&self) -> &[usize] {
        match &self.kind {
            Kind::Plain { parts } => parts,
            Kind::SwiGlu => std::slice::from_ref(&self.rows),
        }
    }

    /// The packed quant codes of internal panel `p` (`blocks() * quant_bytes_per_block`).
    pub fn panel_quants(&self, p: usize) -> &[u8] {
        let n = self.nb * self.layout.quant_bytes_per_block();
        &self.qs.as_slice()[p * n..(p + 1) * n]
    }

    /// The code bytes and fp16 scale bits of internal panels `p..` (tiles that read
    /// consecutive panels; each panel is `panel_quants(0).len()` bytes, `panel_scales(0).len()`
    /// scales).
    pub fn panels_from(&self, p: usize) -> (&[u8], &[u16]) {
        let n = self.nb * self.layout.quant_bytes_per_block();
        let m = self.nb / self.layout.blocks_per_group() * self.layout.scales_per_group();
        (&self.qs.as_slice()[p * n..], &self.scales[p * m..])
    }

    /// The fp16 scale bits of internal panel `p`.
    pub fn panel_scales(&self, p: usize) -> &[u16] {
        let n = self.nb / self.layout.blocks_per_group() * self.layout.scales_per_group();
        &self.scales[p * n..(p + 1) * n]
    }

    /// Dequantizes output row `r` (test oracle; for SwiGlu, gate row `r` then up row `r`
    /// would be `internal_row`).
    pub fn dequant_row(&self, r: usize) -> Vec<f32> {
        let (p, i) = match self.kind {
            Kind::Plain { .. } => (r / PANEL, r % PANEL),
            Kind::SwiGlu => (2 * (r / PANEL), r % PANEL),
        };
        self.dequant_internal(p, i)
    }

    /// Dequantizes row `i` of internal panel `p`.
    pub fn dequant_internal(&self, p: usize, i: usize) -> Vec<f32> {
        if self.layout.is_k() {
            return self.dequant_internal_k(p, i);
        }
        let q = self.panel_quants(p);
        if self.layout == Layout::F16 {
            return (0..self.cols)
                .map(|c| {
                    let at = (c / QK) * 512 + (c % QK) * 16 + 2 * i;
                    half::f16::from_bits(u16::from_le_bytes([q[at], q[at + 1]])).to_f32()
                })
                .collect();
        }
        let s = self.panel_scales(p);
        let qb = self.layout.quant_bytes_per_block();
        let spg = self.layout.scales_per_group();
        let bpg = self.layout.blocks_per_group();
        let mut out = vec![0f32; self.cols];
        for b in 0..self.nb {
            let g = b / bpg;
            let d = half::f16::from_bits(s[g * spg + i]).to_f32();
            let blk = &q[b * qb..(b + 1) * qb];
            let o = &mut out[b * QK..(b + 1) * QK];
            match self.layout {
                Layout::Q8_0 => {
                    for e in 0..QK {
                        o[e] = blk[(e / 4) * 32 + i * 4 + e % 4] as i8 as f32 * d;
                    }
                }
                _ => {
                    let deq = |q: u8| {
                        if spg == 16 {
                            let m = half::f16::from_bits(s[g * spg + 8 + i]).to_f32();
                            q as f32 * d + m
                        } else {
                            (q as f32 - 8.0) * d
                        }
                    };
                    for e in 0..16 {
                        let byte = blk[(e / 4) * 32 + i * 4 + e % 4];
                        o[e] = deq(byte & 15);
                        o[e + 16] = deq(byte >> 4);
                    }
                }
            }
        }
        out
    }
}
