//! `pocket bench`: llama-bench's command line and method on pocket's engine.
//!
//!   pocket bench -m MODEL[,MODEL...] [-p 512[,128]] [-n 128] [-pg 512,128] [-d 0[,4096]] [-r 5]
//!                [-t 2[,1]] [-o md|csv|json|jsonl|sql]
//!                [--cpu-mask HEX] [--cpu-strict 0|1] [--poll 0..100] [--cpu-class prime|big|all]
//!                [--breakdown] [--profile FILE.svg|FILE.pb] [--contention CPU]
//!                [--lora FILE] [--interleave]
//!
//! Lists are comma-separated as in llama-bench; `-p 0` / `-n 0` drop those tests; `-d`
//! runs every test again after that many tokens in the cache (`pp512 @ d4096`).
//! `--interleave` times the models' repetitions alternately in one process (with `--lora`,
//! the base model beside the adapted one, and the adapter's cost printed).

use std::path::PathBuf;

use clap::Args;

use super::engine_args::{parse_pg, positive, LoraArgs, PlacementArgs, TestLists};
use super::{CliError, CliResult};
use crate::bandwidth::ProbeBuffer;
use crate::bench_format::{self, Format};
use crate::engine::Test;
use crate::pocket_bench::{self, BenchOptions};

#[derive(Args, Debug, Clone)]
#[command(hide_possible_values = true)] // the docs list them
pub struct BenchArgs {
    /// Model file(s); repeat -m or separate with commas.
    #[arg(short, long = "model", required = true, value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    #[command(flatten)]
    pub tests: TestLists,
    /// Prompt + generation tests `pp,tg` (written `-pg` as in llama-bench); repeatable.
    #[arg(long = "pg", value_name = "PP,TG", value_parser = parse_pg)]
    pub pg: Vec<Test>,
    /// Repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value = "5", value_parser = positive)]
    pub reps: u32,
    /// Thread counts, comma-separated (default: physical cores; a --cpu-class's CPUs).
    #[arg(short = 't', long = "threads", value_delimiter = ',', value_parser = positive)]
    pub threads: Vec<u32>,
    /// Output format: md, csv, json, jsonl, sql.
    #[arg(short = 'o', long = "output", default_value = "md")]
    pub output: Format,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Per-operation time, weights GB/s (decode) and GOP/s (prefill) of the timed runs,
    /// measured in the engine; printed as a table, and a `breakdown` field in json/jsonl.
    #[arg(long)]
    pub breakdown: bool,
    /// Sampling CPU profile of the benchmark (after model load): FILE.svg for a
    /// flamegraph, FILE.pb for the pprof protobuf (`go tool pprof`).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Run every test with a busy loop pinned to CPU (the app's own work on a shared core).
    #[arg(long, value_name = "CPU")]
    pub contention: Option<u32>,
    /// LoRA adapters applied to every model benched (`--lora`, `--lora-scaled`).
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Time the models' repetitions alternately in one process (repetition 1 of each,
    /// then 2, ...), so a machine's drift slows all alike; with --lora, the model without
    /// adapters runs beside the adapted one and the adapter's cost is printed.
    #[arg(long)]
    pub interleave: bool,
    /// After every repetition of a decode test (tgN), read a 512 MiB buffer with the same
    /// threads (and once before the first), and print decode's share of the bandwidth
    /// measured around each repetition (a `roof` field in json/jsonl). The buffer adds
    /// 512 MiB to the run's peak RSS.
    #[arg(long, conflicts_with = "interleave")]
    pub roof: bool,
}

impl BenchArgs {
    /// The placement and accounting options of the run (bandwidth not yet probed), and
    /// the thread counts to bench (default: the physical cores, or a --cpu-class's CPUs).
    pub fn options(&self) -> Result<(BenchOptions, Vec<u32>), CliError> {
        let (placement, class_threads) = self.placement.resolve()?;
        let opts = BenchOptions {
            placement,
            breakdown: self.breakdown,
            bandwidth: None,
        };
        Ok((opts, threads_or_default(&self.threads, class_threads)))
    }
}

/// `-t`'s list, else a --cpu-class's CPU count, else the physical cores.
pub fn threads_or_default(given: &[u32], class_threads: Option<usize>) -> Vec<u32> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let t = class_threads.map_or_else(pocket_bench::default_threads, |t| t as u32);
    vec![t.max(1)]
}

pub fn run(args: BenchArgs) -> CliResult {
    let format = args.output;
    let tests = args.tests.tests(&args.pg)?;
    let (opts, threads) = args.options()?;
    if let Some(p) = &args.profile {
        crate::profiling::kind_of(p)?;
        if args.model.len() > 1 {
            return Err(CliError::ProfileOneModel.into());
        }
    }
    for m in &args.model {
        if !m.is_file() {
            return Err(crate::Error::ModelNotFound(m.clone()));
        }
    }
    if format == Format::Md {
        eprintln!("cores: {}", pocket_model::CoreClasses::detect());
    }
    if args.interleave {
        print!(
            "{}",
            bench_format::write(&interleaved(&args, &tests)?, format)
        );
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut probe_buf = None;
    for m in &args.model {
        let mut loaded = pocket_bench::load(m)?;
        // A test beyond the model's context is refused before any is timed.
        for &test in &tests {
            pocket_bench::check_fits(&loaded, test)?;
        }
        args.lora.attach(&mut loaded.model)?;
        let profile = match &args.profile {
            Some(p) => Some(crate::profiling::Profile::start(p)?),
            None => None,
        };
        let busy = crate::contention::busy(args.contention)?;
        if let Some(cpu) = args.contention {
            eprintln!("contention: a busy loop pinned to CPU {cpu} runs during every test");
        }
        for &t in &threads {
            for &test in &tests {
                let row = match args.roof && test.is_decode() {
                    true => {
                        let buf = probe_buf.get_or_insert_with(|| {
                            ProbeBuffer::new(crate::bandwidth::DEFAULT_BYTES)
                        });
                        let (mut row, roof) =
                            crate::roof::measure(&loaded, (test, t, args.reps), &opts, buf)?;
                        eprintln!("{}", roof.line(test, t));
                        row.extra.insert("roof".into(), roof.to_json());
                        row
                    }
                    false => pocket_bench::bench_test_with(&loaded, test, t, args.reps, &opts)?,
                };
                if format == Format::Md {
                    eprintln!(
                        "{} {} t{}: {:.2} ± {:.2} t/s, load {:.0} ms, peak RSS {:.1} MiB",
                        m.display(),
                        row.test_name(),
                        t,
                        row.avg_ts,
                        row.stddev_ts,
                        loaded.load_ms,
                        pocket_bench::self_peak_rss() as f64 / (1 << 20) as f64
                    );
                }
                rows.push(row);
            }
        }
        drop(busy);
        if let (Some(p), Some(path)) = (profile, &args.profile) {
            let n = p.finish()?;
            eprintln!("profile: {n} samples -> {}", path.display());
        }
    }
    // The read-bandwidth probe (a 512 MiB buffer) runs after the timed runs, so that it
    // neither disturbs them nor lands in their peak RSS.
    let mut tables = String::new();
    if opts.breakdown {
        let t = threads.iter().copied().max().unwrap_or(1);
        let bw = crate::bandwidth::probe(crate::bandwidth::DEFAULT_BYTES, t);
        match bw.threads {
            1 => eprintln!("read bandwidth {:.1} GB/s (1 thread)", bw.single_gbs),
            n => eprintln!(
                "read bandwidth {:.1} GB/s (1 thread), {:.1} GB/s ({n} threads)",
                bw.single_gbs, bw.multi_gbs
            ),
        }
        for row in &mut rows {
            let Some(b) = row.extra.get_mut("breakdown") else {
                continue;
            };
            let mut r: crate::breakdown::Report = serde_json::from_value(b.clone())?;
            r.read_bandwidth_gbs = Some(bw.for_threads(row.n_threads as u32));
            *b = serde_json::to_value(&r)?;
            let name = std::path::Path::new(&row.model_filename)
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            tables.push_str(&r.table(&format!("{name} {} t{}", row.test_name(), row.n_threads)));
        }
    }
    print!("{}", bench_format::write(&rows, format));
    // The breakdown tables follow md on stdout; with a machine format they go to stderr.
    if !tables.is_empty() {
        if format == Format::Md {
            print!("{tables}");
        } else {
            eprint!("{tables}");
        }
    }
    Ok(())
}

/// `--interleave`: every model (and with `--lora` its adapted copy after it) in one
/// process, each test's repetitions alternating between them
/// ([`pocket_bench::measure_interleaved`]). Half the repetitions run on one set of loaded
/// copies, half on fresh copies loaded in the reverse order while the first are still held
/// (so they land in other memory): on the VMs here two copies of one file in one process
/// decoded up to 14 % apart, steadily, whichever was loaded or run first (where their
/// weights landed in memory), so one placement per model would bias every ratio; two
/// draws per process halve that, and several processes average it out.
fn interleaved(
    args: &BenchArgs,
    tests: &[Test],
) -> Result<Vec<crate::bench_row::BenchRow>, crate::Error> {
    if args.profile.is_some() || args.breakdown {
        return Err(CliError::InterleaveAlone.into());
    }
    let (opts, threads) = args.options()?;
    let with_lora = !args.lora.specs().is_empty();
    // (file, adapted) in the rows' order.
    let entries: Vec<(&PathBuf, bool)> = args
        .model
        .iter()
        .flat_map(|m| {
            let copies: &[bool] = if with_lora { &[false, true] } else { &[false] };
            copies.iter().map(move |&a| (m, a))
        })
        .collect();
    let load = |(m, adapted): (&PathBuf, bool)| -> Result<pocket_bench::Loaded, crate::Error> {
        let mut l = pocket_bench::load(m)?;
        for &test in tests {
            pocket_bench::check_fits(&l, test)?;
        }
        if adapted {
            args.lora.attach(&mut l.model)?;
            l.info.model_type.push_str(" + LoRA");
        }
        Ok(l)
    };
    let busy = crate::contention::busy(args.contention)?;
    // rows[k][e]: case k (threads x tests) of entry e, its samples from both phases.
    let mut rows: Vec<Vec<crate::bench_row::BenchRow>> = Vec::new();
    let halves = [args.reps.div_ceil(2), args.reps / 2];
    let mut held: Option<Vec<Option<pocket_bench::Loaded>>> = None;
    for (phase, &reps) in halves.iter().enumerate().filter(|(_, &r)| r > 0) {
        let order: Vec<usize> = if phase == 0 {
            (0..entries.len()).collect()
        } else {
            (0..entries.len()).rev().collect()
        };
        let mut loaded: Vec<Option<pocket_bench::Loaded>> = entries.iter().map(|_| None).collect();
        for &e in &order {
            loaded[e] = Some(load(entries[e])?);
        }
        // The previous phase's copies are let go only now (see above).
        drop(held.replace(std::mem::take(&mut loaded)));
        let loaded = held.as_ref().expect("just set");
        let models: Vec<&pocket_bench::Loaded> = loaded.iter().flatten().collect();
        let mut k = 0;
        for &t in &threads {
            for &test in tests {
                let got = pocket_bench::measure_interleaved(&models, test, t, reps, &opts)?;
                if phase == 0 {
                    rows.push(got.into_iter().map(|m| m.row).collect());
                } else {
                    for (row, m) in rows[k].iter_mut().zip(got) {
                        let mut ns = row.samples_ns.clone();
                        ns.extend(m.row.samples_ns);
                        row.set_samples_ns(ns);
                    }
                }
                k += 1;
            }
        }
    }
    drop(busy);
    for case in &rows {
        for (row, (m, adapted)) in case.iter().zip(&entries) {
            eprintln!(
                "{}{} {} t{}: {:.2} ± {:.2} t/s",
                m.display(),
                if *adapted { " + LoRA" } else { "" },
                row.test_name(),
                row.n_threads,
                row.avg_ts,
                row.stddev_ts
            );
        }
        if with_lora {
            for pair in case.chunks_exact(2) {
                eprintln!("{}", lora_cost(&pair[0], &pair[1]));
            }
        }
    }
    Ok(rows.into_iter().flatten().collect())
}

/// The adapter's cost from interleaved rows of the base and the adapted model: the
/// ratio of their mean times and the spread of the per-repetition ratios (each pair
/// taken back to back).
pub fn lora_cost(
    base: &crate::bench_row::BenchRow,
    adapted: &crate::bench_row::BenchRow,
) -> String {
    let mut ratios: Vec<f64> = base
        .samples_ns
        .iter()
        .zip(&adapted.samples_ns)
        .map(|(&b, &a)| a as f64 / b as f64)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let pct = |r: f64| (r - 1.0) * 100.0;
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    format!(
        "lora cost {} t{}: {:+.1} % time a token (base {:.2} t/s, adapted {:.2} t/s; per repetition: median {:+.1} %, {:+.1} .. {:+.1} %)",
        base.test_name(),
        base.n_threads,
        pct(base.avg_ts / adapted.avg_ts),
        base.avg_ts,
        adapted.avg_ts,
        pct(median),
        pct(ratios.first().copied().unwrap_or(f64::NAN)),
        pct(ratios.last().copied().unwrap_or(f64::NAN)),
    )
}
