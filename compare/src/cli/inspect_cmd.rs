//! `pocket inspect FILE [--json]`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use pocket_model::gguf::GgufFile;

use super::CliResult;
use crate::inspect;

#[derive(Args)]
pub struct InspectArgs {
    /// The GGUF file.
    file: PathBuf,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Show every element of metadata arrays instead of the first few.
    #[arg(long)]
    full_arrays: bool,
}

pub fn run(args: InspectArgs) -> CliResult {
    let gguf = GgufFile::open(&args.file)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = inspect::to_json(&gguf, args.full_arrays);
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        inspect::write_text(
            &mut out,
            &args.file.display().to_string(),
            &gguf,
            args.full_arrays,
        )?;
    }
    Ok(())
}
