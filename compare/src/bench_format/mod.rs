//! llama-bench's output formats (`-o md|csv|json|jsonl|sql`), written byte for byte as
//! llama-bench prints them, and read back (json, jsonl, csv, md) into [`BenchRow`]s.
//!
//! Differences from llama-bench, all in corner cases its own output gets wrong: non-ASCII
//! text is written as UTF-8 in json (llama-bench escapes each byte as a broken `\uffffffXX`),
//! and a `'` in an sql value is doubled (llama-bench leaves it, breaking the statement).

use std::fmt::Write as _;

use crate::bench_row::{field_type, BenchRow, FieldType, FIELDS};

mod parse;
pub(crate) use parse::check_required;
pub use parse::{parse, parse_test_name, ParseError, Problem};

/// One of llama-bench's output formats (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Md,
    Csv,
    Json,
    Jsonl,
    Sql,
}

/// Prints `rows` in `format` exactly as llama-bench would.
pub fn write(rows: &[BenchRow], format: Format) -> String {
    match format {
        Format::Md => write_md(rows),
        Format::Csv => write_csv(rows),
        Format::Json => write_json(rows),
        Format::Jsonl => write_jsonl(rows),
        Format::Sql => write_sql(rows),
    }
}

// ---------------------------------------------------------------- writers

/// C++ `ostream << double` with default flags: `%g`, 6 significant digits.
pub fn fmt_g6(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v.is_infinite() {
            if v > 0.0 { "inf" } else { "-inf" }.into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{v:.5e}");
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mant), exp.abs())
    } else {
        trim(&format!("{v:.*}", (5 - exp) as usize))
    }
}

fn join<T>(v: &[T], f: impl Fn(&T) -> String) -> String {
    v.iter().map(f).collect::<Vec<_>>().join(", ")
}

fn escape_json(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) <= 0x1f => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn json_value(field: &str, value: &str) -> String {
    match field_type(field) {
        FieldType::String => format!("\"{}\"", escape_json(value)),
        FieldType::Bool => if value == "0" { "false" } else { "true" }.into(),
        _ => value.into(),
    }
}

/// How a row's members are laid out: llama-bench's `-o json` puts each on its own indented
/// line, its `-o jsonl` all on one (with no space after `samples_ns`, as llama-bench writes).
struct Layout {
    indent: &'static str,
    sep: &'static str,
    after_samples_ns: &'static str,
}

const JSON: Layout = Layout {
    indent: "    ",
    sep: ",\n",
    after_samples_ns: ",\n",
};
const JSONL: Layout = Layout {
    indent: "",
    sep: ", ",
    after_samples_ns: ",",
};

/// The members of one row's object, without its braces.
fn write_members(out: &mut String, row: &BenchRow, layout: &Layout) {
    let Layout { indent, sep, .. } = layout;
    for (field, value) in FIELDS.iter().zip(row.values()) {
        let _ = write!(
            out,
            "{indent}\"{field}\": {}{sep}",
            json_value(field, &value)
        );
    }
    let _ = write!(
        out,
        "{indent}\"samples_ns\": [ {} ]{}",
        join(&row.samples_ns, u64::to_string),
        layout.after_samples_ns
    );
    let _ = write!(
        out,
        "{indent}\"samples_ts\": [ {} ]",
        join(&row.samples_ts, |v| fmt_g6(*v))
    );
    // Fields llama-bench does not have (pocket's load_ms, peak_rss_bytes) follow.
    for (k, v) in &row.extra {
        let _ = write!(out, "{sep}{indent}\"{}\": {v}", escape_json(k));
    }
}

fn write_json(rows: &[BenchRow]) -> String {
    let mut out = String::from("[\n");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        out.push_str("  {\n");
        write_members(&mut out, row, &JSON);
        out.push_str("\n  }");
    }
    out.push_str("\n]\n");
    out
}

fn write_jsonl(rows: &[BenchRow]) -> String {
    let mut out = String::new();
    for row in rows {
        out.push('{');
        write_members(&mut out, row, &JSONL);
        out.push_str("}\n");
    }
    out
}

fn write_csv(rows: &[BenchRow]) -> String {
    let mut out = FIELDS.join(",");
    out.push('\n');
    for row in rows {
        out.push_str(&quoted_values(row, '"').join(","));
        out.push('\n');
    }
    out
}

fn write_sql(rows: &[BenchRow]) -> String {
    let mut out = String::from("CREATE TABLE IF NOT EXISTS llama_bench (\n");
    for (i, field) in FIELDS.iter().enumerate() {
        let ty = match field_type(field) {
            FieldType::String => "TEXT",
            FieldType::Bool | FieldType::Int => "INTEGER",
            FieldType::Float => "REAL",
        };
        let comma = if i + 1 < FIELDS.len() { "," } else { "" };
        let _ = writeln!(out, "  {field} {ty}{comma}");
    }
    out.push_str(");\n\n");
    for row in rows {
        let _ = writeln!(
            out,
            "INSERT INTO llama_bench ({}) VALUES ({});",
            FIELDS.join(", "),
            quoted_values(row, '\'').join(", ")
        );
    }
    out
}

/// The row's values, each between `quote`s with a `quote` inside doubled (CSV's and SQL's
/// string literals).
fn quoted_values(row: &BenchRow, quote: char) -> Vec<String> {
    let doubled = format!("{quote}{quote}");
    row.values()
        .iter()
        .map(|v| format!("{quote}{}{quote}", v.replace(quote, &doubled)))
        .collect()
}

/// The md columns llama-bench shows when a field differs from its default, in its order.
const MD_OPTIONAL: [&str; 23] = [
    "n_cpu_moe",
    "n_threads",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "n_batch",
    "n_ubatch",
    "type_k",
    "type_v",
    "main_gpu",
    "split_mode",
    "no_kv_offload",
    "flash_attn",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "load_mode",
    "lazy_mode",
    "embeddings",
    "no_op_offload",
    "no_host",
    "repack",
    "fit_target",
];

/// llama-bench's md column width (negative: left-aligned).
fn md_width(field: &str) -> i32 {
    match field {
        "model" => -30,
        "t/s" => 20,
        "size" | "params" => 10,
        "n_gpu_layers" => 3,
        "n_threads" | "n_batch" => 7,
        "n_ubatch" => 8,
        "type_k" | "type_v" | "split_mode" => 6,
        "load_mode" => 10,
        "flash_attn" => 3,
        "devices" => -12,
        "test" => 15,
        "no_op_offload" | "no_host" => 4,
        "repack" => 3,
        _ => {
            let w = (field.len() as i32).max(10);
            if field_type(field) == FieldType::String {
                -w
            } else {
                w
            }
        }
    }
}

/// md header names (llama-bench's `get_field_display_name`): (field, display).
const MD_NAMES: [(&str, &str); 15] = [
    ("n_gpu_layers", "ngl"),
    ("split_mode", "sm"),
    ("n_threads", "threads"),
    ("no_kv_offload", "nkvo"),
    ("flash_attn", "fa"),
    ("load_mode", "lm"),
    ("embeddings", "embd"),
    ("no_op_offload", "nopo"),
    ("no_host", "noh"),
    ("repack", "rpk"),
    ("devices", "dev"),
    ("tensor_split", "ts"),
    ("tensor_buft_overrides", "ot"),
    ("fit_target", "fitt"),
    ("fit_min_ctx", "fitc"),
];

fn md_display(field: &str) -> &str {
    MD_NAMES
        .iter()
        .find(|(f, _)| *f == field)
        .map_or(field, |(_, d)| d)
}

pub(super) fn md_field(display: &str) -> &str {
    MD_NAMES
        .iter()
        .find(|(_, d)| *d == display)
        .map_or(display, |(f, _)| f)
}

/// printf's `%*s`: pads to |width| bytes, left-aligned when width < 0.
fn pad(value: &str, width: i32) -> String {
    let fill = (width.unsigned_abs() as usize).saturating_sub(value.len());
    if width < 0 {
        format!("{value}{}", " ".repeat(fill))
    } else {
        format!("{}{value}", " ".repeat(fill))
    }
}

fn is_cpu_backend(backends: &str) -> bool {
    ["CPU", "BLAS", "ZenDNN"]
        .iter()
        .any(|b| backends.contains(b))
}

/// The md columns for `rows`: llama-bench's fixed ones plus each optional field that
/// some row sets to other than llama-bench's default (as llama-bench shows the
/// parameters given on its command line).
fn md_columns(rows: &[BenchRow]) -> Vec<&'static str> {
    let defaults = BenchRow::cpu_defaults().values();
    let cpu = rows.first().is_none_or(|r| is_cpu_backend(&r.backends));
    let mut cols = vec!["model", "size", "params", "backend"];
    if !cpu {
        cols.push("n_gpu_layers");
    }
    for field in MD_OPTIONAL {
        let i = FIELDS
            .iter()
            .position(|f| *f == field)
            .expect("known field");
        let differs = rows.iter().any(|r| r.values()[i] != defaults[i]);
        if differs || (field == "n_threads" && cpu) {
            cols.push(field);
        }
    }
    cols.extend(["test", "t/s"]);
    cols
}

fn md_value(row: &BenchRow, field: &str, values: &[String]) -> String {
    match field {
        "model" => row.model_type.clone(),
        "size" if row.model_size < 1 << 30 => {
            format!("{:.2} MiB", row.model_size as f64 / 1024.0 / 1024.0)
        }
        "size" => format!(
            "{:.2} GiB",
            row.model_size as f64 / 1024.0 / 1024.0 / 1024.0
        ),
        "params" if row.model_n_params < 1_000_000_000 => {
            format!("{:.2} M", row.model_n_params as f64 / 1e6)
        }
        "params" => format!("{:.2} B", row.model_n_params as f64 / 1e9),
        "backend" => row.backends.clone(),
        "test" => row.test_name(),
        "t/s" => {
            let (avg, sd) = if row.samples_ns.is_empty() {
                (row.avg_ts, row.stddev_ts)
            } else {
                let mut r = row.clone();
                r.set_samples_ns(row.samples_ns.clone());
                (r.avg_ts, r.stddev_ts)
            };
            format!("{avg:.2} ± {sd:.2}")
        }
        f => {
            let i = FIELDS.iter().position(|x| *x == f).expect("known field");
            values[i].clone()
        }
    }
}

fn write_md(rows: &[BenchRow]) -> String {
    let cols = md_columns(rows);
    let mut out = String::from("|");
    for c in &cols {
        let _ = write!(out, " {} |", pad(md_display(c), md_width(c)));
    }
    out.push_str("\n|");
    for c in &cols {
        let w = md_width(c);
        let dashes = "-".repeat(w.unsigned_abs() as usize - 1);
        let _ = write!(out, " {dashes}{} |", if w > 0 { ":" } else { "-" });
    }
    out.push('\n');
    for row in rows {
        let values = row.values();
        out.push('|');
        for c in &cols {
            // llama-bench widens t/s by one byte for the two-byte `±`.
            let w = md_width(c) + i32::from(*c == "t/s");
            let _ = write!(out, " {} |", pad(&md_value(row, c, &values), w));
        }
        out.push('\n');
    }
    let (commit, number) = rows.first().map_or(("unknown", 0), |r| {
        (r.build_commit.as_str(), r.build_number)
    });
    let _ = write!(out, "\nbuild: {commit} ({number})\n");
    out
}
