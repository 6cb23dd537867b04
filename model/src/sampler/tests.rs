use super::*;
use crate::sample_basic::argmax;

fn params(temp: f32, top_k: i32, top_p: f32, min_p: f32) -> SamplerParams {
    SamplerParams {
        temp,
        top_k,
        top_p,
        min_p,
        seed: Some(1234),
        ..Default::default()
    }
}

/// Pseudo-random logits over a big vocabulary.
fn big_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Xoshiro256pp::new(seed);
    (0..n).map(|_| (r.next_f64() as f32 - 0.5) * 20.0).collect()
}

fn ids(s: &Sampler) -> Vec<u32> {
    let mut v: Vec<u32> = s.candidates().iter().map(|c| c.id).collect();
    v.sort_unstable();
    v
}

#[test]
fn defaults_are_llama_cpp() {
    let p = SamplerParams::default();
    assert_eq!((p.temp, p.top_k, p.top_p, p.min_p), (0.8, 40, 0.95, 0.05));
    assert_eq!((p.repeat_penalty, p.repeat_last_n), (1.0, 64));
    assert_eq!(
        (p.presence_penalty, p.frequency_penalty, p.seed),
        (0.0, 0.0, None)
    );
    // An unset seed is random but reported.
    let a = Sampler::new(p.clone());
    let b = Sampler::new(p);
    assert_ne!(a.seed(), b.seed());
}

#[test]
fn greedy_is_argmax() {
    let mut s = Sampler::new(SamplerParams::greedy());
    for seed in 0..20 {
        let l = big_logits(151_936, seed);
        assert_eq!(s.sample(&l), argmax(&l));
    }
    // Ties: the first maximum wins, as in llama.cpp.
    assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0]), 1);
    let mut s = Sampler::new(params(-1.0, 40, 0.95, 0.05));
    assert_eq!(s.sample(&[0.0, -1.0, 5.0]), 2);
}

#[test]
fn top_k_1_is_greedy() {
    let mut s = Sampler::new(params(1.5, 1, 1.0, 0.0));
    for seed in 0..20 {
        let l = big_logits(50_000, seed);
        assert_eq!(s.sample(&l), argmax(&l));
    }
}

#[test]
fn same_seed_same_tokens() {
    let run = |seed: u64| -> Vec<u32> {
        let mut p = params(1.0, 0, 0.98, 0.0);
        p.seed = Some(seed);
        p.repeat_penalty = 1.1;
        let mut s = Sampler::new(p);
        (0..50)
            .map(|i| {
                let t = s.sample(&big_logits(32_000, i % 7));
                s.accept(t);
                t
            })
            .collect()
    };
    let a = run(42);
    assert_eq!(a, run(42));
    assert_ne!(a, run(43));
    // reset() restarts the stream.
    let mut p = params(1.0, 0, 1.0, 0.0);
    p.seed = Some(7);
    let mut s = Sampler::new(p);
    let l = big_logits(1000, 3);
    let first: Vec<u32> = (0..10).map(|_| s.sample(&l)).collect();
    s.reset();
    let again: Vec<u32> = (0..10).map(|_| s.sample(&l)).collect();
    assert_eq!(first, again);
}

/// Pearson chi-square of many draws against the softmax of known logits.
#[test]
fn draws_follow_the_distribution() {
    let probs = [0.4f64, 0.3, 0.15, 0.1, 0.05];
    let temp = 0.7f32;
    // logits whose softmax at `temp` is `probs`.
    let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32 * temp).collect();
    let mut s = Sampler::new(params(temp, 0, 1.0, 0.0));
    let n = 100_000;
    let mut hist = [0u32; 5];
    for _ in 0..n {
        hist[s.sample(&logits) as usize] += 1;
    }
    let chi2: f64 = probs
        .iter()
        .zip(hist)
        .map(|(p, o)| {
            let e = p * n as f64;
            (o as f64 - e).powi(2) / e
        })
        .sum();
    // 4 degrees of freedom: P(chi2 > 18.47) = 0.001.
    assert!(chi2 < 18.47, "chi2 = {chi2}, histogram {hist:?}");
}

#[test]
#[allow(clippy::neg_multiply)] // spelled out as llama.cpp's formula
fn penalties_match_llama_cpp_formula() {
    let mut p = params(0.0, 0, 1.0, 0.0);
    p.repeat_penalty = 1.5;
    p.frequency_penalty = 0.25;
    p.presence_penalty = 0.5;
    p.repeat_last_n = 4;
    let mut s = Sampler::new(p);
    // Window of 4 after these: [1, 2, 2, 3] (token 0 fell out).
    for t in [0, 1, 2, 2, 3] {
        s.accept(t);
    }
    let logits = [2.0f32, 3.0, -1.0, 0.0, 4.0];
    s.sample(&logits);
    let got: Vec<f32> = {
        let mut c = s.candidates().to_vec();
        c.sort_by_key(|c| c.id);
        c.iter().map(|c| c.logit).collect()
    };
    let want = [
        2.0,                    // 0: left the window
        3.0 / 1.5 - 0.25 - 0.5, // 1: count 1, positive → divide
        -1.0 * 1.5 - 0.5 - 0.5, // 2: count 2, negative → multiply
        0.0 * 1.5 - 0.25 - 0.5, // 3: count 1, zero → multiply
        4.0,                    // 4: never seen
    ];
    assert_eq!(got, want);

    // The penalty moves the greedy choice off a repeated token.
    let mut p = params(0.0, 40, 0.95, 0.05);
    p.repeat_penalty = 2.0;
    let mut s = Sampler::new(p);
    assert_eq!(s.sample(&[1.0, 1.5]), 1);
    s.accept(1);
    assert_eq!(s.sample(&[1.0, 1.5]), 0);

    // Disabled by repeat_last_n = 0.
    let mut p = params(0.0, 0, 1.0, 0.0);
    p.repeat_penalty = 2.0;
    p.repeat_last_n = 0;
    let mut s = Sampler::new(p);
    s.accept(1);
    assert_eq!(s.sample(&[1.0, 1.5]), 1);
}

#[test]
fn min_p_keeps_expected_set() {
    // p_i / p_max = exp(l_i - l_max): 1, e^-1 (0.37), e^-2 (0.135), e^-3 (0.05-), e^-4.
    let logits = [0.0f32, -1.0, -4.0, -2.0, -3.0];
    // temp 1, no top-k/top-p, min-p 0.1 → {0, 1, 3}.
    let mut s = Sampler::new(params(1.0, 0, 1.0, 0.1));
    s.sample(&logits);
    assert_eq!(ids(&s), vec![0, 1, 3]);
    // Sorted path (after top-k) gives the same set.
    let mut s = Sampler::new(params(1.0, 5, 1.0, 0.1));
    s.sample(&logits);
    assert_eq!(ids(&s), vec![0, 1, 3]);
    // min-p 0.4 → only the max.
    let mut s = Sampler::new(params(1.0, 0, 1.0, 0.4));
    s.sample(&logits);
    assert_eq!(ids(&s), vec![0]);
}

#[test]
fn top_p_keeps_expected_set() {
    // probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625
    let probs = [0.125f32, 0.5, 0.0625, 0.25, 0.0625];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    for (top_p, want) in [
        (0.5, vec![1]),
        (0.6, vec![1, 3]),
        (0.75, vec![1, 3]),
        (0.8, vec![0, 1, 3]),
        (0.9, vec![0, 1, 2, 3]),
    ] {
        let mut s = Sampler::new(params(1.0, 0, top_p, 0.0));
        s.sample(&logits);
        assert_eq!(ids(&s), want, "top_p {top_p}");
        // Survivors are sorted descending.
        let c = s.candidates();
        assert!(c.windows(2).all(|w| w[0].logit >= w[1].logit));
    }
}

#[test]
fn top_p_on_a_big_vocabulary_matches_a_full_sort() {
    // (seed, logit scale, top_p): nuclei inside and beyond the first 256 candidates.
    for (seed, scale, top_p) in [(1u64, 1.0f32, 0.5f32), (2, 1.0, 0.95), (3, 0.3, 0.9)] {
        let l: Vec<f32> = big_logits(151_936, seed)
            .iter()
            .map(|x| x * scale)
            .collect();
        let mut s = Sampler::new(params(1.0, 0, top_p, 0.0));
        s.sample(&l);
        let mut sorted = l.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let max = sorted[0];
        // f32 sums, like llama.cpp (and pocket); only the normalizer's order differs.
        let sum: f32 = l.iter().map(|x| (x - max).exp()).sum();
        let mut cum = 0.0f32;
        let mut n = 0;
        for x in &sorted {
            cum += (x - max).exp() / sum;
            n += 1;
            if cum >= top_p {
                break;
            }
        }
        // The survivors are exactly the best ones, in order; their number agrees up to
        // f32 rounding of the cumulative sum.
        let got: Vec<f32> = s.candidates().iter().map(|c| c.logit).collect();
        assert_eq!(got[..], sorted[..got.len()], "seed {seed}");
        assert!(
            got.len().abs_diff(n) <= 2 + n / 1000,
            "seed {seed} top_p {top_p}: kept {} want {n}",
            got.len()
        );
    }
}

#[test]
fn top_k_keeps_the_k_best_sorted() {
    let l = big_logits(151_936, 9);
    let mut s = Sampler::new(params(1.0, 40, 1.0, 0.0));
    s.sample(&l);
    let c = s.candidates();
    assert_eq!(c.len(), 40);
    assert!(c.windows(2).all(|w| w[0].logit >= w[1].logit));
    let mut sorted = l.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    // Temperature 1 leaves logits unchanged.
    assert_eq!(c.iter().map(|c| c.logit).collect::<Vec<_>>(), sorted[..40]);
}

#[test]
fn default_chain_samples_only_plausible_tokens() {
    let mut s = Sampler::new(SamplerParams {
        seed: Some(5),
        ..Default::default()
    });
    let mut l = vec![-10.0f32; 1000];
    l[10] = 5.0;
    l[20] = 4.5;
    l[30] = 0.0; // p/p_max = e^-5 < 0.05 → cut by min-p
    for _ in 0..200 {
        let t = s.sample(&l);
        assert!(t == 10 || t == 20, "{t}");
    }
}

#[test]
fn greedy_biased_fast_path_picks_what_the_chain_picks() {
    // Biases on the argmax, beside it, on id 0, repeated, outside the vocabulary; ties;
    // -inf on the best tokens (ignore_eos); NaN entries.
    let mut l = big_logits(5000, 3);
    let top = argmax(&l);
    l[17] = l[top as usize]; // a tie after the max (the first stays)
    l[4000] = f32::NAN;
    let biases: Vec<Vec<(u32, f32)>> = vec![
        vec![],
        vec![(top, f32::NEG_INFINITY)],
        vec![(top, f32::NEG_INFINITY), (17, f32::NEG_INFINITY)],
        vec![(0, 100.0)],
        vec![(0, f32::NEG_INFINITY), (4999, 50.0), (9999, 1e9)],
        vec![(12, 30.0), (12, -30.0), (13, 0.5), (13, 40.0)],
        vec![(top, -0.0), (17, 1e-7)],
    ];
    for bias in &biases {
        let mut masked = l.clone();
        for &(id, b) in bias {
            if let Some(x) = masked.get_mut(id as usize) {
                *x += b;
            }
        }
        let mut chain = Sampler::new(SamplerParams {
            seed: Some(1),
            ..SamplerParams::greedy()
        });
        let mut fast = Sampler::new(SamplerParams {
            seed: Some(1),
            ..SamplerParams::greedy()
        });
        let want = chain.sample(&masked);
        assert_eq!(
            fast.sample_greedy_biased(&l, bias),
            Some(want),
            "bias {bias:?}"
        );
        // The PRNG stream stays aligned with the chain's.
        assert_eq!(chain.rng.next_f64(), fast.rng.next_f64());
    }
    // Outside a plain greedy pick it declines.
    let mut hot = Sampler::new(params(0.8, 40, 0.95, 0.05));
    assert_eq!(hot.sample_greedy_biased(&l, &[]), None);
    let mut pen = Sampler::new(SamplerParams {
        repeat_penalty: 1.1,
        ..SamplerParams::greedy()
    });
    assert_eq!(pen.sample_greedy_biased(&l, &[]), None);
}

#[test]
fn lane_argmax_is_the_first_strict_maximum() {
    // Few distinct values so ties across lanes are common; NaN and infinities; every
    // length around the 16-lane width; starting bests below, equal to and above the data.
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let pool = [
        f32::NAN,
        f32::NEG_INFINITY,
        -1.0,
        -0.0,
        0.0,
        2.0,
        3.0,
        f32::INFINITY,
    ];
    for n in 0..70 {
        for _ in 0..40 {
            let xs: Vec<f32> = (0..n).map(|_| pool[next() % pool.len()]).collect();
            for start in [
                (usize::MAX, f32::NEG_INFINITY),
                (7, 2.0),
                (9, f32::NAN),
                (3, 0.0),
            ] {
                let mut want = start;
                for (i, &x) in xs.iter().enumerate() {
                    if x > want.1 {
                        want = (i, x);
                    }
                }
                let got = argmax_from(&xs, 0..n, start);
                assert_eq!(got.0, want.0, "{xs:?} from {start:?}");
                assert!(got.1 == want.1 || (got.1.is_nan() && want.1.is_nan()));
            }
        }
    }
}
