//! Sampling flags shared by the commands that generate (`run`, `chat`): llama.cpp's names
//! and defaults, except `--temp`, which defaults to greedy. The model and engine flags are
//! in `engine_args`.

use std::path::PathBuf;

use clap::Args;
use pocket_model::grammar::{Grammar, GrammarSpec, GrammarVocab};
use pocket_model::sampler::{Sampler, SamplerParams};
use pocket_model::tokenizer::Tokenizer;
use pocket_model::ModelError;

use super::spec_args::SpecArgs;
use super::CliError;

/// How the generated tokens are chosen, the same flags in `run` and `chat`.
#[derive(Args, Clone, Debug)]
pub struct DecodeArgs {
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub grammar: GrammarArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Sampling: penalties → top-k → top-p → min-p → temperature → draw (`pocket_model::sampler`).
#[derive(Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy (top-k/top-p/min-p then do nothing).
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
    /// Seed of the sampler's PRNG (same seed, same tokens).
    #[arg(short = 's', long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub filters: FilterArgs,
}

impl SamplingArgs {
    pub fn sampler(&self) -> Sampler {
        Sampler::new(SamplerParams {
            temp: self.temp,
            seed: Some(self.seed),
            ..self.filters.params()
        })
    }
}

/// The sampler's repeat penalty and top-k / top-p / min-p filters: llama.cpp's flags and
/// defaults, the same in every command that samples (`run`, `chat`, `serve`).
#[derive(Args, Clone, Debug)]
pub struct FilterArgs {
    /// Keep the k most likely tokens; 0 = off.
    #[arg(long, default_value_t = 40)]
    pub top_k: i32,
    /// Nucleus sampling threshold; 1.0 = off.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Minimum probability relative to the most likely token; 0.0 = off.
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalize repeated tokens; 1.0 = off.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// How many of the last tokens the repeat penalty looks at; -1 = all.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i32,
}

impl FilterArgs {
    /// These settings, the others [`SamplerParams`]'s defaults.
    pub fn params(&self) -> SamplerParams {
        SamplerParams {
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            ..Default::default()
        }
    }
}

/// Structured output (llama.cpp's flags): the reply must follow a GBNF grammar or a JSON
/// schema (`pocket_model::grammar`). At most one of the four.
#[derive(Args, Clone, Debug, Default)]
#[group(multiple = false)]
pub struct GrammarArgs {
    /// A GBNF grammar (llama.cpp's format, start rule `root`; llguidance Lark is taken
    /// too) the output must follow.
    #[arg(long, value_name = "GRAMMAR")]
    pub grammar: Option<String>,
    /// --grammar from a file.
    #[arg(long, value_name = "FILE")]
    pub grammar_file: Option<PathBuf>,
    /// A JSON schema the output must follow (`{}`: any JSON value).
    #[arg(short = 'j', long, value_name = "SCHEMA")]
    pub json_schema: Option<String>,
    /// --json-schema from a file (`-jf`).
    #[arg(long, value_name = "FILE")]
    pub json_schema_file: Option<PathBuf>,
}

impl GrammarArgs {
    /// What the flags ask for, files read; `None` without any.
    pub fn spec(&self) -> Result<Option<GrammarSpec>, crate::Error> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).map_err(|source| CliError::File {
                action: "read",
                path: path.clone(),
                source,
            })
        };
        let schema = |text: &str| GrammarSpec::json_schema_text(text).map_err(ModelError::from);
        Ok(Some(
            match (
                &self.grammar,
                &self.grammar_file,
                &self.json_schema,
                &self.json_schema_file,
            ) {
                (Some(g), ..) => GrammarSpec::Gbnf(g.clone()),
                (_, Some(f), ..) => GrammarSpec::Gbnf(read(f)?),
                (_, _, Some(j), _) => schema(j)?,
                (_, _, _, Some(f)) => schema(&read(f)?)?,
                _ => return Ok(None),
            },
        ))
    }

    /// The compiled grammar for `tok`'s vocabulary, if one was asked for; a grammar that
    /// does not compile is an error naming the problem.
    pub fn compile(&self, tok: &Tokenizer) -> Result<Option<Grammar>, crate::Error> {
        let Some(spec) = self.spec()? else {
            return Ok(None);
        };
        let vocab = GrammarVocab::new(tok).map_err(ModelError::from)?;
        Ok(Some(vocab.compile(&spec).map_err(ModelError::from)?))
    }
}

/// Holds `sampler` to a fresh start of `grammar` for the next reply (if there is one).
pub fn constrain(sampler: &mut Sampler, grammar: Option<&Grammar>) {
    sampler.set_constraint(grammar.map(Grammar::constraint));
}

/// llama.cpp's multi-letter short flags, which clap cannot declare, as their long forms.
pub fn long_form(arg: &std::ffi::OsStr) -> Option<&'static str> {
    Some(match arg.to_str()? {
        "-pg" => "--pg",
        "-ctk" => "--cache-type-k",
        "-ctv" => "--cache-type-v",
        "-sys" => "--system-prompt",
        "-md" => "--spec-draft-model",
        "-jf" => "--json-schema-file",
        _ => return None,
    })
}
