//! Every level against the same body without target features (bit for bit), against the
//! scalar level (within the softmax `exp`'s difference) and against the definition in f64.

use super::*;
use half::f16;

struct Rng(u64);
impl Rng {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() + 1.0) / 2.0 * n as f32) as usize % n
    }
}

/// One case: `n_kv` KV heads of `head_dim`, `n_ctx` cached positions, a block of `bt`
/// query rows of `group` heads at `pos0` (row stride wider than the row, as in a fused
/// QKV buffer).
struct Case {
    head_dim: usize,
    n_kv: usize,
    group: usize,
    bt: usize,
    pos0: usize,
    window: usize,
    k: Vec<f16>,
    v: Vec<f16>,
    q: Vec<f32>,
}

/// The case's shape, for assertion messages.
impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let (hd, g, p, bt, w) = (self.head_dim, self.group, self.pos0, self.bt, self.window);
        write!(f, "hd {hd} group {g} pos0 {p} bt {bt} window {w}")
    }
}

impl Case {
    fn new(
        rng: &mut Rng,
        head_dim: usize,
        group: usize,
        bt: usize,
        pos0: usize,
        window: usize,
    ) -> Case {
        let (n_kv, n_ctx) = (2, pos0 + bt);
        let kv_dim = n_kv * head_dim;
        // Keys with a few large channels, as real roped keys have.
        let k = (0..n_ctx * kv_dim)
            .map(|i| f16::from_f32(rng.next() * if i % 17 == 0 { 4.0 } else { 1.0 }))
            .collect();
        let v = (0..n_ctx * kv_dim)
            .map(|_| f16::from_f32(rng.next()))
            .collect();
        let q = (0..bt * Self::stride(head_dim, group))
            .map(|_| rng.next() * 2.0)
            .collect();
        Case {
            head_dim,
            n_kv,
            group,
            bt,
            pos0,
            window,
            k,
            v,
            q,
        }
    }
    fn stride(head_dim: usize, group: usize) -> usize {
        (group + 3) * head_dim
    }
    fn rows(&self) -> F16Rows<'_> {
        F16Rows {
            k: &self.k,
            v: &self.v,
            stride: self.n_kv * self.head_dim,
        }
    }
    /// The block of KV head `g` (its query heads start one head into each row).
    fn block(&self, g: usize) -> QueryBlock<'_> {
        let hd = self.head_dim;
        QueryBlock {
            q: &self.q[hd..],
            q_stride: Self::stride(hd, self.group),
            len: self.group * hd,
            head_dim: hd,
            kv_off: g * hd,
            pos0: self.pos0,
            window: self.window,
            scale: 1.0 / (hd as f32).sqrt(),
        }
    }
    fn run(&self, g: usize, isa: Isa, s: &mut AttnScratch) -> Vec<f32> {
        let mut out = vec![f32::NAN; self.bt * self.group * self.head_dim];
        attend(&self.rows(), &self.block(g), &mut out, s, isa);
        out
    }
    /// Row `i`, head `h` of KV head `g`, straight from the definition in f64.
    fn naive(&self, g: usize, i: usize, h: usize) -> Vec<f64> {
        let (hd, a) = (self.head_dim, self.block(g));
        let pos = self.pos0 + i;
        let lo = if self.window > 0 {
            (pos + 1).saturating_sub(self.window)
        } else {
            0
        };
        let at = |x: &[f16], j: usize, d: usize| x[j * self.n_kv * hd + g * hd + d].to_f64();
        let q = &a.q[i * a.q_stride + h * hd..][..hd];
        let sc: Vec<f64> = (lo..=pos)
            .map(|j| {
                (0..hd)
                    .map(|d| q[d] as f64 * at(&self.k, j, d))
                    .sum::<f64>()
                    * a.scale as f64
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = sc.iter().map(|s| (s - m).exp()).sum();
        (0..hd)
            .map(|d| {
                (lo..=pos)
                    .zip(&sc)
                    .map(|(j, s)| (s - m).exp() / z * at(&self.v, j, d))
                    .sum()
            })
            .collect()
    }
}

/// Head sizes of the models (64, 128, 256) and odd ones (8; 80 = 2·32 + 16, past the
/// 32-wide register block); key counts off the 16-key tiles; windows shorter and longer
/// than the block; blocks of 1..9 query rows; groups of 1..4 heads.
fn cases() -> Vec<Case> {
    let mut rng = Rng(7);
    let mut v = vec![];
    for hd in [8, 64, 80, 128, 256] {
        for _ in 0..6 {
            let bt = 1 + rng.below(9);
            let pos0 = rng.below(45);
            let window = [0, 0, 1, 4, 13, 40][rng.below(6)];
            let group = 1 + rng.below(4);
            v.push(Case::new(&mut rng, hd, group, bt, pos0, window));
        }
    }
    // Exactly one and several whole tiles, and a long context past them.
    v.push(Case::new(&mut rng, 64, 3, 1, 15, 0));
    v.push(Case::new(&mut rng, 64, 2, 16, 16, 0));
    v.push(Case::new(&mut rng, 128, 2, 5, 90, 0));
    // Several online-softmax chunks (128 keys at absolute multiples of 128): a block that
    // crosses a chunk boundary, windows that start in an earlier chunk, one that ends inside
    // the block's first chunk, and a block longer than a chunk.
    v.push(Case::new(&mut rng, 64, 2, 9, 250, 0));
    v.push(Case::new(&mut rng, 64, 3, 7, 300, 200));
    v.push(Case::new(&mut rng, 128, 2, 9, 122, 0));
    v.push(Case::new(&mut rng, 80, 1, 5, 126, 130));
    v.push(Case::new(&mut rng, 64, 2, 140, 100, 60));
    v
}

/// Runs every case on every level for each of its KV groups, then
/// `check(case, isa, group, output, scratch)`.
fn for_each_run(mut check: impl FnMut(&Case, Isa, usize, &[f32], &mut AttnScratch)) {
    let mut s = AttnScratch::default();
    for c in cases() {
        for isa in Isa::available() {
            for g in 0..c.n_kv {
                let got = c.run(g, isa, &mut s);
                check(&c, isa, g, &got, &mut s);
            }
        }
    }
}

/// Whether `a` and `b` hold the same floats bit for bit.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Each level's dispatch equals the body compiled without target features, bit for bit
/// (same softmax level): the AVX2 build only vectorizes.
#[test]
fn every_level_equals_the_generic_body() {
    for_each_run(|c, isa, g, got, s| {
        let mut want = vec![f32::NAN; got.len()];
        attend_body(&c.rows(), &c.block(g), &mut want, s, super::ByRow);
        assert!(same_bits(got, &want), "{isa} {c}: not bit-identical");
    });
}

/// The generic body with [`super::FillTiles::PAIR_ROWS`] (query rows two at a time, as the
/// AVX-512 root runs it), so the paired arithmetic is checked on every machine.
#[derive(Clone, Copy)]
struct ByRowPaired;
impl super::FillTiles for ByRowPaired {
    const PAIR_ROWS: bool = true;
}

/// Rows taken two at a time give every row the bits it gets alone (odd groups, windows and
/// blocks of one row leave some rows unpaired: both kinds are in the cases).
#[test]
fn paired_rows_equal_rows_alone() {
    let mut s = AttnScratch::default();
    for c in cases() {
        for g in 0..c.n_kv {
            let n = c.bt * c.group * c.head_dim;
            let (mut alone, mut paired) = (vec![f32::NAN; n], vec![f32::NAN; n]);
            attend_body(&c.rows(), &c.block(g), &mut alone, &mut s, super::ByRow);
            attend_body(&c.rows(), &c.block(g), &mut paired, &mut s, ByRowPaired);
            assert!(same_bits(&alone, &paired), "{c}: paired rows differ");
        }
    }
}

/// Every level against the scalar one: only the softmax's `exp` differs (~2 ulp), so
/// the outputs (values in [-1, 1]) agree to 2e-6 (measured on AVX2: 1.8e-7).
#[test]
fn every_level_is_close_to_scalar() {
    let mut s = AttnScratch::default();
    let mut worst = 0f32;
    for c in cases() {
        for g in 0..c.n_kv {
            let want = c.run(g, Isa::Scalar, &mut s);
            for isa in Isa::available() {
                for (x, y) in c.run(g, isa, &mut s).iter().zip(&want) {
                    worst = worst.max((x - y).abs());
                }
            }
        }
    }
    eprintln!("max |level - scalar| = {worst}");
    assert!(worst < 2e-6, "max |level - scalar| = {worst}");
}

#[test]
fn matches_the_definition() {
    let (mut worst, mut sq, mut n) = (0f64, 0f64, 0f64);
    for_each_run(|c, isa, g, got, _| {
        let len = c.group * c.head_dim;
        for i in 0..c.bt {
            for h in 0..c.group {
                let want = c.naive(g, i, h);
                let row = &got[i * len + h * c.head_dim..][..c.head_dim];
                for (d, (x, y)) in row.iter().zip(&want).enumerate() {
                    let e = (*x as f64 - y).abs();
                    (worst, sq, n) = (worst.max(e), sq + e * e, n + 1.0);
                    assert!(
                        (*x as f64 - y).abs() < 1e-5,
                        "{isa} {c} row {i} head {h} dim {d}: {x} vs {y}"
                    );
                }
            }
        }
    });
    eprintln!(
        "|attention - definition|: max {worst:e}, rms {:e}",
        (sq / n).sqrt()
    );
}

/// A block of rows gives each row what it gets alone (decode = prefill, bit for bit).
#[test]
fn a_block_equals_its_rows_one_at_a_time() {
    let mut s = AttnScratch::default();
    for c in cases() {
        for isa in Isa::available() {
            let block = c.run(1, isa, &mut s);
            let len = c.group * c.head_dim;
            for i in 0..c.bt {
                let mut a = c.block(1);
                a.q = &a.q[i * a.q_stride..];
                a.pos0 += i;
                let mut one = vec![f32::NAN; len];
                attend(&c.rows(), &a, &mut one, &mut s, isa);
                let same = one
                    .iter()
                    .zip(&block[i * len..])
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{isa} hd {} row {i} of {}", c.head_dim, c.bt);
            }
        }
    }
}

/// The keys split at every segment boundary between two calls of `attend_segments`, then
/// merged: `attend`'s output bit for bit (decode splits a long cache's keys between
/// threads this way).
#[test]
fn segments_split_anywhere_equal_attend() {
    let mut s = AttnScratch::default();
    let mut cases = cases();
    // Long caches: several segments, windows starting in an earlier one.
    let mut rng = Rng(11);
    cases.push(Case::new(&mut rng, 64, 7, 1, 1500, 0));
    cases.push(Case::new(&mut rng, 64, 7, 3, 1100, 700));
    cases.push(Case::new(&mut rng, 128, 2, 9, 1020, 0));
    for c in cases {
        for isa in Isa::available() {
            let want = c.run(1, isa, &mut s);
            let a = c.block(1);
            let segs = super::segments(a.pos0, c.bt, a.window);
            let rows = c.bt * c.group;
            let n = segs.len();
            for cut in segs.start..=segs.end {
                let mut states = vec![super::RowState::EMPTY; n * rows];
                let mut outs = vec![f32::NAN; n * rows * c.head_dim];
                let (s0, s1) = states.split_at_mut((cut - segs.start) * rows);
                let (o0, o1) = outs.split_at_mut((cut - segs.start) * rows * c.head_dim);
                for (segs, states, outs) in [(segs.start..cut, s0, o0), (cut..segs.end, s1, o1)] {
                    if !segs.is_empty() {
                        let out = super::Segments { segs, states, outs };
                        super::attend_segments(&c.rows(), &a, out, &mut s, isa);
                    }
                }
                let mut got = vec![f32::NAN; want.len()];
                super::merge_rows(&states, &outs, &mut got, c.head_dim, isa);
                assert!(
                    same_bits(&got, &want),
                    "{isa} {c}: split at segment {cut} of {segs:?}"
                );
            }
        }
    }
}

/// The body's exp against `f32::exp` where softmax uses it (x <= 0): within 2 ulp of
/// `exp` (relative 2.4e-7) down to -87, exactly 0 below it and for -inf.
#[test]
fn exp_lane_is_exp() {
    use super::online::exp_lane;
    let mut worst = 0f64;
    let mut x = 0f32;
    while x > -87.0 {
        let want = (x as f64).exp();
        let got = exp_lane(x) as f64;
        worst = worst.max((got - want).abs() / want);
        x -= 0.001_37;
    }
    assert!(worst < 2.4e-7, "relative error {worst}");
    assert_eq!(exp_lane(0.0), 1.0);
    assert_eq!(exp_lane(-87.5), 0.0);
    assert_eq!(exp_lane(f32::NEG_INFINITY), 0.0);
}

#[test]
#[should_panic(expected = "not whole heads")]
fn a_row_that_is_not_whole_heads_is_refused() {
    let c = Case::new(&mut Rng(1), 8, 2, 1, 3, 0);
    let mut a = c.block(0);
    a.len = 12;
    let mut out = vec![0.0; 12];
    attend(
        &c.rows(),
        &a,
        &mut out,
        &mut AttnScratch::default(),
        Isa::Scalar,
    );
}
