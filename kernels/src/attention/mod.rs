//! Causal self-attention of one KV head's query group over cached keys and values,
//! grouped-query: the query heads that share a KV head are processed together, so each
//! cached K and V row is read (and converted to f32) once per call for the whole group and
//! block of query rows. Scores, softmax and the weighted V sum are f32, computed on tiles
//! of 16 keys ([`tiled`]) with an online softmax over chunks of 128 keys ([`online`]):
//! 1.9x faster than one dot product per (query, key) on a pp512 layer of MNN-Pocket.
//! [`attend_segments`] + [`merge_rows`] compute the same output with the keys split at
//! [`SEGMENT`] boundaries between calls (threads), bit for bit.
//!
//! [`attend`] dispatches on an [`Isa`]: AVX2 runs the tiled body compiled with
//! `avx2,fma,f16c` (`arch::x86::attention`: its loops vectorize 8-wide), AVX-512 with its
//! features, every other level the same body without target features (aarch64: NEON is
//! baseline, so that body is already NEON code; a hand-written NEON twin is not needed).
//! The arithmetic is the same on every level, its exp included ([`online`]).
//!
//! The cache stays with its owner: the kernel reads rows through [`KvRows`]
//! ([`F16Rows`]: f16 slices with a row stride).

mod online;
#[cfg(test)]
mod tests;
pub(crate) mod tiled;

pub use online::{merge_segment, normalize, RowState, SEGMENT};

use crate::Isa;
use half::f16;
use half::slice::HalfFloatSliceExt;

/// The cached keys and values of one layer, read a head at a time.
pub trait KvRows {
    /// Key of position `pos`, elements `off..off + out.len()`, as f32.
    fn key(&self, pos: usize, off: usize, out: &mut [f32]);
    /// Value of position `pos`, elements `off..off + out.len()`, as f32.
    fn value(&self, pos: usize, off: usize, out: &mut [f32]);
    /// The rows in place, when they are f16: the tiles are then filled by the level's
    /// converter ([`FillTiles`]) instead of a row at a time.
    fn f16(&self) -> Option<F16Rows<'_>> {
        None
    }
}

/// One tile's rows: keys / values `pos..pos + kn` (`kn <= 16`), elements `off..` of each.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tile {
    pub pos: usize,
    pub kn: usize,
    pub off: usize,
}

/// How a level fills the attention tiles from f16 rows (by default a row at a time through
/// [`KvRows`]). Every fill is an exact f16 -> f32 conversion, so each gives the same bits.
pub(crate) trait FillTiles: Copy {
    /// Whether the body takes query rows four or two at a time (shared tile loads, more
    /// FMA chains): on levels with registers for both rows' accumulators (AVX-512's 32; with
    /// AVX2's 16 they spill and pairing is 20 % slower). Same bits either way.
    const PAIR_ROWS: bool = false;
    /// `kt[d·16 + k]` = element `off + d` of key `pos + k` for `k < kn`, 0 for
    /// `kn <= k < 16` (`d < kt.len() / 16`, the head size); `row`: scratch.
    #[inline(always)]
    fn keys(self, kv: &F16Rows, t: Tile, kt: &mut [f32], row: &mut Vec<f32>) {
        tiled::keys_by_row(kv, t, kt, row)
    }
    /// Row `k < kn` of `vt` (`head_dim` values) = elements `off..` of value `pos + k`.
    #[inline(always)]
    fn values(self, kv: &F16Rows, t: Tile, head_dim: usize, vt: &mut [f32]) {
        tiled::values_by_row(kv, t, head_dim, vt)
    }
}

/// The fill of any level: the default, a row at a time.
#[derive(Clone, Copy)]
pub(crate) struct ByRow;

impl FillTiles for ByRow {}

/// f16 keys and values, the row of position `pos` at element `pos·stride` of each.
#[derive(Clone, Copy)]
pub struct F16Rows<'a> {
    pub k: &'a [f16],
    pub v: &'a [f16],
    pub stride: usize,
}

impl KvRows for F16Rows<'_> {
    #[inline]
    fn key(&self, pos: usize, off: usize, out: &mut [f32]) {
        let at = pos * self.stride + off;
        self.k[at..at + out.len()].convert_to_f32_slice(out);
    }
    #[inline]
    fn value(&self, pos: usize, off: usize, out: &mut [f32]) {
        let at = pos * self.stride + off;
        self.v[at..at + out.len()].convert_to_f32_slice(out);
    }
    #[inline]
    fn f16(&self) -> Option<F16Rows<'_>> {
        Some(*self)
    }
}

/// One call's query block: rows of consecutive tokens at `pos0, pos0 + 1, ..`, each the
/// query heads (already roped) of one KV head's group.
#[derive(Clone, Copy, Debug)]
pub struct QueryBlock<'a> {
    /// Row `i` (the token at `pos0 + i`) is `q[i·q_stride ..][..len]`.
    pub q: &'a [f32],
    pub q_stride: usize,
    /// Values per row: `len / head_dim` query heads.
    pub len: usize,
    pub head_dim: usize,
    /// Where the KV head starts in a cached row (`g·head_dim` for KV head `g`).
    pub kv_off: usize,
    pub pos0: usize,
    /// Sliding window: token `pos` sees keys `pos + 1 - window ..= pos`; 0 = all of `0..=pos`.
    pub window: usize,
    /// Applied to the scores.
    pub scale: f32,
}

/// Scratch reused across calls (one per thread).
#[derive(Default)]
pub struct AttnScratch {
    scores: Vec<f32>,
    row: Vec<f32>,
    /// One tile of 16 keys, transposed (`head_dim x 16`).
    kt: Vec<f32>,
    /// One tile of 16 value rows (`16 x head_dim`).
    vt: Vec<f32>,
    /// The current segment's row states and outputs, and the states merged so far.
    state: Vec<RowState>,
    out: Vec<f32>,
    total: Vec<RowState>,
}

/// Attention of the block `a` over `kv`: `out.len() / a.len` query rows, row `i`'s output
/// (`a.len` values, per head the softmax-weighted sum of the visible values) at
/// `out[i·a.len ..]`. Each cached K and V row is converted once for the whole block.
///
/// Panics on inconsistent shapes (a row length that is not whole heads, an `out` that is
/// not whole rows, `q` too short); a key past `kv`'s rows panics on its slice bounds.
pub fn attend<R: KvRows>(kv: &R, a: &QueryBlock, out: &mut [f32], s: &mut AttnScratch, isa: Isa) {
    check(a, out.len());
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() && isa.is_available() {
        return crate::arch::x86::attention::attend_checked(kv, a, out, s, isa);
    }
    let _ = isa; // (the body's arithmetic is the same on every level)
    tiled::attend_body(kv, a, out, s, ByRow)
}

/// The segments ([`SEGMENT`] keys at multiples of it) holding keys that some token of a
/// block sees: `bt` tokens at `pos0..`, a sliding `window` (0: none) as in [`QueryBlock`].
pub fn segments(pos0: usize, bt: usize, window: usize) -> std::ops::Range<usize> {
    let first = if window > 0 {
        (pos0 + 1).saturating_sub(window)
    } else {
        0
    };
    first / SEGMENT..(pos0 + bt.max(1) - 1) / SEGMENT + 1
}

/// Where [`attend_segments`] writes: segment `segs.start + j`'s row states go to
/// `states[j·rows ..][..rows]` and its un-normalized outputs to `outs[j·rows·head_dim ..]`
/// (`rows` = query rows × heads, in [`attend`]'s output order).
pub struct Segments<'a> {
    pub segs: std::ops::Range<usize>,
    pub states: &'a mut [RowState],
    pub outs: &'a mut [f32],
}

impl Segments<'_> {
    /// Query rows × heads per segment.
    fn rows(&self) -> usize {
        self.states.len() / self.segs.len().max(1)
    }
}

/// [`attend`] over the keys of segments `out.segs` only (some of [`segments`]), without
/// the merge. Merging every segment of [`segments`] in order with [`merge_segment`] and
/// dividing with [`normalize`] gives [`attend`]'s output bit for bit, however the segments
/// were split between calls ([`merge_rows`] does it).
pub fn attend_segments<R: KvRows>(
    kv: &R,
    a: &QueryBlock,
    out: Segments,
    s: &mut AttnScratch,
    isa: Isa,
) {
    let (rows, heads) = (out.rows(), a.len / a.head_dim.max(1));
    assert!(
        rows > 0 && rows * out.segs.len() == out.states.len() && rows.is_multiple_of(heads),
        "{} states are not whole rows of {} segments",
        out.states.len(),
        out.segs.len()
    );
    check(a, rows / heads * a.len);
    assert_eq!(
        out.outs.len(),
        out.states.len() * a.head_dim,
        "outputs of {rows} rows"
    );
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() && isa.is_available() {
        return crate::arch::x86::attention::segments_checked(kv, a, out, s, isa);
    }
    let _ = isa;
    tiled::segments_into(kv, a, out, s, ByRow)
}

/// Merges the per-segment results of [`attend_segments`] (`states` and `outs` of
/// consecutive segments, `states.len() / rows` of them, in order) and normalizes them into
/// `out` (`rows × head_dim` values, in [`attend`]'s order): [`attend`]'s output.
pub fn merge_rows(states: &[RowState], outs: &[f32], out: &mut [f32], head_dim: usize, isa: Isa) {
    let rows = out.len() / head_dim;
    assert!(
        rows > 0 && out.len() == rows * head_dim && states.len().is_multiple_of(rows),
        "{} states are not whole segments of {rows} rows",
        states.len()
    );
    assert_eq!(outs.len(), states.len() * head_dim);
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() && isa.is_available() {
        return crate::arch::x86::attention::merge_checked(states, outs, out, head_dim, isa);
    }
    let _ = isa;
    tiled::merge_rows(states, outs, out, head_dim)
}

fn check(a: &QueryBlock, out_len: usize) {
    assert!(
        a.head_dim > 0 && a.len > 0 && a.len.is_multiple_of(a.head_dim),
        "query rows of {} values are not whole heads of {}",
        a.len,
        a.head_dim
    );
    assert!(
        out_len > 0 && out_len.is_multiple_of(a.len),
        "output of {out_len} is not whole rows of {}",
        a.len
    );
    let rows = out_len / a.len;
    let need = (rows - 1) * a.q_stride + a.len;
    assert!(
        a.q.len() >= need,
        "{rows} query rows of stride {} need {need} values, got {}",
        a.q_stride,
        a.q.len()
    );
}

/// The generic body, for the x86 `#[target_feature]` build and the tests.
#[cfg(any(target_arch = "x86_64", test))]
pub(crate) use tiled::attend_body;
