//! The gemm/gemv driver, written once for every SIMD ISA: chunks of tokens x output panels
//! x token tiles, the gate/up (SwiGLU) pairing and the partial-panel store. An ISA brings
//! its [`Kernels`]: the tile products, `silu·mul`, an 8-row store, and the entry point
//! that compiles [`drive`] with its target features.
//!
//! Performance shape: [`run`] is the one layout dispatch, at run time; below it [`drive`]
//! is monomorphized per (ISA, layout) — the layout is a const generic — and is
//! `#[inline(always)]`, so each ISA's `#[target_feature]` entry point (`Kernels::run`)
//! compiles the whole hot loop, tiles included, into one function per layout. (Generic code
//! that merged layouts or crossed a `#[target_feature]` boundary per tile measured 14-55%
//! slower on x86.)

use super::{Layout, PackedMatrix, QuantizedActivation, PANEL};
use std::ops::Range;

/// One gemm/gemv call, shapes checked by `matmul::check`: rows `panels` of `w` times the
/// activation rows `tokens`, row `r` of token `t` into `out[(t - tokens.start)·ld + r - 8·panels.start]`.
pub struct Job<'a> {
    pub w: &'a PackedMatrix,
    pub act: &'a QuantizedActivation,
    pub tokens: Range<usize>,
    pub out: &'a mut [f32],
    pub ld: usize,
    pub panels: Range<usize>,
    /// `w` is a gate/up pair: output `silu(gate)·up` (internal panels `2p`, `2p + 1`).
    pub swiglu: bool,
}

impl<'a> Job<'a> {
    /// `out[(t - tokens.start)·ld + r - 8·panels.start]` = row `r` of `w` · token `t` of
    /// `act`; a gate/up pair ([`super::Kind::SwiGlu`]) writes `silu(gate)·up`.
    pub fn new(
        w: &'a PackedMatrix,
        act: &'a QuantizedActivation,
        tokens: Range<usize>,
        out: &'a mut [f32],
        (ld, panels): (usize, Range<usize>),
    ) -> Job<'a> {
        let swiglu = matches!(w.kind, super::Kind::SwiGlu);
        Job {
            w,
            act,
            tokens,
            out,
            ld,
            panels,
            swiglu,
        }
    }
}

/// What a token chunk's tiles read: the activation rows and what the ISA staged from them.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // only x86 stages
pub struct Chunk<'a, S> {
    pub act: &'a QuantizedActivation,
    /// The chunk's first token.
    pub start: usize,
    /// [`Stage::stage`]'s output for the chunk.
    pub staged: &'a S,
    /// [`Kernels::pairs`] for this call: two-panel tiles pay, also for a gate/up pair.
    pub pairs: bool,
}

/// What an ISA's tiles read from a token chunk besides the activation rows, rewritten for
/// every chunk: it depends on the activation alone, not on the ISA that reads it.
pub trait Stage: Default {
    /// Prepares the chunk `rows` (tiles of `tt`), when [`Kernels::stages`] says so.
    fn stage(&mut self, act: &QuantizedActivation, rows: Range<usize>, tt: usize);
    /// All rows of `act` staged for tiles of `tt`, made once and shared by every call
    /// that covers all of them ([`QuantizedActivation::staged_all`]); `None`: stage a copy.
    fn shared(_act: &QuantizedActivation, _tt: usize) -> Option<&Self> {
        None
    }
}

/// Tokens of the next tile when `left` tokens of a chunk remain, tiles at most `tt`:
/// the chunk's tiles are as even as they can be (9 tokens in tiles of 8 run as 5 + 4, not
/// 8 + 1: a 1-token tile reads a panel's weights for one token). The staging and the
/// driver cut chunks alike with this. No bits depend on it: a token's outputs are the
/// same in a tile of any width.
#[inline(always)]
pub fn tile_len(left: usize, tt: usize) -> usize {
    left.div_ceil(left.div_ceil(tt.max(1)))
}

/// Nothing besides the rows (the ARM tiles).
impl Stage for () {
    #[inline(always)]
    fn stage(&mut self, _: &QuantizedActivation, _: Range<usize>, _: usize) {}
}

/// One ISA's matmul operations. A value is the proof that the CPU runs them (only the ISA's
/// detection makes one), so the methods are safe.
pub trait Kernels: Copy {
    /// The 8 f32 outputs of one panel for one token.
    type Rows: Copy;
    /// Per-chunk activation data the tiles read besides the rows (x86: interleaved records).
    type Staged: Stage;
    /// Runs [`drive::<Self, L>`](drive) inside a `#[target_feature]` function of this ISA.
    fn run<const L: u8>(self, job: Job);
    /// Whether the tiles of `layout` read [`Kernels::Staged`] data in a call over `tokens`
    /// tokens (else the chunk's staged data stays empty).
    fn stages(self, _layout: Layout, _tokens: usize) -> bool {
        false
    }
    /// The widest token tile the ISA has ([`Kernels::token_tile`] never returns more): 8,
    /// or 12 where 32 vector registers hold 12 tokens' accumulators.
    const MAX_TILE: usize = 8;
    /// Activation rows per weight-panel pass for `layout` in a call over `tokens` tokens
    /// (at most [`Kernels::MAX_TILE`]).
    fn token_tile(self, layout: Layout, tokens: usize) -> usize;
    /// The outputs of internal panel `p` of `w` (stored as `Layout::ALL[L]`) for tokens
    /// `t..t+N`. The layout is a const generic, not a value, so that an ISA whose tiles are
    /// `#[inline(always)]` (ARM) compiles only layout `L`'s tile into `drive::<_, L>`: with
    /// a run-time `layout` every arm of its layout match was inlined into every
    /// (layout, N) instance before being folded away, and one aarch64 rustc ran 30+ min
    /// and 9 GB on the resulting functions (LLVM's mem2reg).
    fn tile<const L: u8, const N: usize>(
        self,
        w: &PackedMatrix,
        p: usize,
        chunk: &Chunk<Self::Staged>,
        t: usize,
    ) -> [Self::Rows; N];
    /// Whether [`Kernels::tile_pair`] beats two [`Kernels::tile`]s for `layout` in a call
    /// over `tokens` tokens of a plain matrix (the driver then computes consecutive output
    /// panels in pairs) or of a gate/up pair (`swiglu`; [`Chunk::pairs`] tells `tile_pair`).
    fn pairs(self, _layout: Layout, _tokens: usize, _swiglu: bool) -> bool {
        false
    }
    /// The outputs of internal panels `p` and `p + 1` for tokens `t..t+N` (a gate/up pair
    /// for SwiGLU, or two consecutive output panels when [`Kernels::pairs`]).
    #[inline(always)]
    fn tile_pair<const L: u8, const N: usize>(
        self,
        w: &PackedMatrix,
        p: usize,
        chunk: &Chunk<Self::Staged>,
        t: usize,
    ) -> [[Self::Rows; 2]; N] {
        let a = self.tile::<L, N>(w, p, chunk, t);
        let b = self.tile::<L, N>(w, p + 1, chunk, t);
        std::array::from_fn(|j| [a[j], b[j]])
    }
    /// `silu(g)·u` per row.
    fn silu_mul(self, g: Self::Rows, u: Self::Rows) -> Self::Rows;
    /// Writes the 8 rows.
    fn store8(self, v: Self::Rows, out: &mut [f32; PANEL]);
}

/// Activation rows whose codes stay cache-resident while all panels of the range are swept
/// (a multiple of every tile size; x86: 8..128 measured within noise, 512 ~8% slower).
const TOKEN_CHUNK: usize = 24;

/// Runs `job` on the ISA of `k`: the one run-time dispatch on the layout.
pub fn run<K: Kernels>(k: K, job: Job) {
    macro_rules! by_layout {
        ($($l:ident),*) => {
            match job.w.layout {
                $(Layout::$l => k.run::<{ Layout::$l as u8 }>(job),)*
            }
        };
    }
    by_layout!(Q4_0, Q4_1, Q4_1x64, Q8_0, Q4_K, Q5_K, Q6_K, Q5_0, F16)
}

/// Chunks x panels x token tiles for layout `Layout::ALL[L]` (`job.w.layout`).
#[inline(always)]
pub fn drive<K: Kernels, const L: u8>(k: K, job: Job) {
    let layout = Layout::ALL[L as usize];
    debug_assert_eq!(layout, job.w.layout);
    let (w, act, ld, swiglu) = (job.w, job.act, job.ld, job.swiglu);
    let (tokens, panels, out) = (job.tokens, job.panels, job.out);
    let tt = k.token_tile(layout, tokens.len());
    let r0 = panels.start * PANEL;
    let mut staged = K::Staged::default();
    let stages = k.stages(layout, tokens.len());
    let mut c0 = tokens.start;
    while c0 < tokens.end {
        let c1 = (c0 + TOKEN_CHUNK).min(tokens.end);
        // A call over every row (a few tokens, split by output panels) reads the staging
        // the activation keeps; else (a chunk of a batch) its own.
        let shared = match stages && c0 == 0 && c1 == act.rows() {
            true => K::Staged::shared(act, tt),
            false => None,
        };
        if stages && shared.is_none() {
            staged.stage(act, c0..c1, tt);
        }
        let chunk = Chunk {
            act,
            start: c0,
            staged: shared.unwrap_or(&staged),
            pairs: k.pairs(layout, tokens.len(), swiglu),
        };
        let pairs = !swiglu && chunk.pairs;
        let mut p = panels.start;
        while p < panels.end {
            let pair = pairs && p + 1 < panels.end;
            let n = (w.rows - p * PANEL).min(PANEL);
            // Rows of the second panel of a pair (the first is then full).
            let n2 = if pair {
                (w.rows - (p + 1) * PANEL).min(PANEL)
            } else {
                0
            };
            let off = p * PANEL - r0;
            let mut t = c0;
            while t < c1 {
                let rows = tile_len(c1 - t, tt);
                let o = &mut out[(t - tokens.start) * ld + off..];
                let e = Emit::<K, L> {
                    k,
                    w,
                    p,
                    chunk: &chunk,
                    t,
                    ld,
                    n,
                    n2,
                    swiglu,
                };
                // The wide arms exist only for an ISA that has them (a const condition: the
                // other ISAs never compile those tiles).
                match rows {
                    12 if K::MAX_TILE >= 12 => e.emit::<12>(o),
                    11 if K::MAX_TILE >= 11 => e.emit::<11>(o),
                    10 if K::MAX_TILE >= 10 => e.emit::<10>(o),
                    9 if K::MAX_TILE >= 9 => e.emit::<9>(o),
                    8 => e.emit::<8>(o),
                    7 => e.emit::<7>(o),
                    6 => e.emit::<6>(o),
                    5 => e.emit::<5>(o),
                    4 => e.emit::<4>(o),
                    3 => e.emit::<3>(o),
                    2 => e.emit::<2>(o),
                    _ => e.emit::<1>(o),
                }
                t += rows;
            }
            p += if pair { 2 } else { 1 };
        }
        c0 = c1;
    }
}

/// One output panel for one token tile.
struct Emit<'a, K: Kernels, const L: u8> {
    k: K,
    w: &'a PackedMatrix,
    p: usize,
    chunk: &'a Chunk<'a, K::Staged>,
    t: usize,
    ld: usize,
    /// Rows of the panel that exist (`< 8` in the last panel).
    n: usize,
    /// Rows of panel `p + 1` when the emit covers a pair of output panels, else 0.
    n2: usize,
    swiglu: bool,
}

impl<K: Kernels, const L: u8> Emit<'_, K, L> {
    /// Computes panel `p` (and `p + 1` for a pair) for tokens `t..t+N` and writes its `n`
    /// (and `n2`) rows of each token at `out[j·ld..]` (and `out[j·ld + 8..]`).
    #[inline(always)]
    fn emit<const N: usize>(&self, out: &mut [f32]) {
        let Emit {
            k, w, p, chunk, t, ..
        } = *self;
        if self.n2 > 0 {
            let v = k.tile_pair::<L, N>(w, p, chunk, t);
            for (j, v) in v.iter().enumerate() {
                self.put(v[0], &mut out[j * self.ld..], self.n);
                self.put(v[1], &mut out[j * self.ld + PANEL..], self.n2);
            }
            return;
        }
        let v = if self.swiglu {
            let gu = k.tile_pair::<L, N>(w, 2 * p, chunk, t);
            std::array::from_fn(|j| k.silu_mul(gu[j][0], gu[j][1]))
        } else {
            k.tile::<L, N>(w, p, chunk, t)
        };
        for (j, v) in v.iter().enumerate() {
            self.put(*v, &mut out[j * self.ld..], self.n);
        }
    }

    /// Writes the first `n` of the 8 rows `v` to `o`.
    #[inline(always)]
    fn put(&self, v: K::Rows, o: &mut [f32], n: usize) {
        let o = &mut o[..n];
        if let Some(o) = o.first_chunk_mut::<PANEL>() {
            self.k.store8(v, o);
        } else {
            let mut tmp = [0f32; PANEL];
            self.k.store8(v, &mut tmp);
            o.copy_from_slice(&tmp[..n]);
        }
    }
}
