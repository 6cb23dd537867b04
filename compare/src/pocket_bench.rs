//! `pocket bench`: llama-bench's method on pocket's engine, printing llama-bench's rows.
//!
//! - `pp<N>`: one batch of N random tokens from an empty cache, logits for the last row.
//! - `tg<N>`: N single-token decodes from an empty cache.
//! - `pp<P>+tg<G>`: both, timed together.
//! - `... @ d<D>` (`-d`): the test after D random tokens in the cache.
//!
//! As in llama-bench (`tools/llama-bench/llama-bench.cpp`), each test starts with a warm-up
//! (the prompt once if it has one, one decoded token if it generates), and every repetition
//! starts from a cleared cache, or at depth from the cache holding the D tokens: they are
//! evaluated once, untimed, and each repetition cuts the cache back to them (llama-bench
//! restores a saved copy of the same state). Rows carry llama-bench's field names and values
//! (`model_type` as llama.cpp's `llama_model_desc`, `cpu_info` as its CPU description), plus
//! two fields of pocket's own, written in json/jsonl after `samples_ts`: `load_ms` (model
//! load, mapping to ready) and `peak_rss_bytes` (the process's peak RSS when the row ended).

use std::path::Path;
use std::time::Instant;

use pocket_model::gguf::Gguf;
use pocket_model::{Config, LoadOptions, Model, Op, Placement, Session, SessionOptions};

use crate::bench_row::BenchRow;
use crate::engine::Test;
use crate::receipt::utc_now;
use crate::Result;

/// What llama-bench reports about a model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// `llama_model_desc`: `<arch> <size> <ftype>` (`llama 256M Q4_1`).
    pub model_type: String,
    /// Bytes of tensor data in the file (`llama_model_size`).
    pub model_size: u64,
    /// Parameters (`llama_model_n_params`).
    pub model_n_params: u64,
}

/// llama.cpp's `llm_type` name for the architectures pocket runs (`load_arch_hparams` of
/// `src/models/<arch>.cpp`), `?B` where llama.cpp does not know the shape.
pub fn size_label(arch: &str, c: &Config) -> &'static str {
    let (n_layer, n_embd) = (c.n_layer, c.n_embd);
    match arch {
        "llama" => match n_layer {
            16 | 22 => "1B",
            26 | 28 => "3B",
            30 => "256M",
            32 if c.n_vocab == 49152 => "3B",
            32 if c.n_vocab < 40000 => "7B",
            32 | 36 => "8B",
            40 => "13B",
            48 => "34B",
            60 => "30B",
            80 if c.n_head == c.n_head_kv => "65B",
            80 => "70B",
            _ => "?B",
        },
        "qwen2" => match n_layer {
            24 if n_embd == 1024 => "0.5B",
            24 => "1B",
            28 if n_embd == 1536 => "1.5B",
            28 | 32 => "7B",
            36 => "3B",
            40 if c.n_head == 20 => "4B",
            40 => "13B",
            48 => "14B",
            64 => "32B",
            80 => "70B",
            _ => "?B",
        },
        "qwen3" => match n_layer {
            28 if n_embd == 1024 => "0.6B",
            28 => "1.7B",
            36 if n_embd == 2560 => "4B",
            36 => "8B",
            40 => "14B",
            64 => "32B",
            _ => "?B",
        },
        "gemma3" => match n_layer {
            18 => "270M",
            26 => "1B",
            32 => "8B",
            34 => "4B",
            48 => "12B",
            62 => "27B",
            _ => "?B",
        },
        _ => "?B",
    }
}

/// llama.cpp's `llama_ftype_name` for `general.file_type`.
pub fn ftype_name(ftype: u64) -> Option<&'static str> {
    Some(match ftype {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        21 => "Q2_K - Small",
        25 => "IQ4_NL - 4.5 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        32 => "BF16",
        _ => return None,
    })
}

impl ModelInfo {
    pub fn of<B: AsRef<[u8]>>(g: &Gguf<B>, c: &Config) -> ModelInfo {
        let arch = g
            .get_str("general.architecture")
            .map(|s| s.into_owned())
            .unwrap_or_else(|_| c.arch.name().to_string());
        let ftype = g
            .get_u64("general.file_type")
            .ok()
            .and_then(ftype_name)
            .unwrap_or("?");
        ModelInfo {
            model_type: format!("{arch} {} {ftype}", size_label(&arch, c)),
            model_size: g.tensors().iter().map(|t| t.size).sum(),
            model_n_params: g.tensors().iter().map(|t| t.n_elements()).sum(),
        }
    }
}

/// llama.cpp's CPU description: the CPU's brand string (`/proc/cpuinfo` model name).
pub fn cpu_info() -> String {
    crate::sysinfo::SysInfo::detect()
        .cpu_model
        .trim()
        .to_string()
}

/// pocket's build commit as llama-bench prints its own: 7 hex digits (`POCKET_COMMIT`
/// at build or run time overrides; `unknown` outside a git checkout).
pub fn build_commit() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let c = crate::sysinfo::pocket_commit(&repo);
    if c == "unknown" {
        return c;
    }
    let dirty = c.ends_with("-dirty");
    let hash: String = c.chars().take(7).collect();
    if dirty {
        format!("{hash}-dirty")
    } else {
        hash
    }
}

pub use crate::measure::self_peak_rss;

/// A loaded model ready to bench.
pub struct Loaded {
    pub model: Model,
    pub info: ModelInfo,
    pub filename: String,
    pub load_ms: f64,
}

/// Maps and loads `path`.
pub fn load(path: &Path) -> Result<Loaded> {
    if !path.is_file() {
        return Err(crate::Error::ModelNotFound(path.to_path_buf()));
    }
    let t0 = Instant::now();
    let model =
        Model::load_with(path, LoadOptions::default()).map_err(|source| crate::Error::Load {
            path: path.to_path_buf(),
            source,
        })?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let info = ModelInfo::of(model.gguf(), &model.config);
    Ok(Loaded {
        model,
        info,
        filename: path.display().to_string(),
        load_ms,
    })
}

/// llama-bench's default thread count: the physical cores.
pub fn default_threads() -> u32 {
    let si = crate::sysinfo::SysInfo::detect();
    si.physical_cores.unwrap_or(si.logical_cores).max(1)
}

/// A small deterministic generator for the random tokens of the tests.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as u32
    }
}

/// How a bench runs besides its test: thread placement and accounting.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BenchOptions {
    /// CPU mask (recorded in the row as `0x3`, `0x0` when none), strict pinning, poll
    /// level of the pool.
    pub placement: Placement,
    /// Per-operation accounting ([`crate::breakdown`]); the row gets a `breakdown` field.
    pub breakdown: bool,
    /// Read bandwidth to set the matrix operations' GB/s against (with `breakdown`).
    pub bandwidth: Option<crate::bandwidth::Bandwidth>,
}

/// The greedy pick the breakdown's "sampling" row times (pocket bench itself feeds random
/// tokens, as llama-bench does).
fn argmax(logits: &[f32]) -> u32 {
    pocket_model::sample_basic::argmax(logits)
}

/// The depth is evaluated in batches of llama.cpp's ubatch size, so that filling a deep
/// cache needs no more activation memory than a pp512.
const DEPTH_BATCH: usize = 512;

/// Refuses `test` on `m` when its depth, prompt and generated tokens do not fit the
/// model's context (`context_length`).
pub fn check_fits(m: &Loaded, test: Test) -> Result<()> {
    fits(test, &m.filename, m.model.config.n_ctx_train)
}

/// [`check_fits`] for every test of a plan on the model file at `path`, reading only its
/// header (`pocket compare` checks its plan before running anything, and stays small).
pub fn check_file_fits(path: &Path, tests: &[Test]) -> Result<()> {
    let g = Gguf::open(path).map_err(|e| crate::Error::Load {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let c = Config::from_gguf(&g).map_err(|e| crate::Error::Load {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let name = path.display().to_string();
    tests
        .iter()
        .try_for_each(|&t| fits(t, &name, c.n_ctx_train))
}

fn fits(test: Test, model: &str, n_ctx: usize) -> Result<()> {
    if test.positions() > n_ctx as u64 {
        return Err(crate::Error::BeyondContext {
            test,
            positions: test.positions(),
            model: model.to_string(),
            n_ctx,
        });
    }
    Ok(())
}

/// One test's row, and how many positions its session's cache held when the last
/// repetition ended (the depth plus the test's tokens).
#[derive(Debug, Clone)]
pub struct Measured {
    pub row: BenchRow,
    pub positions: usize,
}

/// Runs `test` `reps` times on `m` with `threads` threads and returns its row.
pub fn bench_test(m: &Loaded, test: Test, threads: u32, reps: u32) -> Result<BenchRow> {
    bench_test_with(m, test, threads, reps, &BenchOptions::default())
}

/// [`bench_test`] with placement and accounting options.
pub fn bench_test_with(
    m: &Loaded,
    test: Test,
    threads: u32,
    reps: u32,
    o: &BenchOptions,
) -> Result<BenchRow> {
    measure(m, test, threads, reps, o).map(|r| r.row)
}

/// [`bench_test_with`], also reporting the cache positions the session used.
pub fn measure(
    m: &Loaded,
    test: Test,
    threads: u32,
    reps: u32,
    o: &BenchOptions,
) -> Result<Measured> {
    measure_each(m, test, threads, reps, o, |_| {})
}

/// [`measure`], calling `after(ns)` after each repetition with its time (nothing of the
/// call is timed: `pocket bench --roof` probes the read bandwidth there).
pub fn measure_each(
    m: &Loaded,
    test: Test,
    threads: u32,
    reps: u32,
    o: &BenchOptions,
    mut after: impl FnMut(u64),
) -> Result<Measured> {
    if reps == 0 {
        return Err(crate::Error::NoRepetitions);
    }
    let mut run = TestRun::new(m, test, threads, o)?;
    for _ in 0..reps {
        run.rep()?;
        after(*run.samples_ns.last().expect("a repetition was timed"));
    }
    Ok(run.finish(o))
}

/// [`measure`] on several models at once, their repetitions interleaved in one process
/// (repetition 1 of each, then 2, …, the order reversed every other round), so that a
/// machine whose speed drifts between seconds or between processes (a shared host) slows
/// all of them alike and their ratio holds. Each model has its own session and pool; a
/// pool at rest parks after its spin window (~1 ms), a small fraction of a repetition.
pub fn measure_interleaved(
    models: &[&Loaded],
    test: Test,
    threads: u32,
    reps: u32,
    o: &BenchOptions,
) -> Result<Vec<Measured>> {
    if reps == 0 {
        return Err(crate::Error::NoRepetitions);
    }
    let mut runs = models
        .iter()
        .map(|m| TestRun::new(m, test, threads, o))
        .collect::<Result<Vec<_>>>()?;
    for r in 0..reps {
        let n = runs.len();
        for i in 0..n {
            let k = if r % 2 == 0 { i } else { n - 1 - i };
            runs[k].rep()?;
        }
    }
    Ok(runs.into_iter().map(|r| r.finish(o)).collect())
}

/// One test on one model: a session warmed up and at the test's depth, timing
/// repetitions ([`Self::rep`]) until [`Self::finish`] makes its row.
struct TestRun<'m> {
    m: &'m Loaded,
    test: Test,
    threads: u32,
    session: Session<'m>,
    rng: Rng,
    /// The first token a generation feeds (BOS where the model adds it).
    first_gen: Option<u32>,
    samples_ns: Vec<u64>,
}

impl<'m> TestRun<'m> {
    fn new(m: &'m Loaded, test: Test, threads: u32, o: &BenchOptions) -> Result<TestRun<'m>> {
        check_fits(m, test)?;
        let (n_prompt, n_gen) = (test.n_prompt as usize, test.n_gen as usize);
        let n_depth = test.n_depth as usize;
        let session = Session::new(
            &m.model,
            SessionOptions {
                n_ctx: (n_depth + n_prompt + n_gen + 1).max(16),
                n_threads: threads.max(1) as usize,
                pin: true,
                placement: o.placement,
                ..Default::default()
            },
        );
        let first_gen = m
            .model
            .tokenizer
            .bos()
            .filter(|_| m.model.tokenizer.add_bos());
        let mut run = TestRun {
            m,
            test,
            threads,
            session,
            rng: Rng(0x9E37_79B9_7F4A_7C15
                ^ (n_depth as u64) << 40
                ^ (n_prompt as u64) << 20
                ^ n_gen as u64),
            first_gen,
            samples_ns: Vec::new(),
        };
        // Warm-up, as llama-bench: the prompt once, one generated token.
        if n_prompt > 0 {
            run.tokens(n_prompt, 0)?;
        }
        if n_gen > 0 {
            run.session.clear();
            run.tokens(0, 1)?;
        }
        // The depth, once, untimed: random tokens (the first one BOS where the model adds
        // it, as llama-bench's prompts), in ubatch-sized pieces.
        run.session.clear();
        if n_depth > 0 {
            let n_vocab = m.model.config.n_vocab;
            let mut depth: Vec<u32> = (0..n_depth).map(|_| run.rng.below(n_vocab)).collect();
            if let Some(bos) = first_gen {
                depth[0] = bos;
            }
            for piece in depth.chunks(DEPTH_BATCH) {
                run.session.prefill(piece)?;
            }
        }
        // Accounting starts with the timed repetitions.
        run.session.set_breakdown(o.breakdown);
        Ok(run)
    }

    /// With the breakdown on, each forward's logits also go through a timed argmax (the
    /// "sampling" row); the token fed next stays random.
    fn sample(&mut self) {
        let t = Instant::now();
        std::hint::black_box(argmax(self.session.last_logits()));
        let ns = t.elapsed().as_nanos() as u64;
        if let Some(b) = self.session.breakdown_mut() {
            b.add(Op::Sampling, ns);
        }
    }

    /// A prompt of `n_prompt` random tokens, then `n_gen` decodes.
    fn tokens(&mut self, n_prompt: usize, n_gen: usize) -> Result<()> {
        let profiled = self.session.breakdown().is_some();
        let n_vocab = self.m.model.config.n_vocab;
        if n_prompt > 0 {
            let tokens: Vec<u32> = (0..n_prompt).map(|_| self.rng.below(n_vocab)).collect();
            self.session.prefill(&tokens)?;
            if profiled {
                self.sample();
            }
        }
        let mut tok = self.first_gen.unwrap_or_else(|| self.rng.below(n_vocab));
        for _ in 0..n_gen {
            self.session.decode(tok)?;
            if profiled {
                self.sample();
            }
            tok = self.rng.below(n_vocab);
        }
        Ok(())
    }

    /// One timed repetition, from the depth's tokens (an empty cache at depth 0).
    fn rep(&mut self) -> Result<()> {
        self.session.truncate(self.test.n_depth as usize);
        let t = Instant::now();
        self.tokens(self.test.n_prompt as usize, self.test.n_gen as usize)?;
        self.samples_ns.push(t.elapsed().as_nanos().max(1) as u64);
        Ok(())
    }

    fn finish(self, o: &BenchOptions) -> Measured {
        let (m, test, threads) = (self.m, self.test, self.threads);
        let mut row = BenchRow::cpu_defaults();
        row.build_commit = build_commit();
        row.cpu_info = cpu_info();
        row.model_filename = m.filename.clone();
        row.model_type = m.info.model_type.clone();
        row.model_size = m.info.model_size;
        row.model_n_params = m.info.model_n_params;
        row.n_threads = threads as i64;
        row.cpu_mask = crate::placement::CpuMask::from(o.placement.cpu_mask).to_string();
        row.cpu_strict = o.placement.strict;
        row.poll = i64::from(o.placement.poll);
        row.n_prompt = test.n_prompt as i64;
        row.n_gen = test.n_gen as i64;
        row.n_depth = test.n_depth as i64;
        row.test_time = utc_now();
        row.set_samples_ns(self.samples_ns);
        row.extra.insert(
            "load_ms".into(),
            serde_json::json!((m.load_ms * 1e3).round() / 1e3),
        );
        row.extra
            .insert("peak_rss_bytes".into(), serde_json::json!(self_peak_rss()));
        if let Some(b) = self.session.breakdown() {
            let total_ns: u64 = row.samples_ns.iter().sum();
            let report = crate::breakdown::Report::new(
                b,
                total_ns,
                o.bandwidth.as_ref().map(|bw| bw.for_threads(threads)),
            );
            row.extra.insert(
                "breakdown".into(),
                serde_json::to_value(&report).expect("breakdown serializes"),
            );
        }
        Measured {
            row,
            positions: self.session.pos(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ftype_names_are_llama_cpps() {
        assert_eq!(ftype_name(3), Some("Q4_1"));
        assert_eq!(ftype_name(15), Some("Q4_K - Medium"));
        assert_eq!(ftype_name(7), Some("Q8_0"));
        assert_eq!(ftype_name(999), None);
    }
}
