//! The low-rank products of a LoRA adapter held in bf16 (`out += s · B(A x)`): one row of
//! `A` times an input row ([`dot_bf16_with`]), and `B` times the rank-long middle vector,
//! scaled and added onto a range of output columns in one pass ([`add_bt_product_with`]).
//!
//! `B` is held as `Bᵀ` in panels of [`BT_PANEL`] output columns ([`pack_bt`]): panel `p`
//! holds the `rank` rows of columns `8p .. 8p + 8` one after the other (zero-padded past
//! `n_out`), so any run of columns is one contiguous read (a plain `rank × n_out` `Bᵀ`
//! is `rank` streams `n_out` apart: measured 2.5× slower than `A`'s contiguous rows).
//!
//! The SIMD bodies (AVX2) are bit-identical to the scalar references, not merely close:
//! the same 16 partial sums of the dot (lane `i mod 16`), the same left-to-right sums,
//! multiplies and adds kept apart (no FMA). So a row's result is the same on every level
//! and whichever columns or rows a thread's share holds. On aarch64 the references run
//! (NEON is aarch64's baseline, so the compiler already vectorizes them).

use super::{path, Path};
use crate::Isa;

fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Scalar reference: `Σ a[i] · x[i]` in 16 partial sums (`acc[i mod 16]`), summed in
/// order, then the tail.
pub fn dot_bf16_ref(a: &[u16], x: &[f32]) -> f32 {
    check(a.len(), x.len());
    let mut acc = [0f32; 16];
    let (ca, cx) = (a.chunks_exact(16), x.chunks_exact(16));
    let (ra, rx) = (ca.remainder(), cx.remainder());
    for (p, q) in ca.zip(cx) {
        for i in 0..16 {
            acc[i] += bf16_to_f32(p[i]) * q[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (p, q) in ra.iter().zip(rx) {
        s += bf16_to_f32(*p) * q;
    }
    s
}

/// [`dot_bf16_ref`] on level `isa`.
pub fn dot_bf16_with(isa: Isa, a: &[u16], x: &[f32]) -> f32 {
    check(a.len(), x.len());
    match path(isa) {
        Path::Scalar => dot_bf16_ref(a, x),
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::lowrank::dot_bf16(t, a, x),
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => dot_bf16_ref(a, x),
    }
}

/// Output columns per panel of a packed `Bᵀ`.
pub const BT_PANEL: usize = 8;

/// Elements of a packed `Bᵀ` of `rank × n_out`.
pub fn bt_len(rank: usize, n_out: usize) -> usize {
    n_out.div_ceil(BT_PANEL) * BT_PANEL * rank
}

/// Where `B[o][r]` is in a packed `Bᵀ` of rank `rank`.
pub fn bt_index(o: usize, r: usize, rank: usize) -> usize {
    (o / BT_PANEL) * BT_PANEL * rank + r * BT_PANEL + o % BT_PANEL
}

/// `B` (`n_out × rank`, row-major, any element type) packed as `Bᵀ` panels.
pub fn pack_bt<T: Copy + Default>(b: &[T], n_out: usize, rank: usize) -> Vec<T> {
    assert_eq!(b.len(), n_out * rank, "lowrank: B is not {n_out}x{rank}");
    let mut t = vec![T::default(); bt_len(rank, n_out)];
    for o in 0..n_out {
        for r in 0..rank {
            t[bt_index(o, r, rank)] = b[o * rank + r];
        }
    }
    t
}

/// One thread's share of the `B` product of a packed `Bᵀ`: `scale · bt_column(o)` for the
/// columns `o` of `c0..`, as many as the output a call adds it onto.
#[derive(Debug, Clone, Copy)]
pub struct BtProduct<'a> {
    /// `Bᵀ`, packed by [`pack_bt`]: `mid.len()` rows of `n_out`.
    pub bt: &'a [u16],
    pub n_out: usize,
    /// The first column.
    pub c0: usize,
    /// The rank-long middle vector (`A x`).
    pub mid: &'a [f32],
    pub scale: f32,
}

impl BtProduct<'_> {
    /// Refuses the product unless `bt` holds `mid.len()` rows of `n_out` and the columns
    /// `c0..c0 + out.len()` are among them.
    fn check(&self, out: &[f32]) {
        let BtProduct {
            bt, n_out, c0, mid, ..
        } = *self;
        assert!(
            c0 + out.len() <= n_out && bt.len() >= bt_len(mid.len(), n_out),
            "lowrank: columns {c0}..{} of a {}x{n_out} Bᵀ ({} elements)",
            c0 + out.len(),
            mid.len(),
            bt.len()
        );
    }
}

/// Column `o` of the product: `((0 + mid[0]·B[o][0]) + mid[1]·B[o][1]) + …`.
pub fn bt_column(bt: &[u16], o: usize, mid: &[f32]) -> f32 {
    let mut d = 0f32;
    for (r, &m) in mid.iter().enumerate() {
        d += m * bf16_to_f32(bt[bt_index(o, r, mid.len())]);
    }
    d
}

/// Scalar reference: `out[o - c0] += scale · bt_column(o)` for the columns
/// `o` of `c0..c0 + out.len()`.
pub fn add_bt_product_ref(p: &BtProduct, out: &mut [f32]) {
    p.check(out);
    for (j, o) in out.iter_mut().enumerate() {
        *o += p.scale * bt_column(p.bt, p.c0 + j, p.mid);
    }
}

/// [`add_bt_product_ref`] on level `isa`.
pub fn add_bt_product_with(isa: Isa, p: &BtProduct, out: &mut [f32]) {
    p.check(out);
    match path(isa) {
        Path::Scalar => add_bt_product_ref(p, out),
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::lowrank::add_bt_product(t, p, out),
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => add_bt_product_ref(p, out),
    }
}

/// Asks the cache for the panels of columns `cols` of a packed `Bᵀ` of rank `rank` (a
/// hint, nothing on the scalar level): a decode step's row block calls it before its base
/// rows, so its `B` slice comes in from DRAM while the base product runs.
pub fn prefetch_bt_with(isa: Isa, bt: &[u16], rank: usize, cols: std::ops::Range<usize>) {
    match path(isa) {
        Path::Scalar => {}
        #[cfg(target_arch = "x86_64")]
        Path::Simd(t) => crate::arch::x86::lowrank::prefetch_bt(t, bt, rank, cols),
        // No ARM prefetch path (yet): the arguments are unused there.
        #[cfg(target_arch = "aarch64")]
        Path::Simd(_) => {
            let _ = (bt, rank, cols);
        }
    }
}

fn check(n: usize, nx: usize) {
    assert_eq!(n, nx, "lowrank: lengths {n} and {nx} differ");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::lowrank_test::{bits, config, f32s, span};
    use proptest::prelude::*;

    /// bf16 bits of values in -2..2 (the top half of an f32).
    fn bf16s(n: usize) -> impl Strategy<Value = Vec<u16>> {
        prop::collection::vec((-2f32..2.0).prop_map(|v| (v.to_bits() >> 16) as u16), n)
    }

    /// The same sums in f64 (independent of the references' order).
    fn dot_f64(a: &[u16], x: &[f32]) -> f64 {
        a.iter()
            .zip(x)
            .map(|(&p, &q)| bf16_to_f32(p) as f64 * q as f64)
            .sum()
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn dot_is_the_reference_bit_for_bit(
            (a, x) in (0usize..300).prop_flat_map(|n| (bf16s(n), f32s(n, 3.0))),
        ) {
            let want = dot_bf16_ref(&a, &x);
            let exact = dot_f64(&a, &x);
            prop_assert!((want as f64 - exact).abs() <= 1e-5 * (1.0 + a.len() as f64));
            for isa in Isa::available() {
                prop_assert_eq!(dot_bf16_with(isa, &a, &x).to_bits(), want.to_bits(), "{}", isa);
            }
        }

        #[test]
        fn bt_product_is_the_reference_bit_for_bit(
            (rank, n_out, b, mid, out) in (1usize..20, 1usize..150).prop_flat_map(|(r, n)| {
                (Just(r), Just(n), bf16s(r * n), f32s(r, 3.0), f32s(n, 3.0))
            }),
            cut in (0f64..1.0, 0f64..1.0),
            scale in -2f32..2.0,
        ) {
            // `B` row-major (`n_out × rank`), packed; columns c0..c1 of the product, as one
            // thread's share would take them.
            let bt = pack_bt(&b, n_out, rank);
            let (c0, c1) = span(cut, n_out);
            let mut want = out[c0..c1].to_vec();
            let product = BtProduct { bt: &bt, n_out, c0, mid: &mid, scale };
            add_bt_product_ref(&product, &mut want);
            for (j, w) in want.iter().enumerate() {
                let o = c0 + j;
                let d: f64 = (0..rank)
                    .map(|r| mid[r] as f64 * bf16_to_f32(b[o * rank + r]) as f64)
                    .sum();
                let exact = out[o] as f64 + scale as f64 * d;
                prop_assert!((*w as f64 - exact).abs() <= 1e-5 * (1.0 + rank as f64));
            }
            for isa in Isa::available() {
                let mut got = out[c0..c1].to_vec();
                add_bt_product_with(isa, &product, &mut got);
                prop_assert_eq!(bits(&got), bits(&want), "{}", isa);
            }
        }
    }

    #[test]
    #[should_panic(expected = "lowrank: columns")]
    fn columns_past_the_matrix_are_refused() {
        let mut out = [0f32; 4];
        let product = BtProduct {
            bt: &[0u16; 16],
            n_out: 4,
            c0: 1,
            mid: &[1.0, 1.0],
            scale: 1.0,
        };
        add_bt_product_with(Isa::active(), &product, &mut out);
    }
}
