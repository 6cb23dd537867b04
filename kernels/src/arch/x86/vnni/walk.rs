//! The block walk every VNNI tile shares: check the panels and the activation records,
//! start the N accumulators, and step through the blocks, one format's [`Step`] at a time.
//! A format is a [`Step`] type (a trait, not a closure: a closure is compiled without the
//! level's target features and called from the tiles instead of inlined, 3x slower).

use super::lanes::Lanes;
use super::q4::Panels;
use crate::arch::x86::{IL_REC, L2_PREFETCH_BYTES, PREFETCH_BYTES};
use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};

/// Where a step starts: the first panel's codes and scales (the second panel's are
/// `Panels::q_step` bytes / `s_step` u16s further on), and the first block's record.
#[derive(Clone, Copy)]
pub(super) struct At {
    pub q: *const u8,
    pub s: *const u16,
    pub a: *const u8,
}

/// What one step of a format's tile covers.
#[derive(Clone, Copy)]
pub(super) struct Size {
    /// Consecutive 32-blocks: 1, or the blocks that share a scale group (2 for Q4_1x64, 8
    /// for the K-quants).
    pub blocks: usize,
    /// Code bytes per panel.
    pub codes: usize,
    /// Scale u16s per panel.
    pub scales: usize,
}

impl Size {
    /// `blocks` 32-blocks, `codes` bytes and `scales` u16s per panel.
    pub const fn new(blocks: usize, codes: usize, scales: usize) -> Size {
        Size {
            blocks,
            codes,
            scales,
        }
    }
}

/// One step of a format's tile.
pub(super) trait Step {
    const SIZE: Size;
    /// Adds the step's products for the N tokens to `acc`.
    ///
    /// # Safety
    /// Inside the level's root; `at` is at the step's codes, scales and first record, and
    /// the step's codes and scales (both panels) and its records of
    /// `N·IL_REC` bytes are in bounds ([`walk`] checks).
    unsafe fn add<L: Lanes, const N: usize>(w: &Panels, at: At, acc: &mut [L::F; N]);
}

/// The row outputs of one panel (two for 16 lanes) for the N tokens of an interleaved
/// tile (`a`: `nb` records of `N·IL_REC` bytes), format `S`.
///
/// # Safety
/// Inside the level's root ([`super::Dp::drive`]): the CPU has the level's features.
/// (Lengths are checked; `nb` must be a multiple of the step's blocks, checked.)
#[inline(always)]
pub unsafe fn walk<S: Step, L: Lanes, const N: usize>(w: Panels, a: &[u8], nb: usize) -> [L::F; N] {
    let (rec, size) = (N * IL_REC, S::SIZE);
    assert!(nb.is_multiple_of(size.blocks) && a.len() >= nb * rec);
    let steps = nb / size.blocks;
    w.check::<L>(steps * size.codes, steps * size.scales);
    // SAFETY: in the level's root (contract).
    let mut acc = [unsafe { L::zero_f() }; N];
    let mut at = At {
        q: w.q.as_ptr(),
        s: w.s.as_ptr(),
        a: a.as_ptr(),
    };
    // The weights stream from L3 (a decode step's matrices do not fit L2): the tile asks
    // for the codes `PREFETCH_BYTES` ahead of each panel's read, and the scales as far
    // ahead in their proportion, as the gemv tiles do. Without it a few-token step stalled
    // on the code loads (perf: the instructions after them held most of the tile's
    // samples) and ran 2.4x a one-token step. The codes are also requested into L2
    // `L2_PREFETCH_BYTES` ahead, as the gemv does: weight GB/s without / with, one thread,
    // 100 2560x896 Q4_1 g64 matrices alternating in one process: 2 tokens 12.8 / 14.1, 4
    // tokens 13.4 / 14.7, 9 tokens 7.5 / 10.0; Q8_0 at 4 tokens 11.7 / 14.0.
    let code_lines = size.codes.div_ceil(64);
    let scale_ahead = PREFETCH_BYTES * 2 * size.scales / size.codes;
    let scale_lines = (2 * size.scales).div_ceil(64);
    for _ in 0..steps {
        for panel in 0..L::ROWS / 8 {
            let q = at.q.wrapping_add(panel * w.q_step + PREFETCH_BYTES);
            let s = (at.s.wrapping_add(panel * w.s_step) as *const u8).wrapping_add(scale_ahead);
            // SAFETY: prefetch hints (SSE, every x86-64): no memory is accessed.
            unsafe {
                for l in 0..code_lines {
                    _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(64 * l) as *const i8);
                    let l2 = q.wrapping_add(L2_PREFETCH_BYTES - PREFETCH_BYTES + 64 * l);
                    _mm_prefetch::<_MM_HINT_T1>(l2 as *const i8);
                }
                for l in 0..scale_lines {
                    _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(64 * l) as *const i8);
                }
            }
        }
        // SAFETY: the step's codes, scales and records are in bounds (checked above; `at`
        // is at this step).
        unsafe { S::add::<L, N>(&w, at, &mut acc) };
        // Advance to the next step (one past the end after the last: never dereferenced).
        at.q = at.q.wrapping_add(size.codes);
        at.s = at.s.wrapping_add(size.scales);
        at.a = at.a.wrapping_add(size.blocks * rec);
    }
    acc
}
