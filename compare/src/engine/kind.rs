//! The engines pocket is compared against, by name: which exist, which are provisioned in
//! the cache, and how each is located. A new engine (MNN-LLM) is a variant here, an
//! [`Engine`] implementation, and a provisioning script (MNN-LLM's: [`Mnn`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use std::path::Path;

use super::{Engine, IkLlamaCpp, LlamaCpp, Mnn, Test};
use crate::llama_bench::Provisioned;
use crate::Result;
use pocket_model::Placement;

/// A reference engine. The declaration order is the order of columns in reports.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
pub enum EngineKind {
    /// Mainline llama.cpp (`compare/provision-llama.sh`, its native build).
    #[serde(rename = "llama.cpp")]
    #[value(name = "llama.cpp")]
    LlamaCpp,
    /// ik_llama.cpp, the CPU-performance fork (`compare/provision-ik-llama.sh`).
    #[serde(rename = "ik_llama.cpp")]
    #[value(name = "ik_llama.cpp")]
    IkLlamaCpp,
    /// MNN-LLM, the PyPI `mnn` wheel's `MNN.llm` (`compare/provision-mnn.sh`).
    #[serde(rename = "mnn")]
    #[value(name = "mnn")]
    Mnn,
}

impl EngineKind {
    /// Every engine, in report order.
    pub const ALL: [EngineKind; 3] = [
        EngineKind::LlamaCpp,
        EngineKind::IkLlamaCpp,
        EngineKind::Mnn,
    ];

    /// The engine's name in reports, receipts and `--engines`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::LlamaCpp => "llama.cpp",
            EngineKind::IkLlamaCpp => "ik_llama.cpp",
            EngineKind::Mnn => "mnn",
        }
    }

    /// The command that provisions the engine.
    pub fn provision(self) -> &'static str {
        match self {
            EngineKind::LlamaCpp => crate::llama_bench::PROVISION,
            EngineKind::IkLlamaCpp => super::ik_llama::PROVISION,
            EngineKind::Mnn => super::mnn::PROVISION,
        }
    }

    /// Whether the engine's benchmark tool is in the cache.
    pub fn is_provisioned(self) -> bool {
        match self {
            EngineKind::LlamaCpp => LlamaCpp::locate().is_ok(),
            EngineKind::IkLlamaCpp => IkLlamaCpp::locate().is_ok(),
            EngineKind::Mnn => Mnn::locate().is_ok(),
        }
    }

    /// The provisioned engines (what `pocket compare` runs without `--engines`).
    pub fn provisioned() -> Vec<EngineKind> {
        EngineKind::ALL
            .into_iter()
            .filter(|k| k.is_provisioned())
            .collect()
    }

    /// The engine from the cache, every run with `placement` where the engine takes it.
    pub fn locate(self, placement: Option<Placement>) -> Result<Box<dyn Reference>> {
        Ok(match self {
            EngineKind::LlamaCpp => {
                let mut e = LlamaCpp::locate()?;
                e.placement = placement;
                Box::new(e)
            }
            EngineKind::IkLlamaCpp => Box::new(IkLlamaCpp::locate()?),
            EngineKind::Mnn => Box::new(Mnn::locate()?),
        })
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a reference engine ran: its build and the flags every run got beyond the plan's
/// (`-m -t -p -n -r -o`), as stored in a receipt.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineInfo {
    /// The build's one-line description (`BUILD_INFO`).
    pub build: String,
    /// The flags of every run (`-rtr 1 -fa 1`, placement flags).
    #[serde(default)]
    pub options: Vec<String>,
}

/// An engine pocket is compared against: it benches, and says what it is.
pub trait Reference: Engine {
    fn kind(&self) -> EngineKind;
    fn info(&self) -> EngineInfo;
    /// Why the engine's benchmark cannot run `test`, if it cannot (checked for the whole
    /// plan before anything runs).
    fn refuses(&self, _test: Test) -> Option<&'static str> {
        None
    }
    /// Why the engine is not run on the model at `model`, if it is not (MNN-LLM runs only
    /// the MNN-Pocket shapes): the comparator skips those cells with a note.
    fn cannot_run(&self, _model: &Path) -> Option<String> {
        None
    }
    /// The checks before one run of `test` on `model`: an error where the engine refuses
    /// the test or the model file is missing.
    fn check_run(&self, model: &Path, test: Test) -> Result<()> {
        if let Some(why) = self.refuses(test) {
            let engine = self.kind().name();
            return Err(crate::Error::Unsupported { engine, test, why });
        }
        if !model.is_file() {
            return Err(crate::Error::ModelNotFound(model.to_path_buf()));
        }
        Ok(())
    }
}
