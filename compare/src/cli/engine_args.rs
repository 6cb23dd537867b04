//! The flags every command that runs a model shares (`run`, `chat`, `perplexity`, and a
//! server next): [`ModelArgs`] (model, threads, context, [`CacheArgs`], [`PlacementArgs`]),
//! flattened into each command with `#[command(flatten)]`. `bench` and `compare` take lists
//! of models and threads instead, and flatten [`PlacementArgs`] and [`TestLists`].
//!
//! Every value is parsed by clap into its type; a bad one is clap's error naming the flag.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use pocket_model::{
    CoreClasses, CpuClass, KvType, LoadOptions, Numerics, Placement, SessionOptions,
};

use super::CliError;
use crate::engine::Test;
use crate::placement::CpuMask;

/// The model and the engine's settings (llama.cpp's `-m`, `-t`, `-c`, `-ctk`, `-ctv`,
/// `-C`, `--cpu-strict`, `--poll`). A command with another context default or help sets
/// it with `#[command(mut_arg("ctx_size", ...))]`.
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// The GGUF model.
    #[arg(short, long)]
    pub model: PathBuf,
    /// Threads (default: all cores).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// Context size (prompt + generated tokens).
    #[arg(short = 'c', long, default_value_t = 2048)]
    pub ctx_size: usize,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub placement: PlacementArgs,
    #[command(flatten)]
    pub lora: LoraArgs,
}

impl ModelArgs {
    /// Loads the model for these options, with its LoRA adapters attached.
    pub fn load_model(&self) -> Result<pocket_model::Model, crate::Error> {
        let mut model = pocket_model::Model::load_with(&self.model, self.load_options())?;
        self.lora.attach(&mut model)?;
        Ok(model)
    }

    /// How to load the model for these options.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            numerics: self.cache.numerics.into(),
            ..Default::default()
        }
    }

    /// Session options for `n_ctx` tokens (usually `ctx_size`), pinned threads; without
    /// -t, a `--cpu-class`'s CPU count or all cores. Fails when `--cpu-class` and
    /// `--cpu-mask` share no CPU.
    pub fn session_options(&self, n_ctx: usize) -> Result<SessionOptions, CliError> {
        let (placement, class_threads) = self.placement.resolve()?;
        let mut o = SessionOptions {
            n_ctx,
            pin: true,
            type_k: self.cache.type_k.into(),
            type_v: self.cache.type_v.into(),
            placement,
            ..Default::default()
        };
        if let Some(t) = self.threads.or(class_threads) {
            o.n_threads = t.max(1);
        }
        Ok(o)
    }
}

// --- LoRA (model/src/lora) ---

/// LoRA adapters in llama.cpp's GGUF adapter format, with llama.cpp's flags.
#[derive(Args, Clone, Debug, Default)]
pub struct LoraArgs {
    /// LoRA adapter(s) at scale 1; repeat or separate with commas.
    #[arg(long = "lora", value_name = "FILE", value_delimiter = ',')]
    pub lora: Vec<PathBuf>,
    /// LoRA adapter(s) with a user scale, FILE:SCALE; repeat or separate with commas.
    #[arg(long = "lora-scaled", value_name = "FILE:SCALE", value_delimiter = ',',
          value_parser = parse_lora_scaled)]
    pub lora_scaled: Vec<(PathBuf, f32)>,
    /// Fold the adapters into the weights at load (dequantize, add, requantize, pack): no
    /// adapter work per token, no switching; adapted matrices coarser than 8 bits become
    /// Q8_0 (1.7x Q4_1's bytes: slower decode than run-time application on 4-bit bases).
    #[arg(long)]
    pub lora_merge: bool,
}

fn parse_lora_scaled(s: &str) -> Result<(PathBuf, f32), pocket_model::lora::LoraError> {
    pocket_model::lora::load::parse_scaled(s)
}

impl LoraArgs {
    /// `--lora` files (scale 1), then `--lora-scaled` ones.
    pub fn specs(&self) -> Vec<(PathBuf, f32)> {
        let ones = self.lora.iter().map(|p| (p.clone(), 1.0));
        ones.chain(self.lora_scaled.iter().cloned()).collect()
    }

    /// Loads the adapters and attaches them to `model` (its sessions' default set).
    pub fn attach(
        &self,
        model: &mut pocket_model::Model,
    ) -> Result<Vec<std::sync::Arc<pocket_model::lora::LoraAdapter>>, pocket_model::lora::LoraError>
    {
        let specs = self.specs();
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        let loaded = pocket_model::lora::attach(model, &specs, self.lora_merge)?;
        for (a, (_, s)) in loaded.iter().zip(&specs) {
            eprintln!(
                "lora: {} (alpha {}, {} matrices, {:.1} MiB) at scale {s}{}",
                a.name,
                a.alpha,
                a.n_pairs(),
                a.bytes() as f64 / (1 << 20) as f64,
                if self.lora_merge { ", merged" } else { "" }
            );
        }
        Ok(loaded)
    }
}

/// KV cache element types, llama.cpp's `-ctk` / `-ctv` (rewritten to the long forms before
/// parsing), and the arithmetic.
#[derive(Args, Clone, Debug)]
#[command(hide_possible_values = true)] // the docs list them
pub struct CacheArgs {
    /// KV cache type of keys (-ctk): f16, q8_0 or f32.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16")]
    pub type_k: KvTypeArg,
    /// KV cache type of values (-ctv): f16, q8_0 or f32.
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16")]
    pub type_v: KvTypeArg,
    /// Arithmetic: `fast` (pocket's kernels) or `ggml` (llama.cpp's x86 CPU arithmetic bit
    /// for bit: the same logits, greedy text and perplexity as llama.cpp; scalar and much
    /// slower; weights Q4_0/Q4_1/Q8_0/Q5_0/Q4_K/Q6_K, f16 KV cache).
    #[arg(long, value_name = "MODE", default_value = "fast")]
    pub numerics: NumericsArg,
}

/// A KV cache element type as llama.cpp spells it.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvTypeArg {
    F16,
    #[value(name = "q8_0")]
    Q8_0,
    F32,
}

impl From<KvTypeArg> for KvType {
    fn from(t: KvTypeArg) -> KvType {
        match t {
            KvTypeArg::F16 => KvType::F16,
            KvTypeArg::Q8_0 => KvType::Q8_0,
            KvTypeArg::F32 => KvType::F32,
        }
    }
}

/// `--numerics`: pocket's kernels or llama.cpp's arithmetic.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumericsArg {
    Fast,
    Ggml,
}

impl From<NumericsArg> for Numerics {
    fn from(n: NumericsArg) -> Numerics {
        match n {
            NumericsArg::Fast => Numerics::Fast,
            NumericsArg::Ggml => Numerics::Ggml,
        }
    }
}

/// Where the pool's threads run and how they wait: llama-bench's and llama-cli's
/// `-C/--cpu-mask`, `--cpu-strict`, `--poll`.
#[derive(Args, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacementArgs {
    /// CPUs the pool may use, a hexadecimal mask as llama-bench's (`0x3`); default: the
    /// process's CPUs, one thread pinned per core.
    #[arg(short = 'C', long = "cpu-mask", value_name = "HEX")]
    pub cpu_mask: Option<CpuMask>,
    /// 1: each thread pinned to its own CPU of the mask, in order (llama-bench's
    /// --cpu-strict); 0: threads float over the mask.
    #[arg(long = "cpu-strict", value_name = "0|1", default_value = "0", action = clap::ArgAction::Set,
        value_parser = parse_01)]
    pub cpu_strict: bool,
    /// How long idle pool threads spin before parking, 0..100 (llama-bench's --poll):
    /// 0 parks at once, 50 spins 2^15 rounds, 100 twice as long.
    #[arg(long = "poll", value_name = "0..100", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub poll: u32,
    /// Core classes the pool may use where cores differ (detected from Linux's
    /// cpu_capacity or max frequency, macOS's performance levels): `prime` the fastest
    /// class only, `big` every class but the slowest (no efficiency cores), `all` every
    /// CPU. A class is a CPU mask (intersected with --cpu-mask) and the default -t is its
    /// CPU count; macOS numbers no CPUs, so there it sets -t only. One class: every CPU.
    #[arg(
        long = "cpu-class",
        value_name = "prime|big|all",
        default_value = "all"
    )]
    pub cpu_class: CpuClassArg,
}

/// `--cpu-class`.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuClassArg {
    Prime,
    Big,
    #[default]
    All,
}

impl From<CpuClassArg> for CpuClass {
    fn from(c: CpuClassArg) -> CpuClass {
        match c {
            CpuClassArg::Prime => CpuClass::Prime,
            CpuClassArg::Big => CpuClass::Big,
            CpuClassArg::All => CpuClass::All,
        }
    }
}

impl PlacementArgs {
    /// The engine's placement (mask 0: the process's CPUs), on this machine's classes.
    pub fn placement(&self) -> Result<Placement, CliError> {
        Ok(self.resolve()?.0)
    }

    /// The placement, and the thread count of `--cpu-class` (`None`: the usual default).
    pub fn resolve(&self) -> Result<(Placement, Option<usize>), CliError> {
        self.resolve_on(CoreClasses::detect())
    }

    /// [`PlacementArgs::resolve`] on `classes`; a note (the class is every CPU) is
    /// printed once per process.
    pub fn resolve_on(
        &self,
        classes: &CoreClasses,
    ) -> Result<(Placement, Option<usize>), CliError> {
        let mask = self.cpu_mask.unwrap_or_default().bits();
        let choice = classes.choose(self.cpu_class.into(), mask)?;
        if let Some(note) = &choice.note {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("{note}"));
        }
        let placement = Placement {
            cpu_mask: choice.mask,
            strict: self.cpu_strict,
            poll: self.poll,
        };
        Ok((placement, choice.threads))
    }
}

/// A flag value clap's own parsers do not check (shown after clap's `invalid value`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadValue {
    #[error("`{0}` is not a non-negative integer")]
    NotCount(String),
    #[error("values must be at least 1")]
    Zero,
    #[error("-pg takes two numbers, `pp,tg` (got `{0}`)")]
    Pg(String),
    #[error("expected 0 or 1")]
    NotBool,
}

/// llama.cpp's `0|1` booleans.
fn parse_01(s: &str) -> Result<bool, BadValue> {
    match s {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(BadValue::NotBool),
    }
}

/// llama-bench's test lists (`-p 512,128 -n 128`; `0` drops a kind of test).
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct TestLists {
    /// Prompt lengths (pp tests), comma-separated; 0 for none.
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',', default_value = "512",
          value_parser = count)]
    pub n_prompt: Vec<u32>,
    /// Generation lengths (tg tests), comma-separated; 0 for none.
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',', default_value = "128",
          value_parser = count)]
    pub n_gen: Vec<u32>,
    /// Depths, comma-separated: each test runs after this many tokens are in the cache
    /// (filled before the timer starts); 0 for an empty cache.
    #[arg(short = 'd', long = "n-depth", value_delimiter = ',', default_value = "0",
          value_parser = count)]
    pub n_depth: Vec<u32>,
}

impl TestLists {
    /// The tests llama-bench runs for these lists and `-pg`: for each depth in turn, pp,
    /// then tg, then pp+tg.
    pub fn tests(&self, pg: &[Test]) -> Result<Vec<Test>, CliError> {
        let pp = self
            .n_prompt
            .iter()
            .filter(|&&p| p > 0)
            .map(|&p| Test::pp(p));
        let tg = self.n_gen.iter().filter(|&&n| n > 0).map(|&n| Test::tg(n));
        let at_empty: Vec<Test> = pp.chain(tg).chain(pg.iter().copied()).collect();
        if at_empty.is_empty() {
            return Err(CliError::NoTests);
        }
        Ok(self
            .n_depth
            .iter()
            .flat_map(|&d| at_empty.iter().map(move |t| t.at_depth(d)))
            .collect())
    }
}

/// A list element that may be 0.
pub fn count(s: &str) -> Result<u32, BadValue> {
    s.trim()
        .parse()
        .map_err(|_| BadValue::NotCount(s.to_string()))
}

/// A count of at least 1 (threads, repetitions).
pub fn positive(s: &str) -> Result<u32, BadValue> {
    match count(s)? {
        0 => Err(BadValue::Zero),
        v => Ok(v),
    }
}

/// `-pg P,G`: a combined prompt + generation test.
pub fn parse_pg(s: &str) -> Result<Test, BadValue> {
    let v: Vec<u32> = s.split(',').map(positive).collect::<Result<_, _>>()?;
    match v[..] {
        [p, g] => Ok(Test::pg(p, g)),
        _ => Err(BadValue::Pg(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        lists: TestLists,
        #[command(flatten)]
        placement: PlacementArgs,
        #[arg(long, value_parser = parse_pg)]
        pg: Vec<Test>,
    }

    /// `--cpu-class` on a 1+5+2 phone (cpu7 prime, cpu2-6 mid, cpu0-1 little): a mask and
    /// a thread count, intersected with --cpu-mask, refused when they share no CPU.
    #[test]
    fn cpu_class_is_a_mask_and_a_thread_count() {
        use pocket_model::threadpool::core_class::{ClassSource, CoreClass};
        let class = |capacity, cpus: &[usize]| CoreClass {
            capacity,
            count: cpus.len(),
            cpus: cpus.to_vec(),
        };
        let phone = CoreClasses {
            source: ClassSource::Capacity,
            classes: vec![
                class(1024, &[7]),
                class(887, &[2, 3, 4, 5, 6]),
                class(291, &[0, 1]),
            ],
        };
        let on_phone = |argv: &[&str]| {
            let t = T::try_parse_from(argv).unwrap();
            t.placement
                .resolve_on(&phone)
                .map(|(p, threads)| (p.cpu_mask, threads))
        };
        assert_eq!(
            on_phone(&["t", "--cpu-class", "big"]).unwrap(),
            (0xfc, Some(6))
        );
        assert_eq!(
            on_phone(&["t", "--cpu-class", "prime"]).unwrap(),
            (0x80, Some(1))
        );
        assert_eq!(on_phone(&["t"]).unwrap(), (0, None));
        assert_eq!(
            on_phone(&["t", "-C", "0xf0", "--cpu-class", "big"]).unwrap(),
            (0xf0, Some(4))
        );
        let e = on_phone(&["t", "-C", "0x3", "--cpu-class", "big"]).unwrap_err();
        assert!(e.to_string().contains("share no CPU"), "{e}");
        assert!(T::try_parse_from(["t", "--cpu-class", "little"]).is_err());
    }

    #[test]
    fn lists_placement_and_pg_parse_into_types() {
        let t = T::try_parse_from(["t", "-p", "512,128", "-n", "0", "--pg", "4,2", "-C", "0x3"])
            .unwrap();
        assert_eq!(t.lists.n_prompt, [512, 128]);
        let want = [Test::pp(512), Test::pp(128), Test::pg(4, 2)];
        assert_eq!(t.lists.tests(&t.pg).unwrap(), want);
        assert_eq!(t.placement.placement().unwrap().cpu_mask, 3);
        assert_eq!(t.placement.placement().unwrap().poll, 50);
        assert!(!t.placement.cpu_strict);
        for bad in [
            &["t", "-p", "1,,2"][..],
            &["t", "-p", "x"],
            &["t", "--pg", "512"],
            &["t", "--pg", "1,2,3"],
            &["t", "--pg", "0,2"],
            &["t", "--cpu-strict", "2"],
            &["t", "--poll", "101"],
            &["t", "-C", "0xzz"],
        ] {
            assert!(T::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let strict = T::try_parse_from(["t", "--cpu-strict", "1", "--poll", "0"]).unwrap();
        assert!(strict.placement.placement().unwrap().strict && strict.placement.poll == 0);
        // Depths repeat every test, depth by depth (llama-bench's order).
        let deep = T::try_parse_from(["t", "-p", "8", "-n", "4", "-d", "0,64"]).unwrap();
        let names: Vec<String> = deep
            .lists
            .tests(&[])
            .unwrap()
            .iter()
            .map(|t| t.to_string())
            .collect();
        assert_eq!(names, ["pp8", "tg4", "pp8 @ d64", "tg4 @ d64"]);
        assert!(T::try_parse_from(["t", "-d", "-1"]).is_err());
        let none = T::try_parse_from(["t", "-p", "0", "-n", "0"]).unwrap();
        assert!(matches!(none.lists.tests(&[]), Err(CliError::NoTests)));
    }
}
