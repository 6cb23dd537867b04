//! The workload set's results directory: `receipt.json` and `report.md` (a table per model:
//! per workload, each engine's plain and speculative decode t/s, speed-up, acceptance and
//! tokens per step, and pocket's speculative rate over llama-server's), in
//! `results/<date>-<machine>-spec-workloads/`.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::report::{run_header, write_dir};
use super::server::Engine;
use super::spec_receipt::{
    EngineSummary, SpecModel, SpecReceipt, TARGET_COPY_SPEEDUP, TARGET_PROSE_FLOOR,
};
use crate::Result;

pub fn write_results_dir(receipt: &SpecReceipt, root: &Path) -> Result<PathBuf> {
    write_dir(
        &receipt.run,
        root,
        "spec-workloads",
        &[
            ("receipt.json", serde_json::to_string_pretty(receipt)?),
            ("report.md", report_md(receipt)),
        ],
    )
}

pub fn report_md(r: &SpecReceipt) -> String {
    let s = &r.settings;
    let mut out = run_header("speculative decoding: pocket serve vs llama-server", &r.run);
    let _ = writeln!(
        out,
        "- each request: the workload's prompt (the same token ids for every server), {} generated tokens, `{}`",
        s.n_predict, s.request
    );
    let _ = writeln!(
        out,
        "- every server: `-c {} -np 1 -t {}`, speculating ones also `{}`; fresh servers per workload; {} request(s) per server, the servers' order rotating\n",
        s.ctx_size,
        s.threads,
        s.spec_args.join(" "),
        s.repetitions
    );
    out.push_str(
        "t/s = a request's tokens after the first / its time after the first token (median \
         over the requests), plain = without speculation. Speed-up = spec t/s / plain t/s. \
         Acceptance = drafted tokens kept / drafted (the servers' `timings.draft_n_accepted` \
         / `draft_n`). Tokens/step = tokens after the first / decode steps, a step making \
         one token plus the drafts it kept. Same text: the speculative greedy text equals \
         the plain one. Targets (issue #16): speed-up ≥ 1.8× on the copy workloads, ≥ 0.95× \
         on the story (prose).\n\n",
    );
    for m in &r.models {
        model_table(&mut out, m);
    }
    out
}

fn model_table(out: &mut String, m: &SpecModel) {
    let _ = writeln!(out, "## {} ({:?} prompts)\n", m.model, m.prompt_format);
    out.push_str(
        "| workload | prompt tokens | engine | plain t/s | spec t/s | speed-up | acceptance \
         | tokens/step | same text | pocket spec / llama-server spec |\n",
    );
    out.push_str("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n");
    for w in &m.workloads {
        let ratio = w
            .pocket_spec_over_llama_server_spec
            .map_or("—".into(), |v| format!("{v:.2}×"));
        for (i, e) in [Engine::Pocket, Engine::LlamaServer].iter().enumerate() {
            let Some(s) = w.summary(*e) else { continue };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {:.2} | {} | {} |",
                w.workload.name(),
                w.prompt_tokens,
                e.name(),
                s.plain_tps,
                s.spec_tps,
                speedup(s, w.workload.copies()),
                s.acceptance
                    .map_or("—".into(), |a| format!("{:.0} %", a * 100.0)),
                s.tokens_per_step,
                if s.same_text { "yes" } else { "**no**" },
                if i == 0 { ratio.as_str() } else { "" },
            );
        }
    }
    out.push('\n');
}

/// The speed-up, marked when it misses the workload's target.
fn speedup(s: &EngineSummary, copies: bool) -> String {
    let target = if copies {
        TARGET_COPY_SPEEDUP
    } else {
        TARGET_PROSE_FLOOR
    };
    if s.speedup >= target {
        format!("{:.2}×", s.speedup)
    } else {
        format!("{:.2}× (< {target})", s.speedup)
    }
}
