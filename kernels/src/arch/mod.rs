//! Hand-written SIMD kernels, one folder per architecture. Everything `unsafe` in
//! pocket-kernels lives here; the safe wrappers in [`crate::matmul`], [`elementwise`]
//! and the ISA modules validate shapes and the CPU's features before calling in. The rest of
//! the crate denies `unsafe_code` (`kernels/Cargo.toml`).

#![allow(unsafe_code)]

#[cfg(target_arch = "aarch64")]
pub mod arm;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub mod elementwise;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use crate::matmul::{Layout, QuantizedActivation, QK};

/// Pointers to the codes of activation rows `t0..t0+N` (checked in bounds).
#[inline(always)]
pub fn act_ptrs<const N: usize>(act: &QuantizedActivation, t0: usize) -> [*const i8; N] {
    let mut ap = [std::ptr::null(); N];
    for (t, p) in ap.iter_mut().enumerate() {
        *p = act.row_qs(t0 + t).as_ptr();
    }
    ap
}

/// Per-token slices `f(act, t0 + t)[..nb]` for tokens `0..N` (block scales and sums of
/// the rows a tile reads).
#[inline(always)]
pub fn per_token<'a, T, const N: usize>(
    act: &'a QuantizedActivation,
    t0: usize,
    nb: usize,
    f: fn(&'a QuantizedActivation, usize) -> &'a [T],
) -> [&'a [T]; N] {
    std::array::from_fn(|t| &f(act, t0 + t)[..nb])
}

/// The activation rows `t0..t0+N` of a row-pointer tile as it walks their 32-blocks: the
/// state every such tile of both ISAs starts from (block count, each row's code pointer,
/// each row's block scales `d`), built once by the dispatcher.
pub struct TileRows<'a, const N: usize> {
    act: &'a QuantizedActivation,
    t0: usize,
    /// 32-blocks per row.
    pub nb: usize,
    /// Each row's 32 codes of the current block.
    pub ap: [*const i8; N],
    /// Each row's block scales `d`.
    pub ad: [&'a [f32]; N],
}

impl<'a, const N: usize> TileRows<'a, N> {
    /// Rows `t0..t0+N` of `act` (checked to exist), at block 0.
    #[inline(always)]
    pub fn new(act: &'a QuantizedActivation, t0: usize) -> Self {
        assert!(t0 + N <= act.rows());
        let nb = act.blocks();
        let ad = per_token(act, t0, nb, QuantizedActivation::row_d);
        Self {
            act,
            t0,
            nb,
            ap: act_ptrs(act, t0),
            ad,
        }
    }

    /// Each row's per-block values `f(row)[..nb]` (sums of the codes, `d·Σq`, ...).
    #[inline(always)]
    pub fn per_token<T>(&self, f: fn(&'a QuantizedActivation, usize) -> &'a [T]) -> [&'a [T]; N] {
        per_token(self.act, self.t0, self.nb, f)
    }

    /// The 8-block groups of a K-quant panel (`q`: `qb` code bytes per block, `s`: the
    /// `layout`'s fp16 scales per group), checked to be whole and in bounds: the group
    /// count and the scales per group.
    #[inline(always)]
    pub fn k_groups(&self, layout: Layout, q: &[u8], qb: usize, s: &[u16]) -> (usize, usize) {
        let (ng, spg) = (self.nb / 8, layout.scales_per_group());
        assert!(self.nb.is_multiple_of(8) && q.len() >= self.nb * qb && s.len() >= ng * spg);
        (ng, spg)
    }

    /// Steps every row pointer to the next block (one past the row's end after the last
    /// block, never dereferenced then: hence `wrapping_add`).
    #[inline(always)]
    pub fn advance(&mut self) {
        for p in self.ap.iter_mut() {
            *p = p.wrapping_add(QK);
        }
    }
}
