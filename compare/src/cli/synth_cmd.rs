//! `pocket synth --preset NAME --type TYPE -o FILE [--seed N]`: a GGUF of a published shape
//! with seeded random weights (see `pocket_model::synth`); `pocket synth --from MODEL
//! --keep-layers N -o FILE`: a real model cut to its first N layers (a self-speculation
//! draft, `pocket_model::synth::truncate`); `pocket synth --lora-for MODEL --lora-rank R
//! -o FILE`: a random LoRA adapter for MODEL in llama.cpp's format (`pocket_model::lora::synth`).
//! `--decision TYPE [--decision-temperature NAME=T,...]` makes the random model a native
//! decision model as llama.cpp's converter writes one (`pocket_model::synth::decision`).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pocket_model::gguf::GgufFile;
use pocket_model::lora::synth::{write_adapter, AdapterSpec};
use pocket_model::lora::Proj;
use pocket_model::synth::decision::DecisionSpec;
use pocket_model::synth::truncate::truncate_layers;
use pocket_model::synth::{self, Arch, BaseVocab, SynthError, SynthType};

use super::{CliError, CliResult};

#[derive(Args)]
pub struct SynthArgs {
    /// Shape: mnn-pocket-0.3b, qwen3-0.6b, qwen2.5-0.5b, smollm2-135m or custom.
    #[arg(long, required_unless_present_any = ["from", "lora_for"])]
    preset: Option<String>,
    /// Instead of random weights: copy this GGUF model cut to its first --keep-layers
    /// layers (its embedding, final norm and head kept): a draft model for speculative
    /// decoding by layer skipping.
    #[arg(
        long,
        value_name = "MODEL",
        requires = "keep_layers",
        conflicts_with = "preset"
    )]
    from: Option<PathBuf>,
    /// With --from: how many of its first layers to keep.
    #[arg(long, value_name = "N", requires = "from")]
    keep_layers: Option<usize>,
    /// Instead of a model: a random LoRA adapter for this base model, in llama.cpp's
    /// adapter format (for --lora).
    #[arg(long, value_name = "MODEL", conflicts_with_all = ["preset", "from"])]
    lora_for: Option<PathBuf>,
    /// With --lora-for: the adapter's rank.
    #[arg(long, value_name = "R", default_value_t = 8, requires = "lora_for")]
    lora_rank: usize,
    /// With --lora-for: adapter.lora.alpha [default: the rank, so the scale is the user's].
    #[arg(long, value_name = "ALPHA", requires = "lora_for")]
    lora_alpha: Option<f32>,
    /// With --lora-for: the adapted projections, comma-separated (q,k,v,o,gate,up,down).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "q,k,v,o,gate,up,down",
          value_parser = parse_proj, requires = "lora_for")]
    lora_targets: Vec<Proj>,
    /// With --lora-for: the product's size against each projection's output at scale 1.
    #[arg(long, value_name = "X", default_value_t = 0.08, requires = "lora_for")]
    lora_strength: f32,
    /// With --lora-for: tensor type, f32 or f16.
    #[arg(long, value_name = "TYPE", default_value = "f32", value_parser = ["f32", "f16"], requires = "lora_for")]
    lora_type: String,
    /// Weight type: f16, q8_0, q4_0, q4_1 or q4_k_m.
    #[arg(long = "type", default_value = "q8_0")]
    ty: String,
    /// Output GGUF file.
    #[arg(short, long)]
    output: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Qwen vocabulary to trim [default: $POCKET_CACHE/llama.cpp/models/ggml-vocab-qwen2.gguf].
    #[arg(long)]
    vocab_from: Option<PathBuf>,
    /// Override the architecture: qwen3, qwen2 or llama.
    #[arg(long)]
    arch: Option<String>,
    #[arg(long)]
    layers: Option<usize>,
    #[arg(long)]
    hidden: Option<usize>,
    #[arg(long)]
    heads: Option<usize>,
    #[arg(long)]
    kv_heads: Option<usize>,
    #[arg(long)]
    head_dim: Option<usize>,
    #[arg(long)]
    ffn: Option<usize>,
    #[arg(long)]
    vocab: Option<usize>,
    #[arg(long)]
    context: Option<u32>,
    /// Q4_1 in MNN's 64-element groups (two 32-blocks sharing d, m): 32 or 64
    /// [default: 64 for mnn-pocket-0.3b, 32 otherwise].
    #[arg(long)]
    q4_1_group: Option<u32>,
    /// Declare a native decision model of this type (`<arch>.decision.type`): openjev,
    /// lev and nimble also get llama.cpp's converter's systemone template (any other text
    /// is written as given, without a template).
    #[arg(long, value_name = "TYPE", conflicts_with_all = ["from", "lora_for"])]
    decision: Option<String>,
    /// With --decision: `<arch>.decision.temperature.NAME` = T, comma-separated NAME=T
    /// (e.g. choice=0.5,score.3_5=0.7,noul=2) [default: the converter's for openjev, none
    /// otherwise].
    #[arg(long, value_name = "NAME=T", value_delimiter = ',', value_parser = parse_temperature, requires = "decision")]
    decision_temperature: Vec<(String, f32)>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// `NAME=T` of --decision-temperature (any number: tests write bad ones on purpose).
fn parse_temperature(s: &str) -> Result<(String, f32), String> {
    let (name, t) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=T"))?;
    let t: f32 = t
        .trim()
        .parse()
        .map_err(|e| format!("`{t}` in `{s}`: {e}"))?;
    Ok((name.trim().to_string(), t))
}

fn default_vocab() -> PathBuf {
    let cache = std::env::var_os("POCKET_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/pocket")
        });
    cache.join("llama.cpp/models/ggml-vocab-qwen2.gguf")
}

pub fn run(args: SynthArgs) -> CliResult {
    if let Some(base) = &args.lora_for {
        return lora(&args, base);
    }
    if let (Some(from), Some(keep)) = (&args.from, args.keep_layers) {
        return truncate(from, keep, &args.output);
    }
    let name = args.preset.clone().unwrap_or_default();
    let mut preset = synth::preset(&name).ok_or(SynthError::UnknownPreset(name))?;
    let ty = SynthType::parse(&args.ty)?;
    let s = &mut preset.shape;
    if let Some(a) = &args.arch {
        s.arch = Arch::parse(a).ok_or_else(|| {
            SynthError::Shape(format!("unknown arch '{a}' (qwen3, qwen2, llama)"))
        })?;
    }
    let custom = args.layers.is_some()
        || args.hidden.is_some()
        || args.heads.is_some()
        || args.kv_heads.is_some()
        || args.head_dim.is_some()
        || args.ffn.is_some()
        || args.vocab.is_some()
        || args.arch.is_some();
    crate::overlay!(s, args; layers, hidden, heads, kv_heads, ffn, context);
    // head_dim follows hidden / heads unless given
    s.head_dim = match (args.head_dim, args.hidden.or(args.heads.map(|_| s.hidden))) {
        (Some(d), _) => d,
        (None, Some(_)) if s.heads > 0 => s.hidden / s.heads,
        _ => s.head_dim,
    };
    if let Some(v) = args.vocab {
        s.vocab = v;
        preset.regular = None; // all that fit before the specials
    }
    if custom && preset.name != "custom" {
        preset.model_name = format!("{} (modified shape)", preset.model_name);
    }
    match args.q4_1_group {
        None => {}
        Some(32) => preset.q4_1_group64 = false,
        Some(64) => preset.q4_1_group64 = true,
        Some(g) => return Err(CliError::Q4_1Group(g).into()),
    }
    synth::validate(&preset.shape)?;
    preset.decision = args.decision.clone().map(|kind| DecisionSpec {
        kind,
        temperatures: args.decision_temperature.clone(),
    });

    let vocab_path = args.vocab_from.clone().unwrap_or_else(default_vocab);
    let base = GgufFile::open(&vocab_path).map_err(|source| CliError::BaseVocab {
        path: vocab_path.clone(),
        source,
    })?;
    let base = BaseVocab::from_gguf(&base)?;

    let started = Instant::now();
    let file = File::create(&args.output).map_err(|source| CliError::File {
        action: "create",
        path: args.output.clone(),
        source,
    })?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .unwrap()
            .progress_chars("=> "),
        );
        b.set_message(format!("{} {}", preset.name, ty.name()));
        b
    };
    let result = synth::synthesize(
        &preset,
        ty,
        args.seed,
        &base,
        &mut out,
        &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    );
    bar.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(&args.output);
            return Err(e.into());
        }
    };
    drop(out);
    let types: Vec<String> = summary
        .types
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    eprintln!(
        "wrote {}: {} ({} {}{}), {} tensors ({}), {:.1} M parameters, {:.2} MiB in {:.1} s",
        args.output.display(),
        preset.name,
        preset.shape.arch.name(),
        ty.name(),
        match &preset.decision {
            Some(d) => format!(", decision model {:?}", d.kind),
            None => String::new(),
        },
        summary.n_tensors,
        types.join(", "),
        summary.n_params as f64 / 1e6,
        summary.bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--from MODEL --keep-layers N`.
fn truncate(from: &std::path::Path, keep: usize, output: &std::path::Path) -> CliResult {
    let src = GgufFile::open(from).map_err(|source| crate::Error::Load {
        path: from.to_path_buf(),
        source: source.into(),
    })?;
    let file = File::create(output).map_err(|source| CliError::File {
        action: "create",
        path: output.to_path_buf(),
        source,
    })?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    truncate_layers(&src, keep, &mut out).map_err(CliError::Truncate)?;
    eprintln!(
        "wrote {}: the first {keep} layers of {}",
        output.display(),
        from.display()
    );
    Ok(())
}

/// `q`, `k`, `v`, `o`, `gate`, `up`, `down`.
fn parse_proj(s: &str) -> Result<Proj, String> {
    Ok(match s.trim() {
        "q" => Proj::Q,
        "k" => Proj::K,
        "v" => Proj::V,
        "o" => Proj::Out,
        "gate" => Proj::Gate,
        "up" => Proj::Up,
        "down" => Proj::Down,
        _ => return Err(format!("`{s}` is not one of q, k, v, o, gate, up, down")),
    })
}

/// `--lora-for MODEL`.
fn lora(args: &SynthArgs, base_path: &std::path::Path) -> CliResult {
    let base = GgufFile::open(base_path).map_err(|source| crate::Error::Load {
        path: base_path.to_path_buf(),
        source: source.into(),
    })?;
    let spec = AdapterSpec {
        rank: args.lora_rank,
        alpha: args.lora_alpha.unwrap_or(args.lora_rank as f32),
        seed: args.seed,
        targets: args.lora_targets.clone(),
        ty: if args.lora_type == "f16" {
            pocket_kernels::GgmlType::F16
        } else {
            pocket_kernels::GgmlType::F32
        },
        strength: args.lora_strength,
    };
    let file_err = |action, source| CliError::File {
        action,
        path: args.output.clone(),
        source,
    };
    let file = File::create(&args.output).map_err(|e| file_err("create", e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let written = write_adapter(&base, &spec, &mut out)
        .and_then(|n| std::io::Write::flush(&mut out).map(|_| n));
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(&args.output);
            return Err(file_err("write", e).into());
        }
    };
    eprintln!(
        "wrote {}: a rank-{} LoRA adapter (alpha {}) for {}, {n} adapted matrices",
        args.output.display(),
        spec.rank,
        spec.alpha,
        base_path.display()
    );
    Ok(())
}
