//! Who computes which item of a job: each thread owns a contiguous share of the items
//! (the static split, so a thread keeps the weight panels it read last step) and takes
//! them one at a time from the front; a thread whose share is done takes the other
//! shares' items from the back. An item is claimed by exactly one thread (one
//! compare-and-swap on its share's `(front, back)` word), so a slow or preempted thread
//! delays a job by at most the item it holds, and a thread that never starts delays it
//! by nothing.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// One share: items `front..back` not yet claimed, packed as `front << 32 | back`.
#[derive(Default)]
pub(super) struct Share(AtomicU64);

fn pack(r: Range<usize>) -> u64 {
    debug_assert!(r.start <= r.end && r.end <= u32::MAX as usize);
    (r.start as u64) << 32 | r.end as u64
}

fn unpack(v: u64) -> Range<usize> {
    (v >> 32) as usize..(v & 0xffff_ffff) as usize
}

impl Share {
    pub(super) fn set(&self, items: Range<usize>) {
        self.0.store(pack(items), Ordering::Relaxed);
    }

    /// The first unclaimed item (the owner's end).
    pub(super) fn take_front(&self) -> Option<usize> {
        self.take(|r| (r.start, r.start + 1..r.end))
    }

    /// The last unclaimed item (a thief's end).
    pub(super) fn take_back(&self) -> Option<usize> {
        self.take(|r| (r.end - 1, r.start..r.end - 1))
    }

    fn take(&self, split: impl Fn(Range<usize>) -> (usize, Range<usize>)) -> Option<usize> {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            let r = unpack(cur);
            if r.is_empty() {
                return None;
            }
            let (item, rest) = split(r);
            match self
                .0
                .compare_exchange_weak(cur, pack(rest), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(item),
                Err(now) => cur = now,
            }
        }
    }
}

/// Thread `i`'s static share of `0..len` when thread `t` runs on a core of capacity
/// `weights[t]`: contiguous, in thread order, covering every item; with at least one item
/// per thread, one each and the rest in proportion to the weights (each share within one
/// item of its exact part), so a little core starts with fewer panels than a big one.
/// Fewer items than threads: the equal split (some shares empty).
pub(super) fn weighted_split(len: usize, weights: &[u64], i: usize) -> Range<usize> {
    let n = weights.len();
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    if len < n || total == 0 {
        return len * i / n..len * (i + 1) / n;
    }
    let rest = (len - n) as u128;
    let before: u128 = weights[..i].iter().map(|&w| w as u128).sum();
    let upto = before + weights[i] as u128;
    let start = i + (rest * before / total) as usize;
    let end = i + 1 + (rest * upto / total) as usize;
    start..end
}

/// Thread `me` of `shares.len()`: every item it claims, its own share first, then the
/// others' from the back, nearest thread first.
pub(super) fn claim_all(shares: &[Share], me: usize, mut f: impl FnMut(usize)) {
    let n = shares.len();
    while let Some(i) = shares[me].take_front() {
        f(i);
    }
    for k in 1..n {
        let victim = &shares[(me + k) % n];
        while let Some(i) = victim.take_back() {
            f(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn shares(n_items: usize, n: usize) -> Vec<Share> {
        (0..n)
            .map(|i| {
                let s = Share::default();
                s.set(n_items * i / n..n_items * (i + 1) / n);
                s
            })
            .collect()
    }

    #[test]
    fn owner_front_thief_back() {
        let s = shares(10, 2);
        assert_eq!(s[0].take_front(), Some(0));
        assert_eq!(s[0].take_back(), Some(4));
        assert_eq!(s[1].take_back(), Some(9));
        let mut mine = Vec::new();
        claim_all(&s, 0, |i| mine.push(i));
        assert_eq!(mine, [1, 2, 3, 8, 7, 6, 5]);
        assert_eq!(s[1].take_front(), None);
    }

    /// Weighted shares tile `0..len` in order, give each thread at least one item when
    /// there are enough, and are each within one item of `1 + (len - n) * w / total`.
    #[test]
    fn weighted_shares_cover_all_items_in_proportion() {
        let snapdragon = [1024, 887, 887, 887, 887, 887, 291, 291];
        for weights in [
            &[1024u64, 291][..],
            &[3, 1],
            &snapdragon,
            &[5, 5, 5],
            &[1, 0, 1],
        ] {
            let n = weights.len();
            let total: u64 = weights.iter().sum();
            for len in [0, 1, n - 1, n, n + 1, 17, 64, 1000, 1001] {
                let shares: Vec<Range<usize>> =
                    (0..n).map(|i| weighted_split(len, weights, i)).collect();
                assert_eq!(shares[0].start, 0);
                assert_eq!(shares[n - 1].end, len, "{weights:?} {len}");
                for w in shares.windows(2) {
                    assert_eq!(w[0].end, w[1].start, "{weights:?} {len}: {shares:?}");
                }
                if len < n {
                    continue;
                }
                for (s, &w) in shares.iter().zip(weights) {
                    let exact = 1.0 + (len - n) as f64 * w as f64 / total as f64;
                    assert!(!s.is_empty() && (s.len() as f64 - exact).abs() < 1.0 + 1e-9);
                }
            }
        }
        // 1000 items over a big core of 1024 and a little one of 291: 778 and 222.
        assert_eq!(weighted_split(1000, &[1024, 291], 0), 0..778);
        assert_eq!(weighted_split(1000, &[1024, 291], 1), 778..1000);
        // Equal weights: the equal split.
        assert_eq!(weighted_split(10, &[7, 7], 0), 0..5);
    }

    /// Threads racing over the same shares claim every item exactly once.
    #[test]
    fn racing_threads_claim_each_item_once() {
        for (n_items, n) in [(1, 2), (7, 3), (1000, 2), (1001, 4), (3, 8)] {
            let s = shares(n_items, n);
            let hits: Vec<AtomicUsize> = (0..n_items).map(|_| AtomicUsize::new(0)).collect();
            std::thread::scope(|sc| {
                for me in 0..n {
                    let (s, hits) = (&s, &hits);
                    sc.spawn(move || {
                        claim_all(s, me, |i| {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        })
                    });
                }
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }
}
